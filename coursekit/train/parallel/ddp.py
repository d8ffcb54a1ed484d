"""Data parallelism with ``DistributedDataParallel``: every rank holds the whole model, gradients are averaged.

What DDP does, in the order it happens:

1. the constructor broadcasts rank 0's parameters and buffers, so every replica starts equal;
2. it groups the gradients into *buckets* of about ``bucket_cap_mb`` MiB, in reverse order of the
   parameters (the order backward produces them);
3. during backward, as soon as every gradient of a bucket is ready, the bucket's all-reduce starts
   asynchronously, overlapping the rest of the backward pass; ``optimizer.step()`` waits for the last.

Small buckets start communicating early but pay a latency per message; one huge bucket cannot overlap.
``no_sync()`` skips the all-reduce (gradient accumulation: only the last micro-batch synchronises).
SyncBatchNorm (batch statistics over every rank) runs on GPUs only.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from coursekit.train.parallel.process_group import DistContext

STRATEGIES = ("ddp",)
OPTIONS = {"ddp": ("sync_batchnorm",)}  # (every strategy takes --bucket-cap-mb: zero1 runs DDP too)
DEFAULT_BUCKET_CAP_MB = 25.0  # DDP's own default
SYNC_BATCHNORM_ON_CPU = ("sync_batchnorm: torch's SyncBatchNorm runs on GPUs only (NCCL); this run is on the "
                         "CPU (gloo): drop sync_batchnorm / --sync-batchnorm")


def wrap(model: nn.Module, ctx: DistContext, *, bucket_cap_mb: float | None = None, sync_batchnorm: bool = False,
         process_group: Any = None) -> nn.Module:
    """DDP around ``model`` (already on ``ctx.device``) when there are several processes; else ``model``."""
    if bucket_cap_mb is not None and not bucket_cap_mb > 0:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb} must be a positive number of MiB")
    if not ctx.is_distributed:
        return model
    if sync_batchnorm:
        if ctx.device.type != "cuda":
            raise ValueError(SYNC_BATCHNORM_ON_CPU)
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=process_group)
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, process_group=process_group,
                                   bucket_cap_mb=DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb)


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    """The engine's entry: DDP over the data-parallel group of ``ctx`` (a ``ParallelContext``).

    Reads ``cfg.bucket_cap_mb`` and ``cfg.sync_batchnorm`` (either may be missing: DDP's defaults)."""
    return wrap(model, ctx.dist, bucket_cap_mb=getattr(cfg, "bucket_cap_mb", None),
                sync_batchnorm=getattr(cfg, "sync_batchnorm", False), process_group=ctx.group("dp"))


def gradient_megabytes(model: nn.Module) -> float:
    """MiB of gradients one step all-reduces (trainable parameters only)."""
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    return sum(p.numel() * p.element_size() for p in inner.parameters() if p.requires_grad) / 2**20


def watch_buckets(model: nn.Module) -> list[tuple[int, int]]:
    """Record ``(bucket index, bytes)`` of every bucket DDP all-reduces; call before the first forward.

    A communication hook that does DDP's own all-reduce and notes the bucket. DDP builds its buckets for
    the first backward from the parameters' order and rebuilds them once, in the order gradients arrived,
    at the second step; the first bucket is kept small (1 MiB) so that communication starts early."""
    if not isinstance(model, DistributedDataParallel):
        raise ValueError(f"watch_buckets needs a DistributedDataParallel model, not {type(model).__name__}")
    seen: list[tuple[int, int]] = []

    def hook(state, bucket):  # no annotations: DDP checks them against the real (non-string) types
        buffer = bucket.buffer()
        seen.append((bucket.index(), buffer.numel() * buffer.element_size()))
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(model.process_group, hook)
    return seen
