"""This process's place in the run and how ranks talk: device, process group, collectives.

``init_distributed`` reads who launched the process (``coursekit.launch.launch_info``: torchrun, srun,
submitit's local executor, or one process), refuses a world size the job was not submitted for
(``coursekit.launch.check_world_size``), pins this rank's GPU and joins the process group: NCCL on GPUs,
gloo on CPUs. Every helper below is a no-op when there is one process.

A rank that died or hangs does not keep the others waiting until the job's time limit: the rendezvous
and every collective time out after ``COURSEKIT_DIST_TIMEOUT_S`` seconds (default ``DEFAULT_TIMEOUT_S``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from coursekit.launch import check_world_size, launch_info

DEFAULT_TIMEOUT_S = 300  # rendezvous and every collective: a dead or stuck rank ends the run after this
TIMEOUT_ENV = "COURSEKIT_DIST_TIMEOUT_S"
DEVICE_PREFERENCES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None  # "nccl" | "gloo" | None (one process, no process group)
    device: torch.device = torch.device("cpu")
    launcher: str = "single"
    owns_group: bool = False  # True when init_distributed created the process group (cleanup() leaves it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def pick_device(device_pref: str, local_rank: int) -> torch.device:
    """``auto`` = this rank's GPU when CUDA is there, else the CPU."""
    if device_pref not in DEVICE_PREFERENCES:
        raise ValueError(f"device={device_pref!r}: use one of {DEVICE_PREFERENCES}")
    if device_pref == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is visible: use device='cpu' or 'auto'")
    if device_pref == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def collective_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds a rendezvous or a collective may wait for the other ranks (``COURSEKIT_DIST_TIMEOUT_S``)."""
    env = os.environ if env is None else env
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return float(DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return seconds


def init_distributed(device_pref: str = "auto", env: Mapping[str, str] | None = None,
                     timeout_s: float | None = None) -> DistContext:
    """Join the process group when the launcher started several processes; pin this rank's GPU.

    Raises :class:`coursekit.launch.WorldSizeError` before any rendezvous when the job asked for another world size.
    ``timeout_s`` (default: ``COURSEKIT_DIST_TIMEOUT_S`` or ``DEFAULT_TIMEOUT_S``) bounds the rendezvous
    and every collective, so that a rank that died makes the others fail instead of waiting forever.
    """
    info = launch_info(env)
    check_world_size(info, env)
    timeout = timeout_s if timeout_s is not None else collective_timeout_s(env)
    device = pick_device(device_pref, info.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend, owns_group = None, False
    if info.world_size > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if not dist.is_initialized():
            owns_group = True
            dist.init_process_group(
                backend, init_method=f"tcp://{info.master_addr}:{info.master_port}", rank=info.rank,
                world_size=info.world_size, timeout=datetime.timedelta(seconds=timeout),
                device_id=device if device.type == "cuda" else None)
    return DistContext(info.rank, info.local_rank, info.world_size, info.local_world_size, backend, device,
                       info.launcher, owns_group)


def cleanup() -> None:
    """Leave the process group (safe to call when there is none)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------- collectives


def barrier(ctx: DistContext) -> None:
    if ctx.is_distributed:
        dist.barrier()


def all_reduce_(tensor: torch.Tensor, ctx: DistContext, op: str = "sum") -> torch.Tensor:
    """In-place all-reduce (``sum``, ``mean``, ``max`` or ``min``) of a tensor on this rank's device."""
    if not ctx.is_distributed:
        return tensor
    ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    dist.all_reduce(tensor, op=ops[op])
    if op == "mean":
        tensor /= ctx.world_size
    return tensor


def reduce_values(values: Sequence[float | torch.Tensor], ctx: DistContext, op: str = "sum") -> list[float]:
    """All-reduce a few scalars in one message and return them as floats (one host sync)."""
    packed = torch.stack([torch.as_tensor(v, dtype=torch.float64).to(ctx.device).reshape(()) for v in values])
    return [float(v) for v in all_reduce_(packed, ctx, op).cpu()]


def broadcast_object(obj: object, ctx: DistContext, src: int = 0) -> object:
    """Rank ``src``'s object on every rank (e.g. the run folder rank 0 chose)."""
    if not ctx.is_distributed:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src, device=ctx.device if ctx.backend == "nccl" else None)
    return holder[0]


# ---------------------------------------------------------------- models under DDP


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The bare module inside DDP and/or torch.compile."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def no_sync(model: torch.nn.Module, skip_sync: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` for non-final micro-batches of an accumulation; a null context otherwise."""
    inner = getattr(model, "_orig_mod", model)  # look through torch.compile's wrapper
    if skip_sync and isinstance(inner, torch.nn.parallel.DistributedDataParallel):
        return inner.no_sync()
    return contextlib.nullcontext()


@contextlib.contextmanager
def process_group(device_pref: str = "auto") -> Iterator[DistContext]:
    """``with process_group() as ctx:`` — init on entry, leave the group on exit."""
    ctx = init_distributed(device_pref)
    try:
        yield ctx
    finally:
        cleanup()
