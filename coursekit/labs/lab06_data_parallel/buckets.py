"""Lab 06, section 5: gradient buckets and overlap. Runs inside a job of N processes: step time for several
``bucket_cap_mb`` and for gradient accumulation with and without ``no_sync``, beside compute alone and one
all-reduce alone; with ``compression``, the same in bf16 (DDP's ``bf16_compress_hook``: half the bytes).

Between the GPUs of one node NCCL's links (NVLink, PCIe peer-to-peer, shared memory) are so fast that there is
little to hide. ``SOCKET_ENV`` makes NCCL talk over TCP sockets on the loopback interface instead, as it would
between nodes without InfiniBand: a job submitted with it shows what buckets and compression do where the
network is slow next to the compute. (gloo, the CPU backend, always talks over TCP.)"""

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
# NCCL over TCP sockets on one node: no peer-to-peer, no shared memory, no InfiniBand; the loopback interface
SOCKET_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket",
              "NCCL_SOCKET_IFNAME": "lo"}
COMPRESSED = "bf16 compression"  # in the settings of the rows that all-reduce bf16 gradients
# The network claims (gpu profile): over sockets an all-reduce costs at least SOCKETS_SLOWER times more per MB than
# over the node's own links; the best smaller buckets make a step faster than one bucket by at least OVERLAP_SHARE
# of the smaller of compute and all-reduce (the most an overlap could hide); the bf16 all-reduce (half the bytes)
# takes at most BF16_TIME of the fp32 one.
SOCKETS_SLOWER, OVERLAP_SHARE, BF16_TIME = 3.0, 0.25, 0.7
# The claim over the node's own links (gpu profile): the all-reduce alone is under LINKS_ALLREDUCE_SHARE of the
# fastest bucket row's step, and the bucket rows' steps are within LINKS_SPREAD of each other.
LINKS_ALLREDUCE_SHARE, LINKS_SPREAD = 0.15, 0.05


def transport(backend: str, env: dict[str, str]) -> str:
    """How the ranks' gradients travel, in words: gloo over TCP, NCCL over sockets (``SOCKET_ENV``), or NCCL
    over whatever links it finds."""
    if backend == "gloo":
        return "gloo over TCP"
    if all(env.get(name) == value for name, value in SOCKET_ENV.items() if name != "NCCL_SOCKET_IFNAME"):
        return "NCCL over TCP sockets"
    return "NCCL over the node's links"


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


def hidden_share(compute: float, allreduce: float, step: float) -> float:
    """The time overlap saved, as a share of the all-reduce alone: (compute + all-reduce − step) / all-reduce.
    1: all hidden behind the compute; 0 or less: overlapping saved nothing, the step took as long as compute and
    all-reduce one after the other or longer (DDP's own work costs a little more). DDP starts each bucket's
    all-reduce as soon as the bucket is ready, during the backward: this measures what that saved, not the order.
    A row must use the all-reduce it sends: the bf16 one for bf16 compression, or the bytes compression saved
    would count as hidden."""
    return (compute + allreduce - step) / allreduce


def ddp_bucket_sizes(model: Any) -> list[int] | None:
    """The bytes of each bucket a DDP model uses, last layers first: DDP's logging data (``rebuilt_bucket_sizes``
    once it rebuilt its buckets after the first steps, else ``bucket_sizes``), else the assignment torch computes
    for the model's parameters and cap (with DDP's small first bucket where the cap was left at its default,
    ``bucket_cap_mb=None``); None where neither is available (another torch)."""
    try:
        data = model._get_ddp_logging_data()
        text = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
        if text:
            return [int(v) for v in str(text).split(",") if v.strip()]
    except Exception:  # noqa: BLE001 - a private API: fall back below
        pass
    try:
        import torch.distributed as dist

        params = [p for p in reversed(list(model.module.parameters())) if p.requires_grad]
        cap = int(model.bucket_bytes_cap)
        first = dist._DEFAULT_FIRST_BUCKET_BYTES if getattr(model, "bucket_bytes_cap_default", False) else cap
        indices, _ = dist._compute_bucket_assignment_by_size(params, [first, cap] if first < cap else [cap],
                                                              [False] * len(params))
        return [sum(params[i].numel() * params[i].element_size() for i in bucket) for bucket in indices]
    except Exception:  # noqa: BLE001 - a private API: no sizes rather than no row
        return None


def _sizes_text(sizes: Sequence[int]) -> str:
    """"1 bucket of 512 MB", "8 buckets of 64 MB", "4 buckets of 16-32 MB"."""
    mbs = [size / MB for size in sizes]
    low, high = min(mbs), max(mbs)
    span = f"{low:.0f} MB" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}-{high:.0f} MB"
    return f"{len(mbs)} bucket{'s' if len(mbs) > 1 else ''} of {span}"


