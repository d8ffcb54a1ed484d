"""Helpers the lab notebooks call: profiles, experiments as jobs, one results table, plots, claim checks.

``from coursekit import labs`` gives the common names below; each lab's own helpers are submodules
(``labs.gradient_descent``, ``labs.anatomy``, ``labs.numerics``, ``labs.loading``, ...).
"""

from coursekit.labs.claims import check_claim, loglog_slope, saturates, share_of_increases, time_to_target
from coursekit.labs.experiments import (
    Sweep,
    collect,
    engine_command,
    is_oom,
    run_sweep,
    submit_sweep,
    summarize_run,
    wait_all,
    wait_until_training,
)
from coursekit.labs.horovod import horovod_table
from coursekit.labs.participant import choose_pseudonym, job_name
from coursekit.labs.profiles import Profile, choose_profile
from coursekit.labs.recorded import load_gpu_ladder
from coursekit.labs.results import ResultsTable

__all__ = ["Profile", "ResultsTable", "Sweep", "check_claim", "check_ddp_script", "choose_profile",
           "choose_pseudonym", "collect", "engine_command", "horovod_table", "is_oom", "job_name", "load_gpu_ladder",
           "loglog_slope", "run_sweep", "saturates", "share_of_increases", "submit_sweep", "summarize_run",
           "time_to_target", "wait_all", "wait_until_training"]


_LAZY = {"check_ddp_script": "coursekit.labs.ddp_check"}  # imports torch: only when it is used


def __getattr__(name: str) -> object:
    """``labs.check_ddp_script`` (lab 06) without importing torch with every ``from coursekit import labs``."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
