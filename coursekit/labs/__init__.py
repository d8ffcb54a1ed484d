"""Helpers the lab notebooks call: profiles, experiments as jobs, one results table, plots, claim checks.

``from coursekit import labs`` gives the common names below; each lab's own helpers are submodules
(``labs.lab01_gd_vs_sgd``, ``labs.lab03_gpu_memory``, ... ``labs.lab09_race``); shared helpers are in ``labs.kit``.
"""

from coursekit.labs.kit.claims import check_claim, loglog_slope, saturates, share_of_increases, time_to_target
from coursekit.labs.kit.experiments import (
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
from coursekit.labs.kit.participant import choose_pseudonym, job_name
from coursekit.labs.kit.profiles import Profile, choose_profile
from coursekit.labs.kit.recorded import load_gpu_ladder
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab06_data_parallel.horovod import horovod_table

__all__ = ["Profile", "ResultsTable", "Sweep", "check_claim", "check_ddp_script", "choose_profile",
           "choose_pseudonym", "collect", "engine_command", "horovod_table", "is_oom", "job_name", "load_gpu_ladder",
           "loglog_slope", "run_sweep", "saturates", "share_of_increases", "submit_sweep", "summarize_run",
           "time_to_target", "wait_all", "wait_until_training"]


_LAZY = {"check_ddp_script": "coursekit.labs.lab06_data_parallel.ddp_check"}  # imports torch: only when it is used


def __getattr__(name: str) -> object:
    """``labs.check_ddp_script`` (lab 06) without importing torch with every ``from coursekit import labs``."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
