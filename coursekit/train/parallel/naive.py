"""Naive model parallelism: one process, the model's layers split over several devices.

Stage ``i`` (a run of blocks, ``ModelSpec.split``) lives on device ``i``; the activations are copied
from device to device in forward, the gradients back in backward. Only one device works at any time:
with p stages each is idle (p-1)/p of the step. That idle time is measured here per stage: its forward
time plus its backward time (from the moment the gradient reaches the stage's output to the moment the
last gradient of its parameters is written), against the wall time of forward + backward.

On a CPU the stages are two "cpu" stages (``--pp`` to change), and ``--stage-delay-ms`` emulates their
compute (forward X ms, backward 2X ms): the measurement shows the idle time, the devices being one.
On GPUs the forward times are synchronised per stage; the backward times are taken when autograd reaches
the stage on the host, an approximation (kernels run asynchronously).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from coursekit.train.models import model_spec
from coursekit.train.parallel.measure import DelayedStage, StageClock, bubble, full_state_dict
from coursekit.train.parallel.pipeline import stage_problems

STRATEGIES = ("naive",)
OPTIONS = {"naive": ("pp", "stage_delay_ms")}
CPU_STAGES = 2  # naive split on a CPU: two "cpu" stages in one process


def stages(cfg: Any) -> int:
    """Stages of the naive split: ``--pp``, else one per visible GPU (at least 2), else 2 CPU stages."""
    if cfg.pp:
        return cfg.pp
    gpus = torch.cuda.device_count() if cfg.device != "cpu" and torch.cuda.is_available() else 0
    return max(gpus, CPU_STAGES)


def problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    if world_size is None:
        return stage_problems(cfg, stages(cfg))
    if world_size > 1:
        return [f"parallel='naive' splits the layers inside one process; this run has {world_size} "
                "processes: launch one process (or use 'pipeline')"]
    return []


class _BackwardStart(torch.autograd.Function):
    """Identity that notes when the gradient reaches a stage's output (its backward begins)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, runner: Any, stage: int) -> torch.Tensor:
        ctx.runner, ctx.stage = runner, stage
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.runner.backward_started[ctx.stage] = time.perf_counter()
        return grad, None, None


class NaiveSplit(nn.Module):
    """The whole model (``self.model``: state-dict keys unchanged) run stage by stage over ``devices``."""

    def __init__(self, model: nn.Module, parts: list[nn.Module], devices: list[torch.device], delay_ms: float) -> None:
        super().__init__()
        self.model, self.devices = model, devices
        self._stages = [DelayedStage(p, delay_ms) if delay_ms else p for p in parts]
        for part, device in zip(parts, devices, strict=True):
            part.to(device)
        self.clock = StageClock(len(parts), devices[0])
        self.backward_started = [0.0] * len(parts)
        self.backward_ended = [0.0] * len(parts)
        self._forward_started = 0.0
        self._forward_busy = [0.0] * len(parts)
        for index, part in enumerate(parts):
            for param in part.parameters():
                param.register_post_accumulate_grad_hook(lambda _p, i=index: self._grad_written(i))

    def _grad_written(self, stage: int) -> None:
        now = time.perf_counter()
        self.backward_ended[stage] = max(self.backward_ended[stage], now)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled()):
            for stage, device in zip(self._stages, self.devices, strict=True):
                x = stage(x.to(device))
            return x.to(self.devices[0])
        self.finish_step()  # the previous step's backward is over by now
        self._forward_started = time.perf_counter()
        for index, (stage, device) in enumerate(zip(self._stages, self.devices, strict=True)):
            started = time.perf_counter()
            x = stage(x.to(device))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self._forward_busy[index] += time.perf_counter() - started
            x = _BackwardStart.apply(x, self, index)
        return x.to(self.devices[0])

    def finish_step(self) -> None:
        """Book the last forward + backward into the clock (called at the next forward and by the summary)."""
        if not self._forward_started or not all(self.backward_ended):
            return
        for index in range(len(self._stages)):
            backward = max(self.backward_ended[index] - self.backward_started[index], 0.0)
            self.clock.add(index, self._forward_busy[index] + backward)
        self.clock.end_step(max(self.backward_ended) - self._forward_started)
        self._forward_started = 0.0
        self.backward_ended = [0.0] * len(self._stages)
        self._forward_busy = [0.0] * len(self._stages)

    def stage_times(self) -> dict[str, Any]:
        self.finish_step()
        return {"busy_s": list(self.clock.busy), "wall_s": self.clock.wall, "bubbles": self.clock.bubbles()}


def stage_devices(stages: int, device: torch.device) -> list[torch.device]:
    """One GPU per stage when there are enough, else every stage on ``device`` (the CPU)."""
    if device.type == "cuda" and torch.cuda.device_count() >= stages:
        return [torch.device("cuda", i) for i in range(stages)]
    return [device] * stages


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    spec = model_spec(cfg.model)
    if spec.split is None:
        raise ValueError(f"parallel='naive': model={cfg.model!r} declares no pipeline split points")
    count = stages(cfg)
    return NaiveSplit(model, spec.split(model, count), stage_devices(count, ctx.device), cfg.stage_delay_ms)


# ----------------------------------------------------------------------------- summary and --save-weights


def summary_extras(cfg: Any, pctx: Any, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The stages and their measured idle time (one process: ``ranks[0]``), no schedule."""
    times = ranks[0].get("stage") or {}
    count = len(times.get("busy_s", []))
    return {"pp": count or pctx.size("pp"), "microbatches": cfg.microbatches, "pipeline_schedule": None,
            **bubble(count, 1, times.get("busy_s"), times.get("wall_s"), times.get("bubbles"))}


def full_state(model: nn.Module, pctx: Any) -> dict[str, torch.Tensor] | None:
    """The whole model's state dict (``NaiveSplit.model``: the serial model's keys)."""
    state = full_state_dict(getattr(model, "model", model))
    return state if pctx.holds_value else None
