"""Helpers the lab notebooks call: profiles, experiments as jobs, one results table, plots, claim checks.

``from coursekit import labs`` gives the common names below; each lab's own helpers are submodules
(``labs.lab01_gd_vs_sgd``, ``labs.lab03_gpu_memory``, ... ``labs.lab09_race``); shared helpers are in ``labs.kit``.

Each lab module declares the lab once, ``LAB = Lab(...)`` (``labs.kit.lab``: number, slug, title, notebook,
GPUs, script folders, recordings, exercises), read from its text without importing it (most import torch);
``lab_declarations()`` gives them, and every list of labs derives from them. Each lab module also holds the
lab's numbers: ``settings(profile)`` (what every experiment runs in the ``cpu`` and ``gpu`` profiles, its
workshop budget) and ``GPUS`` (the declaration's ``gpus``). ``LABS`` maps "00" ... "10" to those modules,
imported when first used; ``lab_settings("02", "cpu")`` is what ``profile.settings("02")`` returns.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from types import ModuleType

from coursekit.jobs.registry import set_current_lab
from coursekit.labs.kit.claims import (
    check_claim,
    loglog_slope,
    percent,
    saturates,
    share_of_increases,
    signed,
    time_to_target,
)
from coursekit.labs.kit.datasets import on_standin
from coursekit.labs.kit.energy import energy_columns, energy_note  # labs 02, 04, 06
from coursekit.labs.kit.experiments import (
    Sweep,
    collect,
    engine_command,
    is_oom,
    jobs_share_gpus,
    run_sweep,
    submit_sweep,
    summarize_run,
    wait_all,
    wait_until_training,
)
from coursekit.labs.kit.lab import Lab, declared_labs
from coursekit.labs.kit.participant import choose_pseudonym, job_name
from coursekit.labs.kit.predict import predict, reveal
from coursekit.labs.kit.profiles import PROFILE_NAMES, Profile, choose_profile, register_lab_settings
from coursekit.labs.kit.recorded import load_recording
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import Settings
from coursekit.labs.kit.ticket import Question, exit_ticket
from coursekit.labs.lab06_data_parallel.horovod import horovod_table

__all__ = ["LABS", "Profile", "Question", "ResultsTable", "Sweep", "check_claim", "choose_profile", "choose_pseudonym",
           "collect", "energy_columns", "energy_note", "engine_command", "jobs_share_gpus", "exit_ticket", "horovod_table", "is_oom",
           "job_name", "lab_declarations", "lab_gpus", "lab_settings", "load_recording", "loglog_slope", "on_standin",
           "percent", "predict", "reveal", "run_sweep", "saturates", "share_of_increases", "signed", "submit_sweep", "summarize_run",
           "time_to_target", "wait_all", "wait_until_training"]  # + every lab's checkers (_LAZY, below)


@functools.cache
def lab_declarations() -> dict[str, Lab]:
    """Every lab's declaration (``LAB`` of its module), "00" ... "10" -> :class:`Lab`, read without importing
    the labs."""
    return declared_labs()


class _Labs(Mapping[str, ModuleType]):
    """``LABS["02"]``: lab 02's module (``settings``, ``GPUS``), imported on first use; the labs are the declared
    ones."""

    def __getitem__(self, lab: str) -> ModuleType:
        return importlib.import_module(lab_declarations()[lab].module)

    def __iter__(self) -> Iterator[str]:
        return iter(lab_declarations())

    def __len__(self) -> int:
        return len(lab_declarations())


LABS: Mapping[str, ModuleType] = _Labs()


def _check_lab(lab: str) -> str:
    if lab not in lab_declarations():
        raise ValueError(f"lab={lab!r} is not a lab: use one of {', '.join(lab_declarations())}")
    return lab


def lab_settings(lab: str, profile: str) -> Settings:
    """The settings of ``lab`` ("00" ... "10") in ``profile`` ("cpu" or "gpu"). Every notebook asks for its
    lab's settings first: the jobs this kernel submits from then on record that lab (the instructor's room
    view shows who is at which lab)."""
    _check_lab(lab)
    if profile not in PROFILE_NAMES:
        raise ValueError(f"profile={profile!r} is not a profile: use one of {', '.join(PROFILE_NAMES)}")
    set_current_lab(lab)
    return Settings(lab, profile, LABS[lab].settings(profile))


register_lab_settings(lab_settings)


def lab_gpus(lab: str) -> int:
    """GPUs the notebook of ``lab`` ("00" ... "10") needs at once in the gpu profile (its declaration's)."""
    return lab_declarations()[_check_lab(lab)].gpus


# the code exercises' checkers, from the labs' declarations (Lab.exercises): labs.check_* -> the module defining
# it, imported when first used (the checkers import torch)
_LAZY = {name: module for lab in lab_declarations().values() for name, module in lab.checkers.items()}
__all__ += sorted(_LAZY)


def __getattr__(name: str) -> object:
    """``labs.check_ddp_script`` (lab 06) without importing torch with every ``from coursekit import labs``."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "LAB_MODULES":  # {"00": "lab00_cluster", ...}: the declared slugs
        return {number: lab.slug for number, lab in lab_declarations().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