def bucket_label(cap_mb: float, sizes: Sequence[int] | None) -> str:
    """A bucket row's setting: the cap it asked for and, where known, the buckets DDP made of it."""
    cap = f"cap {cap_mb:g} MB" + (" (one bucket)" if cap_mb >= ONE_BUCKET_MB else "")
    return f"{cap}: {_sizes_text(sizes)}" if sizes else cap


def bucket_layouts(table: Sequence[dict[str, Any]]) -> list[tuple[list[float], tuple[int, ...] | None]]:
    """The fp32 bucket rows grouped by the buckets DDP made: (caps in MB, bucket sizes in bytes or None), in the
    table's order. Caps that gave the same buckets share one group."""
    groups: dict[Any, list[float]] = {}
    for row in table:
        if row.get("bucket_cap_mb") and not row.get("compressed"):
            sizes = tuple(row["bucket_sizes"]) if row.get("bucket_sizes") else ("unknown", row["bucket_cap_mb"])
            groups.setdefault(sizes, []).append(row["bucket_cap_mb"])
    return [(caps, sizes if sizes and sizes[0] != "unknown" else None) for sizes, caps in groups.items()]


def describe_bucket_layouts(table: Sequence[dict[str, Any]]) -> str:
    """The buckets each cap gave, in words, and why caps below the largest gradient give the same buckets."""
    largest = next((r.get("largest_grad_mb") for r in table if r.get("largest_grad_mb")), None)
    parts, same_below = [], []
    for caps, sizes in bucket_layouts(table):
        if sizes is None:
            continue
        named = " and ".join(f"{cap:g} MB" for cap in caps)
        parts.append(f"{'the same ' if len(caps) > 1 else ''}{_sizes_text(sizes)} with the {named} "
                     f"cap{'s' if len(caps) > 1 else ''}")
        if len(caps) > 1 and largest is not None and all(cap <= largest for cap in caps):
            same_below = caps
    if not parts:
        return ""
    text = "DDP made " + "; ".join(parts) + "."
    if same_below:
        than = "larger than" if all(cap < largest for cap in same_below) else "at least as large as"
        text += (f" A bucket holds whole gradients, and each weight here ({largest:.0f} MB) is {than} "
                 f"{'both caps' if len(same_below) == 2 else 'each of these caps'}: they make no difference here.")
    return text


