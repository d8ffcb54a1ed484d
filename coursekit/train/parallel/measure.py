"""What a parallel run measures on every rank: local bytes of parameters, gradients and optimizer state
(the shards this rank actually holds), peak memory, pipeline busy time; and the full weights.

A sharded parameter (FSDP2, tensor parallel) is a ``DTensor``: its bytes here are those of the local
shard (``to_local()``), not of the global tensor. ``gather_ranks`` collects one record per rank on every
rank (``all_gather_object``), so that the rank that writes the summary holds them all.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

DTENSOR_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor")  # torch >= 2.5, older


def is_dtensor(tensor: Any) -> bool:
    """Is ``tensor`` a DTensor? Asked without importing DTensor (~1 s a process): none can exist before a
    sharding strategy imported its module."""
    for name in DTENSOR_MODULES:
        module = sys.modules.get(name)
        if module is not None and isinstance(tensor, module.DTensor):
            return True
    return False


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank holds (a DTensor's local shard)."""
    return tensor.to_local() if is_dtensor(tensor) else tensor


def tensor_bytes(tensors: Iterable[Any]) -> int:
    return sum(local(t).numel() * local(t).element_size() for t in tensors if isinstance(t, torch.Tensor))


def parameter_bytes(model: nn.Module) -> int:
    return tensor_bytes(model.parameters())


def gradient_bytes(model: nn.Module) -> int:
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_bytes(optimizer: Any) -> int:
    """Bytes of the optimizer state this rank holds (ZeRO-1: its partition, ``optimizer.optim``)."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps the local optimizer there
    return sum(tensor_bytes(state.values()) for state in inner.state.values())


def peak_memory_bytes(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def gather_ranks(record: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """Every rank's ``record``, in rank order, on every rank."""
    if world_size == 1 or not dist.is_initialized():
        return [record]
    records: list[Any] = [None] * world_size
    dist.all_gather_object(records, record)
    return records


def all_reduce_gradients(model: nn.Module, group: Any, size: int) -> None:
    """Average the gradients over ``group`` (the data-parallel ranks of tensor or pipeline parallelism)."""
    if size <= 1:
        return
    for param in model.parameters():
        if param.grad is not None:
            grad = local(param.grad)
            dist.all_reduce(grad, group=group)
            grad.div_(size)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded state dict on every rank of the model's meshes: DTensors gathered (a collective:
    every rank must call it), then copied to the CPU."""
    state = {}
    for key, value in model.state_dict().items():
        if is_dtensor(value):
            value = value.full_tensor()
        state[key] = value.detach().cpu().clone()
    return state


class StageClock:
    """Busy time of one pipeline stage (or of each naive stage) against the wall time of the steps.

    Steps after ``skip`` warm-up steps count. ``bubble = 1 - busy / wall`` per stage. On a CPU the busy time
    is host time; on a GPU it is measured with CUDA events around each chunk's kernels on the compute
    stream (a synchronisation there would also wait for the peers' send/recv)."""

    def __init__(self, stages: int, device: torch.device, skip: int = 1) -> None:
        self.device, self.skip, self.steps = device, skip, 0
        self.busy, self.wall = [0.0] * stages, 0.0
        self._step_busy = [0.0] * stages
        self._events: list[tuple[int, Any, Any]] = []  # GPU: (stage, start, end) CUDA events of this step

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def add(self, stage: int, seconds: float) -> None:
        self._step_busy[stage] += seconds

    def timed(self, stage: int, fn: Any) -> Any:
        """``fn`` wrapped so that its duration counts as ``stage``'s busy time."""
        def run(*args: Any, **kwargs: Any) -> Any:
            if self.device.type == "cuda":  # events on the compute stream: no synchronisation, no waiting for
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))  # a peer's send/recv
                start.record()
                result = fn(*args, **kwargs)
                end.record()
                self._events.append((stage, start, end))
                return result
            started = time.perf_counter()
            result = fn(*args, **kwargs)
            self.add(stage, time.perf_counter() - started)
            return result
        return run

    def end_step(self, wall_s: float) -> None:
        """Close a step of ``wall_s`` seconds (on a GPU: call after synchronising the device)."""
        for stage, start, end in self._events:
            self.add(stage, start.elapsed_time(end) / 1000)
        self._events = []
        self.steps += 1
        if self.steps > self.skip:
            self.busy = [b + s for b, s in zip(self.busy, self._step_busy, strict=True)]
            self.wall += wall_s
        self._step_busy = [0.0] * len(self._step_busy)

    def bubbles(self) -> list[float] | None:
        if self.wall <= 0:
            return None
        return [1 - b / self.wall for b in self.busy]


NO_BUBBLE = {"bubble_fraction": None, "bubble_fraction_theory": None, "stage_busy_s": None, "schedule_wall_s": None}


def bubble(stages: int | None, microbatches: int, busy: Any, wall: float | None,
           bubbles: list[float] | None) -> dict[str, Any]:
    """The summary's bubble fields: measured (mean over stages of 1 - busy / wall) and the theory
    (p-1)/(m+p-1); all None without stages."""
    if not stages:
        return dict(NO_BUBBLE)
    return {"bubble_fraction": statistics.fmean(bubbles) if bubbles else None,
            "bubble_fraction_theory": (stages - 1) / (microbatches + stages - 1),
            "stage_busy_s": busy, "schedule_wall_s": wall}


def sleep_ms(ms: float) -> None:
    if ms > 0:
        time.sleep(ms / 1000)


class _SleepInBackward(torch.autograd.Function):
    """Identity; its backward sleeps ``ms`` first (the emulated backward compute of a stage)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ms: float) -> torch.Tensor:
        ctx.ms = ms
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        sleep_ms(ctx.ms)
        return grad, None


class DelayedStage(nn.Module):
    """CPU emulation of stage compute (``--stage-delay-ms X``): forward sleeps X ms, backward 2X ms, around
    the stage's real (small) compute. Two CPU cores cannot run p stages' real compute in parallel; sleeps can."""

    def __init__(self, stage: nn.Module, delay_ms: float) -> None:
        super().__init__()
        self.stage, self.delay_ms = stage, delay_ms

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sleep_ms(self.delay_ms)
        out = self.stage(x)
        if self.delay_ms > 0 and out.requires_grad:
            out = _SleepInBackward.apply(out, 2 * self.delay_ms)
        return out
