"""coursekit: deep-learning labs on GPU clusters, jobs from the notebook through submitit and Slurm.

The public names below are imported on first use, so ``import coursekit`` stays cheap inside jobs
(the training engine does not pay for submitit, and a missing optional part fails only when used).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {  # name -> module that defines it
    "gpu_jobs_submitter": "coursekit.jobs.submit",
    "submit_jobs": "coursekit.jobs.submit",
    "submit_function": "coursekit.jobs.submit",
    "list_jobs": "coursekit.jobs.handle",
    "get_job": "coursekit.jobs.handle",
    "Job": "coursekit.jobs.handle",
    "JobFailedError": "coursekit.jobs.handle",
    "SlurmError": "coursekit.slurm_cli",
    "load_site": "coursekit.sites",
    "display_slurm_queue": "coursekit.jobs.queue_view",
    "search_log": "coursekit.jobs.logs",
    "read_metrics": "coursekit.metrics",
    "TrainConfig": "coursekit.train.config",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module_name = _PUBLIC.get(name)
    if module_name is None:
        raise AttributeError(f"module 'coursekit' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise AttributeError(f"coursekit.{name} is not available: {module_name} is missing") from error
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