def bucket_overlap(bucket_caps_mb: Sequence[float] = (ONE_BUCKET_MB, 25.0, 4.0), accumulation: int = 4,
                   width: int = 1024, depth: int = 8, batch: int = 8, backward_ms_per_layer: float = 10.0,
                   repeats: int = 4, warmup: int = 1, device: str = "auto",
                   compression: bool = False) -> list[dict[str, Any]]:
    """Median step times of a ``depth`` x ``width`` MLP under DDP on this rank (run it in a job of N ranks).

    Rows: ``compute only`` (forward + backward under DDP's ``no_sync``: no communication), ``all-reduce only`` (one all-reduce
    of every gradient at once, no compute), one row per ``bucket_cap_mb``, and gradient accumulation
    over ``accumulation`` micro-batches synchronising every micro-batch vs only the last (``no_sync``).
    Each bucket row is labelled with the buckets DDP really used (``bucket_sizes``, read after the timed steps,
    once DDP rebuilt its buckets): a bucket holds whole gradients, so caps below the largest gradient
    (``largest_grad_mb``) all give one bucket per layer.
    Every row sets ``bucket_cap_mb``: an explicit cap turns off the small first bucket (1 MiB) that DDP's
    default (``bucket_cap_mb=None``) makes, so the 25 MB row is not quite DDP's default layout.
    ``hidden`` = the time overlap saved, as a share of the all-reduce alone: (compute + all-reduce
    alone − step) / all-reduce alone, with the bf16 all-reduce alone for the bf16 compression row. With
    ``backward_ms_per_layer`` > 0 each layer's backward also sleeps that long: on a CPU the compute of
    a GPU is emulated so that the processor is free to communicate, as it is on a GPU node. ``compression``
    adds one all-reduce alone in bf16 and the smallest bucket size again with DDP's ``bf16_compress_hook``
    (gradients sent in bf16, half the bytes, then put back into fp32)."""
    import contextlib
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
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
        largest = max(p.numel() for p in net.parameters()) * FLOAT_BYTES / MB
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
        rows.append({"setting": "compute only: forward + backward (no_sync)", "step_ms": 1e3 * compute})
        rows.append({"setting": f"all-reduce only ({params * FLOAT_BYTES / MB:.0f} MB at once)", "step_ms": 1e3 * comm})
        if compression:
            half = torch.zeros(params, device=ctx.device, dtype=torch.bfloat16)
            comm_bf16 = timed(lambda: dist.all_reduce(half))
            rows.append({"setting": f"all-reduce only, {COMPRESSED} ({params * FLOAT_BYTES / 2 / MB:.0f} MB)",
                         "step_ms": 1e3 * comm_bf16, "compressed": True})
            half = None
        for cap in bucket_caps_mb:
            model = DistributedDataParallel(net, bucket_cap_mb=cap)
            seconds = timed(lambda model=model: step(model))
            sizes = ddp_bucket_sizes(model)
            rows.append({"setting": bucket_label(cap, sizes), "bucket_cap_mb": cap, "bucket_sizes": sizes,
                         "step_ms": 1e3 * seconds, "hidden": hidden_share(compute, comm, seconds)})
        if compression:
            cap = min(bucket_caps_mb)
            model = DistributedDataParallel(net, bucket_cap_mb=cap)
            model.register_comm_hook(None, default_hooks.bf16_compress_hook)
            seconds = timed(lambda model=model: step(model))
            sizes = ddp_bucket_sizes(model)
            rows.append({"setting": f"{bucket_label(cap, sizes)}, {COMPRESSED}", "bucket_cap_mb": cap,
                         "bucket_sizes": sizes, "compressed": True, "step_ms": 1e3 * seconds,
                         "hidden": hidden_share(compute, comm_bf16, seconds)})
        model = DistributedDataParallel(net, bucket_cap_mb=ONE_BUCKET_MB)  # every sync costs a whole all-reduce
        for use_no_sync in (False, True):
            def accumulate(model: Any = model, use_no_sync: bool = use_no_sync) -> None:
                for micro in range(accumulation):
                    step(model, sync=not use_no_sync or micro == accumulation - 1)
            seconds = timed(accumulate)
            label = (f"{accumulation} micro-batches, " + ("no_sync until the last" if use_no_sync else "sync every one"))
            rows.append({"setting": label + " (one bucket)", "step_ms": 1e3 * seconds,
                         "accumulation": accumulation, "no_sync": use_no_sync})
        link = transport(dist.get_backend(), dict(os.environ))
        for row in rows:
            row.update({"rank": ctx.rank, "world_size": ctx.world_size, "params": params, "transport": link,
                        "largest_grad_mb": largest,
                        "device": str(ctx.device), "backward_ms_per_layer": backward_ms_per_layer})
        base = model = accumulate = None  # drop every DDP wrapper (the closures hold some) ...
        gc.collect()  # ... and free their reducers (reference cycles)
        distributed.barrier(ctx)  # leave the group together (a rank leaving alone can make gloo abort)
        return rows


def bucket_table(results: Sequence[Any], rank: int = 0) -> ResultsTable:
    """Rank ``rank``'s rows of :func:`bucket_overlap` (``results``: its rows, or ``job.results()``)."""
    rows = [r for item in results for r in (item if isinstance(item, list) else [item])]
    mine = [r for r in rows if r["rank"] == rank]
    link = f", {mine[0]['transport']}" if mine and mine[0].get("transport") else ""
    return ResultsTable(mine, columns=["setting", "step_ms", "hidden"],
                        title=f"DDP step times on rank {rank} of {mine[0]['world_size'] if mine else '?'}{link} "
                              "(median)")


