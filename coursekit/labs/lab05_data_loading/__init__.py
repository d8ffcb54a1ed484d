"""Lab 05: the data pipeline — a JPEG folder to read, loader settings to compare, a profiler trace to read.

``summarize_trace`` reads the Chrome-trace JSON that ``torch.profiler`` writes (Perfetto opens it; the
engine's ``--profile`` puts it in ``<run>/profile/``) and answers three questions: how long the profiled
steps took, what share of it the main process spent inside the DataLoader, and — when the trace holds
GPU activity — what share of it the GPU sat idle.

``loader_check``: the participant's loader checked (``labs.check_loader_script``); the scripts themselves
(``train_starving.py``, ``train_fed.py``) ship in ``scripts/lab05_data_loading/`` (``SCRIPTS``), the only copy: the
participants' ``lab05_data_loading/`` is made from it (``labs/kit/exercises.py``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from coursekit.course import course_dir
from coursekit.labs.kit import experiments
from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="05", slug="lab05_data_loading", title="Data loading and the profiler",
          notebook="05_data_loading.ipynb", gpus=1, script_folders=("lab05_data_loading",),
          recordings=("gpu_ladder",), exercises=("loader_check.check_loader_script",))

TRACE_GLOB = "*.pt.trace.json"
PROFILE_DIR = "profile"
TOP_OPERATORS_FILE = "top_operators.txt"
STEP_PREFIX = "ProfilerStep#"
# torch's summary row of the profiled steps themselves, not an operator: its GPU column reads the steps' wall time
# as a share of the kernels' time (thousands of %), so the lab's copy of the summary leaves it out
PROFILER_STEP_ROW = "ProfilerStep*"
GPU_BUSY_LINE, SELF_CPU_LINE = "GPU busy", "Self CPU time"
SECONDS = re.compile(r"\b(\d+\.\d+) s\b")
# the summary's title, "Top 25 operators by self GPU time" (coursekit.train.profiling.TOP_OPERATORS_TITLE): its count
TOP_COUNT = re.compile(r"^Top \d+(?= operators by self )")
DATALOADER_MARK = "enumerate(DataLoader)"
GPU_STEP_CATEGORIES = ("gpu_user_annotation",)  # the GPU's copy of a ProfilerStep (torch 2.x traces)
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATEGORIES = ("cpu_op", "user_annotation")
US_PER_MS = 1000.0
SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab05_data_loading"  # the participants' lab05_data_loading/ is made from it

# the lab's own names for the kit's one-job sweeps (the notebook calls them on this module)
SweepRun, run_sweep, submit_sweeps = experiments.SweepRun, experiments.run_sweep, experiments.submit_sweeps


def jpeg_tree_name(classes: int, images_per_class: int, size: tuple[int, int], seed: int = 0) -> str:
    return f"jpeg-{size[0]}x{size[1]}-{classes}x{images_per_class}-seed{seed}"


def prepare_jpeg_tree(classes: int, images_per_class: int, size: tuple[int, int], seed: int = 0,
                      workers: int = 1) -> Path:
    """A synthetic JPEG ImageFolder, written once per course and then reused: in the data folder
    (``$COURSEKIT_DATA_DIR``, shared by a room when the instructor writes the tree there first, or
    ``<course>/data``); where that folder is read-only, in the course's own ``data/``."""
    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    name = jpeg_tree_name(classes, images_per_class, size, seed)
    shared = Path(data_dir()) / name
    if (shared / ".complete").exists():
        return shared
    writable = os.access(shared.parent if shared.parent.exists() else shared.parent.parent, os.W_OK)
    root = shared if writable else course_dir() / "data" / name
    done = root / ".complete"
    if not done.exists():
        write_synthetic_jpeg_tree(root, classes, images_per_class, size=tuple(size), seed=seed, workers=workers)
        done.write_text("written by coursekit.labs.lab05_data_loading.prepare_jpeg_tree\n")
    return root


