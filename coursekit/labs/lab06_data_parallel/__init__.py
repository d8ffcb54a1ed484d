"""Lab 06 (data parallelism): measurements run inside multi-process jobs, scaling tables, NCCL's log.

- :func:`sampler_orders` — the indices ``DistributedSampler`` hands each rank, epoch by epoch, with and
  without ``set_epoch`` (no process group needed: the sampler takes rank and world size as arguments).
- :func:`ddp_equivalence` — run in a job of N processes (``submit_function(..., n_gpu=2)``): DDP on
  shards of each global batch against one process on the whole batch (max |Δw|), and a metric seen by
  one rank against its all-reduced average and the global value.
- :func:`bucket_overlap` — run in a job of N processes: step time for several ``bucket_cap_mb`` and for
  gradient accumulation with and without ``no_sync``, beside compute alone and one all-reduce alone.
- :func:`scaling_configs` / :func:`scaling_tables` — strong and weak scaling read from ONE sweep of
  per-GPU batch sizes x GPU counts (``submit_sweep(configs, n_gpu=[1, 2, 4])``).
- :func:`load_ddp_recording` — the GPU figures of ``bench/ddp_gpu.py`` (None, said plainly, when absent).
- :func:`parse_nccl_log` — rings, trees and transports from an ``NCCL_DEBUG=INFO`` log.
"""

from __future__ import annotations

import gc
import html
import json
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable, format_value

DDP_RECORDING_ENV = "COURSEKIT_DDP_GPU"
DDP_RECORDING_FILE = Path("bench") / "results" / "ddp_gpu.json"
NO_GPU_FIGURES = "no GPU figures recorded yet"
EQUIVALENCE_TOLERANCE_CPU = 1e-5
ONE_BUCKET_MB = 1000.0  # larger than any model of the lab: every gradient in a single bucket
MB = 2**20
FLOAT_BYTES = 4


# --- section 4: what the sampler hands each rank -------------------------------------------------

def sampler_orders(dataset_size: int, world_size: int, epochs: int, set_epoch: bool, seed: int = 0,
                   shown: int = 8) -> ResultsTable:
    """One row per (epoch, rank): the first ``shown`` indices ``DistributedSampler`` gives that rank."""
    from torch.utils.data import DistributedSampler

    if dataset_size < world_size:
        raise ValueError(f"dataset_size={dataset_size} is smaller than world_size={world_size}: every rank needs data")
    table = ResultsTable(title=f"DistributedSampler, {world_size} ranks, set_epoch {'called' if set_epoch else 'NOT called'}")
    samplers = [DistributedSampler(range(dataset_size), num_replicas=world_size, rank=r, shuffle=True, seed=seed)
                for r in range(world_size)]
    for epoch in range(epochs):
        for rank, sampler in enumerate(samplers):
            if set_epoch:
                sampler.set_epoch(epoch)
            indices = list(sampler)
            table.append({"set_epoch": set_epoch, "epoch": epoch, "rank": rank,
                          "first_indices": " ".join(str(i) for i in indices[:shown]), "order": indices})
    return table


def same_order_every_epoch(table: ResultsTable) -> bool:
    """Did every rank get the same order in every epoch of ``table`` (see :func:`sampler_orders`)?"""
    by_rank: dict[int, set[tuple[int, ...]]] = {}
    for row in table:
        by_rank.setdefault(row["rank"], set()).add(tuple(row["order"]))
    return all(len(orders) == 1 for orders in by_rank.values())


# --- section 4: DDP equals one process on the global batch (runs inside a job) ------------------

def _toy_problem(samples: int, features: int, classes: int, seed: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, classes, generator=generator)
    y = (x @ w + 0.5 * torch.randn(samples, classes, generator=generator)).argmax(dim=1)
    return x, y


def _toy_model(features: int, classes: int, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Linear(32, classes))


