"""How much of the gradient all-reduce do buckets hide behind the backward pass? A measurement for CPUs.

DDP starts a bucket's all-reduce as soon as its gradients are ready, while backward goes on producing the
next ones. On a 2-core machine a real backward and gloo's all-reduce fight for the same cores, so the
backward is *emulated*: ``layers`` gradients appear one after the other, each after ``compute_ms /
layers`` of sleep (a GPU computing while the network sends). The all-reduces are real (gloo).

    hidden = (backward alone + all-reduce alone - step with buckets) / all-reduce alone

(one bucket of every gradient starts after the whole backward: nothing hidden, about 0).
1 means the communication was completely hidden, 0 that it came after the compute. Measured here with
64 MB of gradients and about 290 ms of compute: 8 MB buckets hid about 60 % of the all-reduce.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from coursekit.train.parallel.process_group import DistContext, barrier, process_group, reduce_values

MIB = 2**20
FLOAT_BYTES = 4
DEFAULT_BUCKETS_MB = (64.0, 25.0, 8.0)
DEFAULT_REPEATS = 5


def _timed(ctx: DistContext, work: Any, repeats: int) -> float:
    """Median over ``repeats`` of the slowest rank's time of ``work()`` (ranks start together), in ms."""
    times = []
    for _ in range(repeats):
        barrier(ctx)
        started = time.perf_counter()
        work()
        times.append(reduce_values([time.perf_counter() - started], ctx, op="max")[0] * 1000)
    return statistics.median(times)


def _backward_with_buckets(grads: torch.Tensor, layers: int, layer_s: float, bucket_elems: int | None,
                           ctx: DistContext, communicate: bool = True) -> int:
    """Emulated backward: after each layer, start the all-reduce of the bucket if it is full; the bucket count."""
    per_layer = grads.numel() // layers
    pending, bucket_start = [], 0
    for layer in range(layers):
        time.sleep(layer_s)
        ready = (layer + 1) * per_layer if layer < layers - 1 else grads.numel()
        full = bucket_elems is not None and ready - bucket_start >= bucket_elems
        if communicate and ctx.is_distributed and (full or layer == layers - 1) and ready > bucket_start:
            pending.append(dist.all_reduce(grads[bucket_start:ready], async_op=True))
            bucket_start = ready
    for work in pending:  # optimizer.step() waits for the last bucket
        work.wait()
    return len(pending)


def measure_bucket_overlap(ctx: DistContext, grad_mb: float = 64.0, compute_ms: float = 300.0, layers: int = 32,
                           bucket_mbs: Sequence[float] = DEFAULT_BUCKETS_MB, repeats: int = DEFAULT_REPEATS) -> dict[str, Any]:
    """Step time for each bucket size, and the share of the all-reduce it hid; the same dict on every rank."""
    if grad_mb <= 0 or compute_ms < 0 or layers < 1 or repeats < 1 or any(b <= 0 for b in bucket_mbs):
        raise ValueError("grad_mb, bucket_mbs > 0, compute_ms >= 0, layers and repeats >= 1 are required")
    grads = torch.ones(int(grad_mb * MIB / FLOAT_BYTES))
    layer_s = compute_ms / 1000 / layers
    def all_reduce() -> None:
        if ctx.is_distributed:
            dist.all_reduce(grads)

    all_reduce()  # warm-up: gloo's first message of this size sets up its buffers
    comm_ms = _timed(ctx, all_reduce, repeats)
    backward_ms = _timed(ctx, lambda: _backward_with_buckets(grads, layers, layer_s, None, ctx, False), repeats)
    rows = []
    for bucket_mb in bucket_mbs:
        elems = int(bucket_mb * MIB / FLOAT_BYTES)
        step_ms = _timed(ctx, lambda e=elems: _backward_with_buckets(grads, layers, layer_s, e, ctx), repeats)
        hidden = (backward_ms + comm_ms - step_ms) / comm_ms if ctx.is_distributed and comm_ms > 0 else 0.0
        rows.append({"bucket_mb": bucket_mb, "step_ms": step_ms, "hidden_fraction": hidden,
                     "buckets": _backward_with_buckets(grads, layers, 0.0, elems, ctx) if ctx.is_distributed else 0})
    return {"world_size": ctx.world_size, "backend": ctx.backend, "grad_mb": grad_mb, "layers": layers,
            "compute_ms": compute_ms, "backward_ms": backward_ms, "allreduce_ms": comm_ms,
            "no_overlap_step_ms": backward_ms + comm_ms, "rows": rows}


def run_bucket_overlap(**kwargs: Any) -> dict[str, Any]:
    """Join the job's process group (gloo on CPUs), measure, leave: a function a lab submits as a job."""
    with process_group("cpu") as ctx:
        return measure_bucket_overlap(ctx, **kwargs)
