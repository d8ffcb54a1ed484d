"""Two sizes for every lab: ``cpu`` (CI, a laptop: tiny runs in seconds) and ``gpu`` (the course on a cluster).

``choose_profile()`` decides, in this order: its argument, ``$COURSEKIT_PROFILE``, ``profile = "..."`` in
the course folder's ``coursekit.toml``, and otherwise ``gpu`` when this kernel sees a CUDA GPU, ``cpu``
when it does not. On a cluster whose JupyterHub kernels run without a GPU (the jobs get them), the
instructor sets ``COURSEKIT_PROFILE=gpu`` or writes ``profile = "gpu"`` into coursekit.toml.

Each lab's numbers live in its module (``settings(profile)`` of ``coursekit.labs.lab02_batch_size``);
``profile.settings("02")`` returns them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coursekit.course import (  # noqa: F401 - DATA_DIR_ENV and data_dir re-exported
    ARGUMENT,
    COURSE_FILE,
    DATA_DIR_ENV,
    ENVIRONMENT,
    choose,
    course_config_path,
    data_dir,
)

PROFILE_ENV = "COURSEKIT_PROFILE"
PROFILE_NAMES = ("cpu", "gpu")

DESCRIPTIONS = {
    "cpu": "cpu profile: tiny experiments (small models on a few thousand real images where Fashion-MNIST is "
           "staged, else on generated data; a few steps) that finish in seconds on a CPU; GPU figures, where a lab "
           "needs them, are the recorded ones",
    "gpu": "gpu profile: course-size experiments (CIFAR-10 where staged, else Fashion-MNIST; ResNets, full sweeps) "
           "submitted as GPU jobs",
}


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
        """The named numbers of one lab (``"00"`` ... ``"09"``) in this profile (``coursekit.labs.lab_settings``)."""
        if _lab_settings is None:  # pragma: no cover - importing this module imports coursekit.labs first
            raise RuntimeError("no lab settings are known: import coursekit.labs")
        return _lab_settings(lab, self.name)

    def explain(self, *, gpu: str = "", cpu: str = "") -> None:
        """Show the paragraph (Markdown) written for this profile, and nothing for the other one.

        Text that only holds for one size of experiments goes here rather than into a markdown cell, so
        that a participant on a GPU never reads the paragraph that explains the CPU run, and CI never
        reads the GPU one: ``profile.explain(gpu="The ladder shows ...", cpu="On two cores ...")``.
        """
        text = gpu if self.is_gpu else cpu
        if not text:
            return
        try:
            from IPython.display import Markdown, display
        except ImportError:  # pragma: no cover - IPython comes with Jupyter
            print(text)
            return
        display(Markdown(text))

    def __str__(self) -> str:
        return self.describe()


# The lab modules sit above labs.kit (they use it), so kit cannot import them: coursekit.labs, which Python
# imports before any of its submodules, hands its ``lab_settings`` over here.
_lab_settings: Callable[[str, str], Any] | None = None


def register_lab_settings(lab_settings: Callable[[str, str], Any]) -> None:
    """Called once by ``coursekit.labs``: what ``Profile.settings`` answers with."""
    global _lab_settings
    _lab_settings = lab_settings


def gpu_visible() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return bool(torch.cuda.is_available())


def choose_profile(name: str | None = None) -> Profile:
    """The profile for this notebook (see the module docstring for the order of the choices)."""
    chosen = choose(name, PROFILE_ENV, "profile")
    if chosen.value is not None:
        where = {ARGUMENT: ("name", "chosen by the argument"),
                 ENVIRONMENT: (PROFILE_ENV, f"chosen by ${PROFILE_ENV}"),
                 COURSE_FILE: ("profile in coursekit.toml", f"chosen in {course_config_path()}")}[chosen.source]
        return Profile(_check_name(str(chosen.value), where[0]), where[1])
    if gpu_visible():
        return Profile("gpu", "a CUDA GPU is visible in this kernel")
    return Profile("cpu", f"no GPU is visible in this kernel (set {PROFILE_ENV}=gpu where the jobs get GPUs)")