def ddp_equivalence(steps: int = 5, global_batch: int = 32, features: int = 16, classes: int = 4,
                    val_samples: int = 64, lr: float = 0.1, seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Train a small classifier with DDP for ``steps`` steps; this rank's figures.

    Every rank also trains the same model alone on the whole global batch (the serial reference) and
    reports the largest weight difference. Accuracy on this rank's half of a validation set
    (``local_acc``) is all-reduced into ``averaged_acc``, to compare with ``global_acc`` computed on the
    whole set. Submit it with ``submit_function(ddp_equivalence, n_gpu=2)`` and read ``job.results()``.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from coursekit import distributed

    with distributed.process_group(device) as ctx:
        world, rank = ctx.world_size, ctx.rank
        if global_batch % world or val_samples % world:
            raise ValueError(f"global_batch={global_batch} and val_samples={val_samples} must divide by the "
                             f"world size {world}")
        x, y = _toy_problem(steps * global_batch + val_samples, features, classes, seed)
        x_val, y_val = x[-val_samples:], y[-val_samples:]
        serial = _toy_model(features, classes, seed)
        local = _toy_model(features, classes, seed)
        model = DistributedDataParallel(local) if ctx.is_distributed else local
        optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m in (serial, model)]
        loss_fn = torch.nn.CrossEntropyLoss()
        shard = global_batch // world
        for step in range(steps):
            xb, yb = x[step * global_batch:(step + 1) * global_batch], y[step * global_batch:(step + 1) * global_batch]
            mine = slice(rank * shard, (rank + 1) * shard)  # this rank's part of the global batch
            for net, optimizer, (xs, ys) in ((serial, optimizers[0], (xb, yb)), (model, optimizers[1], (xb[mine], yb[mine]))):
                optimizer.zero_grad()
                loss_fn(net(xs), ys).backward()  # DDP averages the gradients over the ranks here
                optimizer.step()
        max_dw = max((a - b).abs().max().item() for a, b in zip(serial.parameters(), local.parameters(), strict=True))
        val_shard = val_samples // world
        with torch.no_grad():
            mine = slice(rank * val_shard, (rank + 1) * val_shard)
            local_acc = (local(x_val[mine]).argmax(1) == y_val[mine]).float().mean()
            global_acc = (local(x_val).argmax(1) == y_val).float().mean().item()
        averaged = local_acc.clone()
        if ctx.is_distributed:
            dist.all_reduce(averaged, op=dist.ReduceOp.SUM)
            averaged /= world
        del model, optimizers
        gc.collect()  # free DDP's reducer (reference cycles) before the process group goes
        distributed.barrier(ctx)  # leave the group together (a rank leaving alone can make gloo abort)
        return {"rank": rank, "world_size": world, "steps": steps, "global_batch": global_batch,
                "batch_per_rank": shard, "max_abs_dw": max_dw, "local_acc": local_acc.item(),
                "averaged_acc": averaged.item(), "global_acc": global_acc}


def equivalence_table(results: Sequence[dict[str, Any]]) -> ResultsTable:
    """The per-rank results of :func:`ddp_equivalence` as a table, rank order."""
    return ResultsTable(sorted(results, key=lambda r: r["rank"]), title="DDP against one process on the global batch")


# --- section 5: gradient buckets and overlap (runs inside a job) --------------------------------

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

    from coursekit import distributed

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


# --- section 6: scaling ----------------------------------------------------------------------------

