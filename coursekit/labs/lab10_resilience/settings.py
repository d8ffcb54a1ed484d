"""Lab 10's numbers: :class:`ResilienceSettings`, one frozen dataclass whose typed fields are the lab's settings in
the order ``profile.settings("10")`` prints them; :func:`settings` gives them as the dict every lab's
``settings(profile)`` returns."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from coursekit.labs.kit.settings import job_options, workshop_budget

GPUS = 2  # GPUs the notebook needs at once in the gpu profile (the clinic's two ranks)
SCRIPT_PATHS = {"resume": "lab10_resilience/train_resume.py"}


@dataclass(frozen=True)
class ResilienceSettings:
    """Lab 10's settings in one profile, field by field in the order they print."""

    job: dict[str, Any]  # options of every submission (``submit(..., **s.job)``)
    timeout_s: int  # how long a cell waits for its jobs
    scripts: dict[str, str]  # the participant's scripts, relative to the notebook folder
    budget: dict[str, Any] | None  # the workshop's GPU budget (gpu profile; None: not shown)

    def as_dict(self) -> dict[str, Any]:
        """The fields in order (``budget`` only where there is one)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "budget" or self.budget is not None}


def typed_settings(profile: str) -> ResilienceSettings:
    """Lab 10's settings in ``profile`` ("cpu" or "gpu")."""
    if profile == "cpu":
        return ResilienceSettings(job=job_options(profile, "00:10:00"), timeout_s=300, scripts=SCRIPT_PATHS,
                                  budget=None)
    return ResilienceSettings(job=job_options(profile, "00:20:00"), timeout_s=1200, scripts=SCRIPT_PATHS,
                              budget=workshop_budget({"all of the lab's jobs": (1, 1.0)}))


def settings(profile: str) -> dict[str, Any]:
    """Lab 10's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("10")`` shows them."""
    return typed_settings(profile).as_dict()
