"""Run training scripts for the AMP checker, with recorders around them: one server imports torch once and forks a
child per run (``python amp_runner.py``; ``--run REQUEST`` for one run in this process), as every served runner
does (``kit/script_runner.py``, loaded by its path: this file imports nothing from coursekit).

What it records: the layers' compute and weight dtypes and whether autocast was on, the backward passes (and
when each began), the steps the optimizers took, and what the GradScalers did (created, enabled, scale() calls,
the scale after each update()). Importing torch._dynamo (which the first optimizer imports) is done once here.
"""

from __future__ import annotations

import runpy
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - the first optimizer imports it: import it once here, not in every child
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

MAX_LAYER_KINDS = 32  # distinct (layer, autocast, dtypes) entries kept


def new_record() -> dict[str, Any]:
    return {"layers": [], "backwards": 0, "backward_times": [], "applied": [], "finite_after": [],
            "scalers": [], "scale_calls": 0, "updates": [], "cuda": False}


def install(record: dict[str, Any]) -> None:
    """Hooks and wrappers that fill `record` while the script runs."""

    def on_forward(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        weight = next(module.parameters(recurse=False), None)
        if weight is None or not isinstance(output, torch.Tensor) or len(record["layers"]) >= MAX_LAYER_KINDS:
            return
        device = output.device.type
        on = torch.is_autocast_enabled(device)
        entry = [type(module).__name__, on, str(torch.get_autocast_dtype(device)) if on else None,
                 str(output.dtype), str(weight.dtype), device]
        if entry not in record["layers"]:
            record["layers"].append(entry)

    register_module_forward_hook(on_forward)
    original_backward = torch.autograd.backward

    def recording_backward(*args: Any, **kwargs: Any) -> Any:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the time between two backward passes is then one whole step
        record["backward_times"].append(time.perf_counter())
        record["backwards"] += 1
        return original_backward(*args, **kwargs)

    torch.autograd.backward = recording_backward

    def on_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        record["applied"].append(record["backwards"])
        record["finite_after"].append(all(bool(torch.isfinite(p).all()) for g in optimizer.param_groups
                                          for p in g["params"]))

    register_optimizer_step_post_hook(on_step)
    scaler_class = torch.amp.GradScaler
    original_init, original_scale, original_update = scaler_class.__init__, scaler_class.scale, scaler_class.update

    def recording_init(self: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        enabled = bool(self.is_enabled())  # a disabled scaler keeps no scale
        record["scalers"].append({"device": str(getattr(self, "_device", "?")), "enabled": enabled,
                                  "init_scale": float(getattr(self, "_init_scale", 1.0)) if enabled else 1.0})

    def recording_scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        record["scale_calls"] += 1
        return original_scale(self, outputs)

    def recording_update(self: torch.amp.GradScaler, new_scale: Any = None) -> None:
        original_update(self, new_scale)
        if self.is_enabled():
            record["updates"].append([record["backwards"], float(self.get_scale())])

    scaler_class.__init__, scaler_class.scale, scaler_class.update = recording_init, recording_scale, recording_update


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the scripts' folders take its place in the children
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "kit" / "script_runner.py"))["main"](new_record, install)