def loader_label(options: dict[str, Any]) -> str:
    """A short name for a loader configuration: ``workers=2 +persistent +prefetch4``."""
    parts = [f"workers={options.get('workers', 0)}"]
    for key, short in (("pin_memory", "pin"), ("non_blocking", "non_blocking"), ("persistent_workers", "persistent"),
                       ("gpu_decode", "nvjpeg")):
        if options.get(key):
            parts.append("+" + short)
    if options.get("prefetch_factor"):
        parts.append(f"+prefetch{options['prefetch_factor']}")
    return " ".join(parts)


LADDER_MARK = "…"  # a figure's label: "… +pin" is the setting to its left, plus pinned memory


def ladder_labels(labels: list[str]) -> list[str]:
    """Short labels for a figure of a ladder of loader settings: a setting that keeps everything of the one before
    and adds to it is shown by what it adds ("… +pin"); any other keeps its whole label."""
    short = []
    for before, label in zip([None, *labels], labels, strict=False):
        words, previous = label.split(), (before or "").split()
        added = [word for word in words if word not in previous]
        keeps_all = bool(previous) and words[0] == previous[0] and set(previous) <= set(words) and added
        short.append(" ".join([LADDER_MARK, *added]) if keeps_all else label)
    return short


def trace_file(run_dir: str | Path) -> Path:
    """The newest profiler trace of a run (ValueError when the run wrote none)."""
    found = sorted((Path(run_dir) / PROFILE_DIR).glob(TRACE_GLOB), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ValueError(f"no profiler trace under {Path(run_dir) / PROFILE_DIR}: was the run started with --profile?")
    return found[-1]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def self_times_us(events: list[dict[str, Any]]) -> dict[str, float]:
    """Per name, the time spent in an event minus the time spent in the events nested inside it (per thread)."""
    totals: dict[str, float] = defaultdict(float)
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        by_thread[(event.get("pid"), event.get("tid"))].append(event)
    for thread_events in by_thread.values():
        stack: list[list[Any]] = []  # [end, name, self time]
        for event in sorted(thread_events, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= event["ts"]:
                end, name, own = stack.pop()
                totals[name] += own
            if stack:
                stack[-1][2] -= event["dur"]
            stack.append([event["ts"] + event["dur"], event["name"], event["dur"]])
        for _, name, own in stack:
            totals[name] += own
    return totals


def summarize_trace(path: str | Path, top: int = 8) -> dict[str, Any]:
    """Profiled time, the DataLoader's share of it, GPU idle share (None without GPU events), top operators."""
    events = [e for e in json.loads(Path(path).read_text(encoding="utf-8"))["traceEvents"]
              if e.get("ph") == "X" and "dur" in e]
    # one ProfilerStep per step on the host; with CUDA the trace repeats each on the GPU's timeline
    steps = [e for e in events if e.get("name", "").startswith(STEP_PREFIX) and e.get("cat") not in GPU_STEP_CATEGORIES]
    if not steps:
        raise ValueError(f"{path}: no {STEP_PREFIX} events (not a torch.profiler trace of training steps?)")
    start = min(e["ts"] for e in steps)
    stop = max(e["ts"] + e["dur"] for e in steps)
    span = stop - start
    loader = _union_us([(e["ts"], e["ts"] + e["dur"]) for e in events if DATALOADER_MARK in e.get("name", "")])
    gpu = [(max(e["ts"], start), min(e["ts"] + e["dur"], stop)) for e in events if e.get("cat") in GPU_CATEGORIES]
    gpu_busy = _union_us([(a, b) for a, b in gpu if b > a]) if gpu else None
    host = [e for e in events if e.get("cat") in HOST_CATEGORIES and not e.get("name", "").startswith(STEP_PREFIX)]
    ranked = sorted(self_times_us(host).items(), key=lambda item: -item[1])[:top]
    return {
        "steps": len(steps), "profiled_ms": span / US_PER_MS, "dataloader_ms": loader / US_PER_MS,
        "dataloader_share": loader / span if span else None,
        "gpu_busy_ms": None if gpu_busy is None else gpu_busy / US_PER_MS,
        "gpu_idle_share": None if gpu_busy is None else 1 - gpu_busy / span,
        "top_operators": ResultsTable(({"operator": name, "self_ms": us / US_PER_MS, "share": us / span}
                                       for name, us in ranked), title="operators by self CPU time in the trace"),
    }


def top_operators_text(run_dir: str | Path, rows: int = 10) -> str:
    """The head of the engine's own summary (``profile/top_operators.txt``): title (its count: the operators
    shown), header and the first ``rows`` operators (torch's ``ProfilerStep*`` row left out: the steps, not an
    operator), then the totals, the seconds of the GPU's busy line to hundredths."""
    lines = (Path(run_dir) / PROFILE_DIR / TOP_OPERATORS_FILE).read_text(encoding="utf-8").splitlines()
    body = lines[4:]
    end = next((i for i, line in enumerate(body) if line.startswith("-")), len(body))  # the table's closing rule
    operators = [line for line in body[:end] if not line.strip().startswith(PROFILER_STEP_ROW)]
    totals = [SECONDS.sub(lambda m: f"{float(m.group(1)):.2f} s", line) if line.startswith(GPU_BUSY_LINE) else line
              for line in lines if line.startswith((GPU_BUSY_LINE, SELF_CPU_LINE))]
    shown = operators[:rows]
    title = [TOP_COUNT.sub(f"Top {len(shown)}", line) for line in lines[:1]]
    return "\n".join(title + lines[1:4] + shown + totals)


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile
# the exercise's scripts, relative to the notebook folder (made from SCRIPTS: check_loader_script runs them)
SCRIPT_PATHS = {"starving": "lab05_data_loading/train_starving.py", "fed": "lab05_data_loading/train_fed.py"}


def settings(profile: str) -> dict[str, Any]:
    """Lab 05's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("05")`` shows them."""
    if profile == "cpu":
        # One compute thread per job (CPU_JOB_ENV): the second core is free for a loader worker, as the CPU
        # cores of a GPU node are while the GPU computes.
        base = TrainConfig(model="mlp", dataset="jpeg_folder", image_size=64, batch_size=32, epochs=2, lr=0.05,
                           **QUIET)
        # ImageNet-sized JPEGs (500x375): decoding them is the bottleneck of a small model on a CPU, as on a
        # GPU node, so that two workers decoding in parallel visibly shorten the epoch on two cores.
        # 32 per class: 4 steps per epoch, 8 per run (64 per class measured the same shares at twice the cost);
        # the profiled run (1 epoch) then has room for 1 step of wait, 1 of warm-up and 2 profiled.
        return {"base": base, "jpeg_classes": 4, "jpeg_images_per_class": 32, "jpeg_size": (500, 375), "jpeg_workers": 2,
                "loaders": [{"workers": 0}, {"workers": 1}, {"workers": 2},
                            {"workers": 1, "persistent_workers": True, "prefetch_factor": 4}],
                "profile_steps": 2, "job": job_options(profile, "00:10:00"), "timeout_s": 300,
                "scripts": SCRIPT_PATHS}
    # test_steps: no validation pass; 40 steps: 2 epochs of the tree (20 full batches each), so an epoch boundary is
    # in every run. drop_last: the tree's last 80 images made a batch of another shape inside the measured steps,
    # for which cuDNN (benchmark mode) timed its kernels again: the first run of the sweep showed a compute mean of
    # 0.245 s a step against 0.054 s in the others (H200)
    base = TrainConfig(model="resnet50", dataset="jpeg_folder", image_size=224, batch_size=256, epochs=1,
                       precision="bf16", channels_last=True, test_steps=40, drop_last=True, **QUIET)
    loaders = [{"workers": 0}, {"workers": 4}, {"workers": 8}, {"workers": 8, "pin_memory": True},
               {"workers": 8, "pin_memory": True, "non_blocking": True},
               {"workers": 8, "pin_memory": True, "non_blocking": True, "persistent_workers": True,
                "prefetch_factor": 4},
               {"workers": 8, "pin_memory": True, "non_blocking": True, "persistent_workers": True,
                "prefetch_factor": 4, "gpu_decode": True}]
    # 5,200 training JPEGs (20 batches): written once per course into the data folder (COURSEKIT_DATA_DIR:
    # shared by the room when the instructor writes it first), not 13,000 per participant
    return {"base": base, "jpeg_classes": 10, "jpeg_images_per_class": 520, "jpeg_size": (500, 375), "jpeg_workers": 8,
            "loaders": loaders, "profile_steps": 5, "job": job_options(profile, "00:30:00"), "timeout_s": 3600,
            "scripts": SCRIPT_PATHS,
            "budget": workshop_budget({"loader settings (40 steps)": (len(loaders), 1.0), "profiler": (1, 1.0),
                                       "your loader script checked (starving and fed runs)": (2, 0.5)})}


# ----------------------------------------------------------------- the claims and the transfer question

# The profiler's GPU idle share in the profiled workers=0 run: between GPU_IDLE_MIN and GPU_IDLE_MAX (a trace
# without kernels in its steps reads 1, one whose host events were taken for the GPU's reads near 0), and within
# GPU_IDLE_VS_WAIT of the share of step time the sweep's workers=0 job waited for data by the engine's clock
# (that share is 1 - GPU compute / wall time: the same idleness, measured in another job; the profiler's
# overhead on the host and the copies it counts as busy move the two apart by a few points, not by 0.2).
GPU_IDLE_MIN, GPU_IDLE_MAX, GPU_IDLE_VS_WAIT = 0.5, 0.99, 0.2
# The loaders' lesson on a GPU: every configuration with 8 CPU workers still waits for at least
# CPU_WORKERS_WAIT_MIN of step time, and GPU decoding waits at most GPU_DECODE_WAIT_RATIO of the least-waiting of
# them. The GPU-decoding share is a few ms of hand-over per step (the decoder thread's queue, the wait on its event),
# so it moves with the host's load: H100/H200 runs of 2026-11-27 to 11-30 measured 0-2 % alone or beside lab 09 and
# 8 % beside lab 07, against 54-78 % for the CPU workers (8/59 = 0.14 of the least-waiting; 0.03 or less before).
CPU_WORKERS, CPU_WORKERS_WAIT_MIN, GPU_DECODE_WAIT_RATIO = 8, 0.15, 0.25
# With no worker the profiler trace must show the steps inside the DataLoader for at least this share of their time
# (92-96 % on the GPUs, 80 % on two CPU cores): a trace that lost the loader's events reads near 0.
DATALOADER_SHARE_MIN = 0.5
# Workers decoding on the CPU cut the waiting share by at least WORKERS_WAIT_CUT below workers=0's (a loader whose
# workers did nothing moves the share by the runs' noise, 1-3 points).
WORKERS_WAIT_CUT = 0.05
# The loaders with CPU_WORKERS CPU workers wait alike when their shares span at most ALIKE_SPAN (the H200 run of
# 2026-11-29: 70-75 %, whatever the other settings); pinning shows when the pinned loaders' median wait is at most
# PINNED_WAIT_RATIO of the unpinned ones' (64 ms without, 3.6 ms with on that run).
ALIKE_SPAN, PINNED_WAIT_RATIO = 0.10, 0.5
# GPU decoding's steps compute longer than the CPU-decoding ones' when their compute mean exceeds the median of the
# others by more than DECODE_COMPUTE_EXTRA (0.060 s against 0.055 s a step on that run: +10 %).
DECODE_COMPUTE_EXTRA = 0.05
# the exit ticket's transfer question: a step's compute and one worker's decoding of one batch
TRANSFER_COMPUTE_MS, TRANSFER_DECODE_MS = 50, 300


def gpu_idle_agrees(idle_share: float | None, wait_share: float | None) -> bool:
    """The trace's GPU idle share is in its range and agrees with the engine's waiting share (see above)."""
    if idle_share is None or wait_share is None:
        return False
    return GPU_IDLE_MIN <= idle_share <= GPU_IDLE_MAX and abs(idle_share - wait_share) <= GPU_IDLE_VS_WAIT


def feeding(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The waiting shares of the CPU-decoding loaders with ``CPU_WORKERS`` workers and of the GPU-decoding ones, and
    whether the lesson holds: the former all wait at least ``CPU_WORKERS_WAIT_MIN``, the latter at most
    ``GPU_DECODE_WAIT_RATIO`` of the least of the former. ``holds`` is False when either kind is missing."""
    cpu = [r["data_fraction"] for r in rows
           if r["config"].workers >= CPU_WORKERS and not r["config"].gpu_decode and r.get("data_fraction") is not None]
    gpu = [r["data_fraction"] for r in rows if r["config"].gpu_decode and r.get("data_fraction") is not None]
    holds = bool(cpu and gpu) and min(cpu) >= CPU_WORKERS_WAIT_MIN and max(gpu) <= GPU_DECODE_WAIT_RATIO * min(cpu)
    return {"cpu": cpu, "gpu": gpu, "holds": holds}


def workers_needed(decode_ms: float, compute_ms: float) -> int:
    """Workers (one core each) that keep a step fed in the steady state: one batch per step, each worker
    delivering one batch per ``decode_ms``: at least ``decode_ms / compute_ms``, rounded up."""
    return -(-int(round(1000 * decode_ms)) // int(round(1000 * compute_ms)))



def _cpu_decoding(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r["config"].gpu_decode and r.get("data_fraction") is not None]


def workers_effect(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What worker processes decoding on the CPU did against ``workers=0``: GPU decoding is left out, so that the
    evidence is the CPU workers' own. ``least``: the CPU-decoding loader with workers that waited least, ``fastest``:
    the one with the shortest epoch; ``cuts_wait``: its share is at least ``WORKERS_WAIT_CUT`` below ``workers=0``'s;
    ``faster_epoch``: its epoch is shorter. Both False when either kind of loader is missing."""
    cpu = _cpu_decoding(rows)
    none = next((r for r in cpu if r["config"].workers == 0), None)
    with_workers = [r for r in cpu if r["config"].workers > 0]
    if none is None or not with_workers:
        return {"none": none, "with_workers": with_workers, "least": None, "fastest": None, "cuts_wait": False,
                "faster_epoch": False}
    least = min(with_workers, key=lambda r: r["data_fraction"])
    timed = [r for r in with_workers if r.get("epoch_time_s") is not None]
    fastest = min(timed, key=lambda r: r["epoch_time_s"]) if timed else None
    return {"none": none, "with_workers": with_workers, "least": least, "fastest": fastest,
            "cuts_wait": least["data_fraction"] <= none["data_fraction"] - WORKERS_WAIT_CUT,
            "faster_epoch": fastest is not None and none.get("epoch_time_s") is not None
                            and fastest["epoch_time_s"] < none["epoch_time_s"]}


def other_settings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What the other settings did beside ``CPU_WORKERS`` workers decoding on the CPU. ``shares``: their waiting
    shares; ``alike``: those of loaders with and without ``persistent_workers`` span at most ``ALIKE_SPAN``;
    ``unpinned_s``, ``pinned_s``: their median waits (``data_time_s``) without and with pinned memory;
    ``pinning_shows``: every pinned one is at most ``PINNED_WAIT_RATIO`` of the shortest unpinned one."""
    same = [r for r in _cpu_decoding(rows) if r["config"].workers == CPU_WORKERS]
    shares = [r["data_fraction"] for r in same]
    persistent = {bool(r["config"].persistent_workers) for r in same}
    alike = persistent == {False, True} and max(shares) - min(shares) <= ALIKE_SPAN
    waits = {pinned: [r["data_time_s"] for r in same if bool(r["config"].pin_memory) == pinned
                      and r.get("data_time_s") is not None] for pinned in (False, True)}
    unpinned, pinned = waits[False], waits[True]
    shows = bool(unpinned and pinned) and max(pinned) <= PINNED_WAIT_RATIO * min(unpinned)
    return {"shares": shares, "alike": alike, "unpinned_s": unpinned, "pinned_s": pinned, "pinning_shows": shows}


def decode_compute(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The compute mean per step of the GPU-decoding loader against the median of the CPU-decoding ones', and
    whether it exceeds it by more than ``DECODE_COMPUTE_EXTRA``; None when either kind is missing."""
    gpu = [r["compute_time_mean_s"] for r in rows
           if r["config"].gpu_decode and r.get("compute_time_mean_s") is not None]
    cpu = [r["compute_time_mean_s"] for r in _cpu_decoding(rows) if r.get("compute_time_mean_s") is not None]
    if not gpu or not cpu:
        return None
    median = statistics.median(cpu)
    return {"gpu_s": max(gpu), "cpu_s": median, "extra": max(gpu) / median - 1,
            "longer": max(gpu) > (1 + DECODE_COMPUTE_EXTRA) * median}