def scaling_batches(n_gpus: Sequence[int], batch_per_gpu: int, global_batch: int) -> list[int]:
    """Per-GPU batch sizes of one sweep that holds weak scaling (``batch_per_gpu`` on every count) and
    strong scaling (``global_batch`` split over every count), ascending."""
    for n in n_gpus:
        if global_batch % n:
            raise ValueError(f"global_batch={global_batch} does not split over n_gpu={n}: choose a multiple of "
                             f"{', '.join(str(c) for c in n_gpus)}")
    return sorted({batch_per_gpu, *(global_batch // n for n in n_gpus)})


def usable_gpu_counts(wanted: Sequence[int], site: Any) -> list[int]:
    """The GPU counts of ``wanted`` this site can run: all of them on a cluster (the submitter checks the
    nodes), those up to the GPUs (or CPU processes) of this machine on the local site."""
    if not getattr(site, "is_local", False):
        return list(wanted)
    most = site.node_shape().gpus_per_node
    usable = [n for n in wanted if n <= most]
    if len(usable) < len(wanted):
        print(f"this machine runs at most {most} processes per job: GPU counts {[n for n in wanted if n > most]} left out")
    return usable


def two_node_options(site: Any) -> dict[str, int] | None:
    """Submit options of a job of 2 processes on 2 nodes (one task per node holding all its GPUs), or
    None where there is a single machine (the local site) or a single node."""
    if getattr(site, "is_local", True):
        return None
    node = site.node_shape()
    if node.max_nodes is not None and node.max_nodes < 2:
        return None
    return {"n_gpu": 2 * node.gpus_per_node, "n_gpu_per_task": node.gpus_per_node}


def _img_s(row: dict[str, Any]) -> float | None:
    return row.get("images_per_s_median") or row.get("images_per_s")


def _with_speedup(rows: list[dict[str, Any]], title: str) -> ResultsTable:
    rows = sorted(rows, key=lambda r: r["n_gpu"])
    base = rows[0] if rows else None
    table = ResultsTable(title=title, columns=["n_gpu", "batch_per_gpu", "global_batch", "img_s", "speedup",
                                               "efficiency", "step_time_s"])
    for row in rows:
        speedup = row["img_s"] / base["img_s"] if base and base["img_s"] and row["img_s"] else None
        ideal = row["n_gpu"] / base["n_gpu"] if base else None
        table.append({**row, "speedup": speedup, "efficiency": speedup / ideal if speedup and ideal else None})
    return table


def scaling_tables(table: ResultsTable, batch_per_gpu: int, global_batch: int) -> tuple[ResultsTable, ResultsTable]:
    """(strong, weak) from one sweep's table (columns ``n_gpu``, ``batch_size``, images/s): speed-up and
    efficiency against the smallest GPU count. Strong: the global batch fixed; weak: the batch per GPU."""
    rows = [{"n_gpu": r["n_gpu"], "batch_per_gpu": r["batch_size"], "global_batch": r["n_gpu"] * r["batch_size"],
             "img_s": _img_s(r), "step_time_s": r.get("step_time_s"), "state": r.get("state")} for r in table]
    strong = [r for r in rows if r["global_batch"] == global_batch]
    weak = [r for r in rows if r["batch_per_gpu"] == batch_per_gpu]
    return (_with_speedup(strong, f"strong scaling: global batch {global_batch}"),
            _with_speedup(weak, f"weak scaling: batch {batch_per_gpu} per GPU"))


def scaling_figure(strong: ResultsTable, weak: ResultsTable, unit: str = "GPUs", title: str = "") -> Any:
    """Images/s (left) and efficiency (right) against the number of GPUs, strong and weak."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    for table, label, marker in ((strong, "strong (fixed global batch)", "o"), (weak, "weak (fixed batch per GPU)", "s")):
        rows = [r for r in table if r["img_s"]]
        left.plot([r["n_gpu"] for r in rows], [r["img_s"] for r in rows], marker=marker, label=label)
        right.plot([r["n_gpu"] for r in rows], [r["efficiency"] for r in rows], marker=marker, label=label)
    counts = sorted({r["n_gpu"] for r in (*strong, *weak)})
    if counts:
        base = [r for r in weak if r["n_gpu"] == counts[0] and r["img_s"]]
        if base:
            left.plot(counts, [base[0]["img_s"] * c / counts[0] for c in counts], linestyle=":", color="gray",
                      label="perfect (weak)")
        right.axhline(1.0, linestyle=":", color="gray")
    for ax in (left, right):
        ax.set_xlabel(f"number of {unit}")
        ax.set_xticks(counts)
        ax.legend(fontsize="small")
    left.set_ylabel("images/s (all processes)")
    right.set_ylabel("efficiency = speed-up / ideal speed-up")
    right.set_ylim(0, 1.15)
    if title:
        figure.suptitle(title)
    return figure


@dataclass
class RichTable:
    """A results table that a notebook shows as HTML (and a terminal as text)."""

    table: ResultsTable
    note: str = ""

    def __repr__(self) -> str:
        return self.table.to_text() + (f"\n{self.note}" if self.note else "")

    def _repr_html_(self) -> str:
        columns = self.table.columns
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(format_value(row.get(c)))}</td>" for c in columns) + "</tr>"
                       for row in self.table)
        caption = f"<caption>{html.escape(self.table.title)}</caption>" if self.table.title else ""
        note = f"<p><small>{html.escape(self.note)}</small></p>" if self.note else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def rich(table: ResultsTable, note: str = "") -> RichTable:
    return RichTable(table, note)


# --- recorded GPU figures (bench/ddp_gpu.py) -----------------------------------------------------

def default_recording_path() -> Path:
    """``$COURSEKIT_DDP_GPU``, else bench/results/ddp_gpu.json of the source tree holding coursekit."""
    explicit = os.environ.get(DDP_RECORDING_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path(__file__).resolve().parents[3] / DDP_RECORDING_FILE


def load_ddp_recording(path: str | os.PathLike | None = None, verbose: bool = True) -> dict[str, Any] | None:
    """The GPU figures recorded by ``bench/ddp_gpu.py``, or None (saying so) when there are none."""
    path = Path(path) if path is not None else default_recording_path()
    if not path.is_file():
        if verbose:
            print(f"{NO_GPU_FIGURES}: {path} does not exist. It is written on a GPU machine by "
                  f"`python bench/ddp_gpu.py`; the recorded plots are skipped.")
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    data["_path"] = str(path)
    return data


def describe_recording(recording: dict[str, Any], command: bool = False) -> str:
    """One line naming the machine, the software and the date (and ``command``: the command) of the figures."""
    machine = recording.get("machine") or {}
    gpus = machine.get("gpus")
    parts = [f"recorded on {f'{gpus} x ' if gpus else ''}{machine.get('device_name') or 'an unnamed machine'}"]
    parts += [f"{name} {machine[key]}" for name, key in (("torch", "torch"), ("CUDA", "cuda"), ("NCCL", "nccl"))
              if machine.get(key)]
    if recording.get("date"):
        parts.append(str(recording["date"])[:10])
    line = ", ".join(parts)
    return line + (f" by `{recording['command']}`" if command and recording.get("command") else "")


def recorded_scaling_table(recording: dict[str, Any]) -> ResultsTable | None:
    """The recorded scaling runs (mode, GPUs, batch per GPU, img/s, speed-up, efficiency), when present."""
    rows = [r for r in recording.get("scaling") or [] if r.get("ok", True)]
    if not rows:
        return None
    table = ResultsTable(title="GPU scaling, " + describe_recording(recording),
                         columns=["mode", "n_gpu", "batch_per_gpu", "global_batch", "img_s", "speedup", "efficiency"])
    for row in rows:
        img_s = row.get("img_s")
        table.append({**row, "n_gpu": row.get("n_gpu", row.get("world_size")),
                      "img_s": img_s.get("mean") if isinstance(img_s, dict) else img_s})
    return table


def recorded_scaling_tables(recording: dict[str, Any]) -> tuple[ResultsTable, ResultsTable] | None:
    """(strong, weak) of the recorded scaling runs, in the shape of :func:`scaling_tables`."""
    table = recorded_scaling_table(recording)
    if table is None:
        return None
    rows = [{"n_gpu": r["n_gpu"], "batch_per_gpu": r.get("batch_per_gpu"), "global_batch": r.get("global_batch"),
             "img_s": r["img_s"], "step_time_s": None, "mode": r.get("mode")} for r in table]
    weak = [r for r in rows if r["mode"] == "weak"]
    strong = [r for r in weak if r["n_gpu"] == 1] + [r for r in rows if r["mode"] == "strong"]
    note = describe_recording(recording)
    return _with_speedup(strong, f"strong scaling, {note}"), _with_speedup(weak, f"weak scaling, {note}")


def recorded_busbw_table(recording: dict[str, Any], sizes_mib: Sequence[float] = (1, 16, 256, 1024)) -> ResultsTable | None:
    """Recorded NCCL all-reduce bus bandwidth (GB/s) at a few message sizes, per number of GPUs."""
    table = ResultsTable(title="all-reduce bus bandwidth, " + describe_recording(recording))
    for run in recording.get("busbw") or []:
        by_size = {r["bytes"] / MB: r.get("busbw_gbs") for r in run.get("rows", [])}
        row = {"n_gpu": run.get("world_size"), "binding": run.get("binding")}
        row.update({f"{size:g} MiB": by_size.get(size) for size in sizes_mib})
        table.append(row)
    return table if len(table) else None


def recorded_nccl_logs(recording: dict[str, Any]) -> dict[str, str]:
    """The recorded ``NCCL_DEBUG=INFO`` logs of the binding comparison: {"node": text, "task": text}."""
    path = Path(recording.get("_path", ""))
    logs = path.with_name(f"{path.stem}_logs")
    found = {}
    for binding, result in (recording.get("binding") or {}).items():
        name = ((result or {}).get("busbw") or {}).get("log") if isinstance(result, dict) else None
        if name and (logs / name).is_file():
            found[binding] = (logs / name).read_text(encoding="utf-8", errors="replace")
    return found


# --- section 7: reading NCCL's mind ------------------------------------------------------------

PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
VERSION = re.compile(r"NCCL version (?P<version>\S+)")
NETWORK = re.compile(r"^Using network (?P<net>\S+)")
COMM = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)(?: nNodes (?P<nnodes>\d+))?")
RING = re.compile(r"^Channel (?P<channel>\d+)/(?P<total>\d+) :\s+(?P<ranks>\d+(?:\s+\d+)*)\s*$")
TREES = re.compile(r"\[(?P<channel>\d+)\] (?P<down>-?\d+(?:/-?\d+)*)->(?P<me>\d+)->(?P<up>-?\d+)")
CONNECTION = re.compile(r"^Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[[^\]]*\] -> (?P<dst>\d+)\[[^\]]*\]"
                        r"(?: \[(?P<direction>send|receive)\])? via (?P<via>\S+(?: \S+)*)$")
COLL_CHANNELS = re.compile(r"^(?P<coll>\d+) coll channels")
TRANSPORTS = {"P2P": "P2P (NVLink or PCIe, GPU to GPU)", "SHM": "SHM (through host memory)",
              "NET": "NET (network between nodes)", "NVLS": "NVLS (NVLink SHARP)"}


@dataclass
class NcclReport:
    """What an ``NCCL_DEBUG=INFO`` log says about the communicator(s) it set up."""

    version: str | None = None
    network: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    hosts: list[str] = field(default_factory=list)
    rings: dict[int, list[int]] = field(default_factory=dict)  # channel -> ranks in ring order
    trees: dict[int, dict[int, tuple[list[int], int]]] = field(default_factory=dict)  # rank -> channel -> (children, parent)
    connections: list[dict[str, Any]] = field(default_factory=list)
    coll_channels: int | None = None
    init_complete: int = 0

    @property
    def transports(self) -> Counter:
        """How many channel connections use each transport (P2P, SHM, NET, ...)."""
        return Counter(c["transport"] for c in self.connections)

    def summary(self) -> str:
        """A few lines: who talks, the rings and trees (channels with the same shape grouped), the links."""
        lines = [f"NCCL {self.version or '?'}, {self.nranks or '?'} ranks on {len(self.hosts) or '?'} host(s) "
                 f"({', '.join(self.hosts)}), network for inter-node traffic: {self.network or '?'}"]
        if self.rings:
            shapes = _grouped({c: " -> ".join(map(str, r)) for c, r in self.rings.items()})
            lines.append(f"{len(self.rings)} ring channel(s): "
                         + "; ".join(f"{_channels(cs)}: {shape}" for shape, cs in shapes.items()))
        for rank, channels in sorted(self.trees.items()):
            roles = _grouped({c: f"parent {parent if parent >= 0 else '- (root)'}, children "
                                 f"{', '.join(map(str, kids)) or '-'}" for c, (kids, parent) in channels.items()})
            lines.append(f"trees of rank {rank}: " + "; ".join(f"{_channels(cs)}: {role}" for role, cs in roles.items()))
        for transport, count in sorted(self.transports.items()):
            lines.append(f"{count} connection(s) via {TRANSPORTS.get(transport, transport)}: "
                         + ", ".join(sorted({c['via'] for c in self.connections if c['transport'] == transport})))
        if self.coll_channels is not None:
            lines.append(f"{self.coll_channels} collective channel(s) per rank; {self.init_complete} rank(s) said Init COMPLETE")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _grouped(by_channel: dict[int, str]) -> dict[str, list[int]]:
    """{shape: [channels]} from {channel: shape}, in channel order."""
    groups: dict[str, list[int]] = {}
    for channel, shape in sorted(by_channel.items()):
        groups.setdefault(shape, []).append(channel)
    return groups


def _channels(channels: list[int]) -> str:
    """``channels 0-5, 12-17`` (runs of consecutive numbers joined)."""
    runs: list[list[int]] = []
    for c in channels:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return f"channel{'s' if len(channels) > 1 else ''} {text}"


def _tree(msg: str) -> dict[int, tuple[list[int], int]]:
    found = {}
    for match in TREES.finditer(msg):
        children = [int(v) for v in match["down"].split("/") if int(v) >= 0]
        found[int(match["channel"])] = (children, int(match["up"]))
    return found


def parse_nccl_log(text: str | Iterable[str]) -> NcclReport:
    """Read the ``NCCL INFO`` lines of one or several ranks' logs (other lines are ignored)."""
    lines = text.splitlines() if isinstance(text, str) else [line for chunk in text for line in chunk.splitlines()]
    report = NcclReport()
    ranks = _ranks_by_process(lines)
    for line in lines:
        version = VERSION.search(line)
        if version and report.version is None:
            report.version = version["version"]
        match = PREFIX.match(line.strip())
        if not match:
            continue
        msg, host = match["msg"].strip(), match["host"]
        if host not in report.hosts:
            report.hosts.append(host)
        if (found := NETWORK.match(msg)) is not None:
            report.network = found["net"]
        elif (found := COMM.search(msg)) is not None:
            report.nranks = int(found["nranks"])
            if found["nnodes"]:
                report.nnodes = int(found["nnodes"])
            if msg.endswith("Init COMPLETE"):
                report.init_complete += 1
        elif (found := RING.match(msg)) is not None:
            report.rings[int(found["channel"])] = [int(r) for r in found["ranks"].split()]
        elif msg.startswith("Trees "):
            rank = ranks.get((host, match["pid"]), int(match["dev"]))
            report.trees.setdefault(rank, {}).update(_tree(msg))
        elif (found := CONNECTION.match(msg)) is not None:
            via = found["via"]
            report.connections.append({"channel": int(found["channel"]), "src": int(found["src"]),
                                       "dst": int(found["dst"]), "direction": found["direction"] or "",
                                       "via": via, "transport": via.split("/")[0]})
        elif (found := COLL_CHANNELS.match(msg)) is not None:
            report.coll_channels = int(found["coll"])
    return report


def _ranks_by_process(lines: Sequence[str]) -> dict[tuple[str, str], int]:
    """(host, pid) -> rank, from the ``comm 0x... rank R`` lines (a Trees line names only its device)."""
    found = {}
    for line in lines:
        match = PREFIX.match(line.strip())
        if match and (comm := COMM.search(match["msg"])) is not None:
            found[(match["host"], match["pid"])] = int(comm["rank"])
    return found


# A log written by hand in the format NCCL 2.21 prints with NCCL_DEBUG=INFO, for 2 ranks on one node
# with two GPUs joined by NVLink (lines as they appear in public NCCL bug reports; host and ids made up).
EXAMPLE_NCCL_LOG = """\
gpu-node1:4101:4101 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.11<0>
gpu-node1:4101:4101 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
gpu-node1:4101:4101 [0] NCCL INFO cudaDriverVersion 12040
NCCL version 2.21.5+cuda12.4
gpu-node1:4102:4102 [1] NCCL INFO cudaDriverVersion 12040
gpu-node1:4101:4170 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.11<0>
gpu-node1:4101:4170 [0] NCCL INFO Using network IB
gpu-node1:4102:4171 [1] NCCL INFO Using network IB
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3a9e1f5b2d4e60 - Init START
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7c3a9e1f5b2d4e60 - Init START
gpu-node1:4101:4170 [0] NCCL INFO Setting affinity for GPU 0 to ffff,ffffffff
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0
gpu-node1:4101:4170 [0] NCCL INFO Channel 00/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 01/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 02/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 03/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1 [2] 1/-1/-1->0->-1 [3] 1/-1/-1->0->-1
gpu-node1:4101:4170 [0] NCCL INFO P2P Chunksize set to 524288
gpu-node1:4102:4171 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0 [2] -1/-1/-1->1->0 [3] -1/-1/-1->1->0
gpu-node1:4102:4171 [1] NCCL INFO P2P Chunksize set to 524288
gpu-node1:4101:4170 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 02/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Connected all rings
gpu-node1:4102:4171 [1] NCCL INFO Connected all rings
gpu-node1:4101:4170 [0] NCCL INFO Connected all trees
gpu-node1:4102:4171 [1] NCCL INFO Connected all trees
gpu-node1:4101:4170 [0] NCCL INFO threadThresholds 8/8/64 | 16/8/64 | 512 | 512
gpu-node1:4101:4170 [0] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer
gpu-node1:4102:4171 [1] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3a9e1f5b2d4e60 - Init COMPLETE
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7c3a9e1f5b2d4e60 - Init COMPLETE
"""