def network_effects(table: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """What one bucket table says about the network (ms, medians): ``compute`` (no_sync), ``allreduce`` and
    ``allreduce_bf16`` alone, ``one_bucket`` and ``best_buckets`` (the fastest smaller bucket size, fp32),
    ``compressed`` (bf16 hook); ``saved_ms`` = one bucket − best buckets: how much faster smaller buckets make a
    step (the communication they hid, and one bucket's own extra cost where its ``hidden`` is below 0);
    ``hidden_ms`` = the best buckets' ``hidden`` share x the all-reduce alone, the table's definition;
    ``one_bucket_extra_ms`` = one bucket − (compute + all-reduce): ``saved_ms`` = this + ``hidden_ms``;
    ``overlap_room_ms`` = the smaller of compute (forward + backward) and all-reduce: a bound on what any overlap
    can hide (the all-reduce overlaps the backward only; the backward's part of the compute is not timed apart)."""
    def step(predicate: Any) -> float | None:
        values = [r["step_ms"] for r in table if predicate(r)]
        return min(values) if values else None

    compute = step(lambda r: r["setting"].startswith("compute only"))
    allreduce = step(lambda r: r["setting"].startswith("all-reduce only") and not r.get("compressed"))
    one = step(lambda r: r.get("bucket_cap_mb", 0) >= ONE_BUCKET_MB and not r.get("compressed"))
    best = step(lambda r: 0 < r.get("bucket_cap_mb", 0) < ONE_BUCKET_MB and not r.get("compressed"))
    return {"compute": compute, "allreduce": allreduce, "one_bucket": one, "best_buckets": best,
            "allreduce_bf16": step(lambda r: r["setting"].startswith("all-reduce only") and r.get("compressed")),
            "compressed": step(lambda r: r.get("bucket_cap_mb") and r.get("compressed")),
            "saved_ms": one - best if one is not None and best is not None else None,
            "hidden_ms": compute + allreduce - best if None not in (compute, allreduce, best) else None,
            "one_bucket_extra_ms": one - compute - allreduce if None not in (compute, allreduce, one) else None,
            "overlap_room_ms": min(compute, allreduce) if compute is not None and allreduce is not None else None}


def describe_saving(effects: dict[str, float | None]) -> str:
    """The best buckets' saving against one bucket (:func:`network_effects`), split into the one-bucket row's own
    extra over compute + all-reduce one after the other and what overlap hid; "" where a time is missing."""
    saved, extra, hidden = effects.get("saved_ms"), effects.get("one_bucket_extra_ms"), effects.get("hidden_ms")
    if saved is None or extra is None or hidden is None:
        return ""
    if saved <= 0:
        return f"the best buckets were no faster than one bucket ({-saved:.1f} ms slower)"
    if extra <= 0:
        return (f"one bucket took no longer than compute + all-reduce one after the other ({-extra:.1f} ms less): "
                f"the best buckets' {saved:.1f} ms against it is overlap beyond one bucket's")
    if hidden <= 0:
        return (f"the best buckets' {saved:.1f} ms against one bucket all come from the one-bucket row's own extra "
                f"over compute + all-reduce ({extra:.1f} ms; its cause is not measured here): overlap hid nothing")
    return (f"of the best buckets' {saved:.1f} ms against one bucket, {extra:.1f} ms is the one-bucket row's own "
            f"extra over compute + all-reduce (its cause is not measured here) and {hidden:.1f} ms is what "
            "overlap hid")


def allreduce_ms_per_mb(table: Sequence[dict[str, Any]]) -> float:
    """The fp32 all-reduce alone, in ms per MB of gradients."""
    row = next(r for r in table if r["setting"].startswith("all-reduce only") and not r.get("compressed"))
    return row["step_ms"] / (row["params"] * FLOAT_BYTES / MB)


def network_claims(links: Sequence[dict[str, Any]], network: Sequence[dict[str, Any]]) -> dict[str, bool]:
    """The three network claims from the bucket table over the node's own links and the one over sockets:
    ``sockets_slower``, ``buckets_faster`` (one bucket − best buckets >= OVERLAP_SHARE x the smaller of compute and
    all-reduce), ``bf16_halves`` (see SOCKETS_SLOWER, OVERLAP_SHARE, BF16_TIME)."""
    effects = network_effects(network)
    saved, room = effects["saved_ms"], effects["overlap_room_ms"]
    bf16, fp32 = effects["allreduce_bf16"], effects["allreduce"]
    return {"sockets_slower": allreduce_ms_per_mb(network) >= SOCKETS_SLOWER * allreduce_ms_per_mb(links),
            "buckets_faster": saved is not None and room is not None and saved >= OVERLAP_SHARE * room,
            "bf16_halves": bf16 is not None and fp32 is not None and bf16 <= BF16_TIME * fp32}


def links_claim(table: Sequence[dict[str, Any]]) -> tuple[bool, str]:
    """The claim on the bucket table over the node's own links: (holds, what was measured). It holds when the
    all-reduce alone is under LINKS_ALLREDUCE_SHARE of the fastest bucket row and the fp32 bucket rows are within
    LINKS_SPREAD of each other. The measured text names the buckets each cap gave and the most any row hid."""
    rows = [r for r in table if r.get("bucket_cap_mb") and not r.get("compressed")]
    steps = [r["step_ms"] for r in rows]
    allreduce = network_effects(table)["allreduce"]
    spread = (max(steps) - min(steps)) / min(steps)
    holds = allreduce < LINKS_ALLREDUCE_SHARE * min(steps) and spread < LINKS_SPREAD
    layouts = ", ".join(f"{len(sizes) if sizes else '?'} ({' and '.join(f'{c:g}' for c in caps)} MB cap"
                        f"{'s' if len(caps) > 1 else ''})" for caps, sizes in bucket_layouts(table))
    hidden = [r["hidden"] for r in rows if r.get("hidden") is not None]
    text = (f"all-reduce alone {allreduce:.1f} ms of a {min(steps):.1f} ms step; bucket rows {min(steps):.1f}-"
            f"{max(steps):.1f} ms ({100 * spread:.1f} %); buckets: {layouts}"
            + (f"; hidden at most {max(hidden):.2f}" if hidden else ""))
    return holds, text
