"""Lab 06, section 5: gradient buckets and overlap. Runs inside a job of N processes: step time for several
``bucket_cap_mb`` and for gradient accumulation with and without ``no_sync``, beside compute alone and one
all-reduce alone."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Sequence
from typing import Any

from coursekit.labs.kit.results import ResultsTable

ONE_BUCKET_MB = 1000.0  # larger than any model of the lab: every gradient in a single bucket
MB = 2**20
FLOAT_BYTES = 4


def _median_time(run: Any, repeats: int, warmup: int, synchronize: Any = None) -> float:
    times = []
    for index in range(warmup + repeats):
        start = time.perf_counter()
        run()
        if synchronize is not None:
            synchronize()
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _delay_layer(milliseconds: float) -> Any:
    """Identity forward; its backward sleeps ``milliseconds``: a layer whose gradient a GPU computes
    while the CPU is free (so that gloo's communication threads can run meanwhile, as NCCL's do)."""
    import torch

    class _Sleep(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            time.sleep(milliseconds / 1e3)
            return grad

    class Delay(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return _Sleep.apply(x)

    return Delay()


def bucket_overlap(bucket_caps_mb: Sequence[float] = (ONE_BUCKET_MB, 25.0, 4.0), accumulation: int = 4,
                   width: int = 1024, depth: int = 8, batch: int = 8, backward_ms_per_layer: float = 10.0,
                   repeats: int = 4, warmup: int = 1, device: str = "auto") -> list[dict[str, Any]]:
    """Median step times of a ``depth`` x ``width`` MLP under DDP on this rank (run it in a job of N ranks).

    Rows: ``compute only`` (DDP's ``no_sync``: no communication), ``all-reduce only`` (one all-reduce
    of every gradient at once, no compute), one row per ``bucket_cap_mb``, and gradient accumulation
    over ``accumulation`` micro-batches synchronising every micro-batch vs only the last (``no_sync``).
    ``hidden`` = the share of the all-reduce time that did not add to the step (overlap). With
    ``backward_ms_per_layer`` > 0 each layer's backward also sleeps that long: on a CPU the compute of
    a GPU is emulated so that the processor is free to communicate, as it is on a GPU node."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from coursekit.train.parallel import process_group as distributed

    with distributed.process_group(device) as ctx:
        if not ctx.is_distributed:
            raise RuntimeError("bucket_overlap needs several processes: submit it with n_gpu=2 or more")
        torch.manual_seed(0)
        layers: list[Any] = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
            if backward_ms_per_layer > 0:
                layers.append(_delay_layer(backward_ms_per_layer))
        net = torch.nn.Sequential(*layers).to(ctx.device)
        params = sum(p.numel() for p in net.parameters())
        x = torch.randn(batch, width, device=ctx.device)
        synchronize = torch.cuda.synchronize if ctx.device.type == "cuda" else None

        def step(model: Any, sync: bool = True) -> None:
            with contextlib.nullcontext() if sync else model.no_sync():
                model(x).square().mean().backward()

        def timed(run: Any) -> float:
            return _median_time(run, repeats, warmup, synchronize)

        rows = []
        base = DistributedDataParallel(net, bucket_cap_mb=25.0)
        compute = timed(lambda: step(base, sync=False))
        flat = torch.zeros(params, device=ctx.device)
        comm = timed(lambda: dist.all_reduce(flat))
        rows.append({"setting": "compute only (no_sync)", "step_ms": 1e3 * compute})
        rows.append({"setting": f"all-reduce only ({params * FLOAT_BYTES / MB:.0f} MB at once)", "step_ms": 1e3 * comm})
        for cap in bucket_caps_mb:
            model = DistributedDataParallel(net, bucket_cap_mb=cap)
            seconds = timed(lambda model=model: step(model))
            label = "one bucket" if cap >= ONE_BUCKET_MB else f"buckets of {cap:g} MB"
            rows.append({"setting": label, "bucket_cap_mb": cap, "step_ms": 1e3 * seconds,
                         "hidden": (compute + comm - seconds) / comm})
        model = DistributedDataParallel(net, bucket_cap_mb=ONE_BUCKET_MB)  # every sync costs a whole all-reduce
        for use_no_sync in (False, True):
            def accumulate(model: Any = model, use_no_sync: bool = use_no_sync) -> None:
                for micro in range(accumulation):
                    step(model, sync=not use_no_sync or micro == accumulation - 1)
            seconds = timed(accumulate)
            label = (f"{accumulation} micro-batches, " + ("no_sync until the last" if use_no_sync else "sync every one"))
            rows.append({"setting": label + " (one bucket)", "step_ms": 1e3 * seconds,
                         "accumulation": accumulation, "no_sync": use_no_sync})
        for row in rows:
            row.update({"rank": ctx.rank, "world_size": ctx.world_size, "params": params,
                        "device": str(ctx.device), "backward_ms_per_layer": backward_ms_per_layer})
        base = model = accumulate = None  # drop every DDP wrapper (the closures hold some) ...
        gc.collect()  # ... and free their reducers (reference cycles)
        distributed.barrier(ctx)  # leave the group together (a rank leaving alone can make gloo abort)
        return rows


def bucket_table(results: Sequence[Any], rank: int = 0) -> ResultsTable:
    """Rank ``rank``'s rows of :func:`bucket_overlap` (``results``: its rows, or ``job.results()``)."""
    rows = [r for item in results for r in (item if isinstance(item, list) else [item])]
    mine = [r for r in rows if r["rank"] == rank]
    return ResultsTable(mine, columns=["setting", "step_ms", "hidden"],
                        title=f"DDP step times on rank {rank} of {mine[0]['world_size'] if mine else '?'} (median)")
