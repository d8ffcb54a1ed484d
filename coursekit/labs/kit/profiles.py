"""Two sizes for every lab: ``cpu`` (CI, a laptop: tiny runs in seconds) and ``gpu`` (the course on a cluster).

``choose_profile()`` decides, in this order: its argument, ``$COURSEKIT_PROFILE``, ``profile = "..."`` in
the course folder's ``coursekit.toml``, and otherwise ``gpu`` when this kernel sees a CUDA GPU, ``cpu``
when it does not. On a cluster whose JupyterHub kernels run without a GPU (the jobs get them), the
instructor sets ``COURSEKIT_PROFILE=gpu`` or writes ``profile = "gpu"`` into coursekit.toml.

Each lab's numbers live in :mod:`coursekit.labs.kit.settings`; ``profile.settings("02")`` returns them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from coursekit.course import course_config_path

PROFILE_ENV = "COURSEKIT_PROFILE"
PROFILE_NAMES = ("cpu", "gpu")
DATA_DIR_ENV = "COURSEKIT_DATA_DIR"

DESCRIPTIONS = {
    "cpu": "cpu profile: tiny experiments (generated data, small models, a few steps) that finish in seconds "
           "on a CPU; GPU figures, where a lab needs them, are the recorded ones",
    "gpu": "gpu profile: course-size experiments (CIFAR-10, ResNets, full sweeps) submitted as GPU jobs",
}


def _toml_profile() -> str | None:
    path = course_config_path()
    if not path.is_file():
        return None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    with open(path, "rb") as handle:
        value = tomllib.load(handle).get("profile")
    return str(value) if value is not None else None


def _check_name(name: str, source: str) -> str:
    if name not in PROFILE_NAMES:
        raise ValueError(f"{source}={name!r} is not a profile: use one of {', '.join(PROFILE_NAMES)}")
    return name


@dataclass(frozen=True)
class Profile:
    """Which size of experiments this notebook runs, and why that size was chosen."""

    name: str
    reason: str

    @property
    def is_gpu(self) -> bool:
        return self.name == "gpu"

    @property
    def is_cpu(self) -> bool:
        return self.name == "cpu"

    def describe(self) -> str:
        return DESCRIPTIONS[self.name]

    def settings(self, lab: str) -> Any:
        """The named numbers of one lab (``"00"`` ... ``"05"``) in this profile."""
        from coursekit.labs.kit.settings import lab_settings

        return lab_settings(lab, self.name)

    def __str__(self) -> str:
        return self.describe()


def gpu_visible() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


def choose_profile(name: str | None = None) -> Profile:
    """The profile for this notebook (see the module docstring for the order of the choices)."""
    if name is not None:
        return Profile(_check_name(name, "name"), "chosen by the argument")
    from_env = os.environ.get(PROFILE_ENV)
    if from_env:
        return Profile(_check_name(from_env, PROFILE_ENV), f"chosen by ${PROFILE_ENV}")
    from_toml = _toml_profile()
    if from_toml:
        return Profile(_check_name(from_toml, "profile in coursekit.toml"), f"chosen in {course_config_path()}")
    if gpu_visible():
        return Profile("gpu", "a CUDA GPU is visible in this kernel")
    return Profile("cpu", f"no GPU is visible in this kernel (set {PROFILE_ENV}=gpu where the jobs get GPUs)")


def data_dir(default: str = "data") -> str:
    """Where course datasets live (CIFAR-10 for the gpu profile): ``$COURSEKIT_DATA_DIR`` or ``<course>/data``."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return explicit
    from coursekit.course import course_path  # the shared folder `coursekit instructor setup` writes

    return str(course_path("data_dir", default))
