"""What a person reads: a start line, one line per epoch, a progress bar when someone watches, the summary;
and the facts about the machine that go into the summary record."""

from __future__ import annotations

import math
import os
import platform
import sys
from typing import Any, TextIO

import torch

PROGRESS_MIN_INTERVAL_S = 0.5
CONTAINER_ENVS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")  # set by apptainer/singularity exec: the image


def system_info(device: torch.device) -> dict[str, Any]:
    """Device name and the versions that explain a measurement; the Python that ran and the container image it ran
    in (None outside one): which environment a job had (lab 10)."""
    info: dict[str, Any] = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda,
                            "cudnn_version": None, "python_version": platform.python_version(),
                            "hostname": platform.node(), "python_executable": sys.executable,
                            "container": next((os.environ[k] for k in CONTAINER_ENVS if os.environ.get(k)), None)}
    if device.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(device)
        info["cudnn_version"] = torch.backends.cudnn.version()
    else:
        info["device_name"] = f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    return info


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


class Console:
    """Rank 0's human-readable output (stdout) and progress bar (stderr); silent on other ranks."""

    def __init__(self, enabled: bool, progress: str, total_steps: int, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self.bar = None
        if enabled and _want_progress(progress):
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total_steps, unit="step", file=sys.stderr, dynamic_ncols=True,
                                mininterval=PROGRESS_MIN_INTERVAL_S, leave=False)
            except ImportError:  # tqdm is in the "lab" extra; without it, epoch lines only
                self.bar = None

    def print(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def advance(self, steps: int = 1, start: int | None = None) -> None:
        if self.bar is not None:
            if start is not None:
                self.bar.n = start
            self.bar.update(steps)

    def postfix(self, **values: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)

    def epoch_line(self, record: dict[str, Any], epochs: int) -> None:
        acc = record.get("train_acc")
        self.print(f"epoch {record['epoch']}/{epochs}  train_loss {_fmt(record['train_loss'], '.4f')}"
                   f"  train_acc {_fmt(None if acc is None else 100 * acc, '.1f', '%')}"
                   f"  val_loss {_fmt(record.get('val_loss'), '.4f')}"
                   f"  val_acc {_fmt(None if record.get('val_acc') is None else 100 * record['val_acc'], '.1f', '%')}"
                   f"  {_fmt(record.get('images_per_s_global'), ',.0f')} img/s  {record['epoch_time_s']:.1f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _want_progress(progress: str) -> bool:
    if progress == "on":
        return True
    if progress == "off":
        return False
    return sys.stderr.isatty() and not os.environ.get("CI")
