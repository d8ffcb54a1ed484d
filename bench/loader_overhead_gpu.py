"""Where a loader setting's wall time goes: process start, build, steps, epoch boundaries, the end, exit.

Issue 12 saw lab 05's ``workers=16 + persistent + prefetch 4`` run take 191 s of wall time for 30 steps
that ran at 1,147 img/s (about 7 s). Each configuration here runs the engine in its own process, as a
job would, with ``--log-every 1``; the metrics' timestamps split the wall time into phases::

    python bench/loader_overhead_gpu.py --jpeg-dir /tmp/jpegs --out bench/results/loader_overhead_gpu.json  # GPU
    python bench/loader_overhead_gpu.py --cpu --out /tmp/loader_overhead.json                            # CPU

``epoch_gaps_s`` is the time between steps beyond the median step (epoch ends, validation, worker
starts); ``exit_s`` is what the process takes after its summary (CUDA teardown; before the fix also the
persistent workers: torch 2.11 joins each pinned persistent worker at exit with a 5 s timeout,
pytorch/pytorch#81794, so 16 + 16 workers cost 160 s). The engine's own phases come from the summary's
``loader_phases``: ``loader_build_s``, ``first_batch_s`` (first epoch: workers start),
``later_epoch_starts_s``, ``validation_s`` and ``loader_shutdown_s`` (the engine now stops the workers
itself at the end of the run). Expected on the GPU after the fix: ``exit_s`` a few seconds at most for
every setting, ``loader_shutdown_s`` well under a second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, require_cuda, save_text  # noqa: E402

GPU_RUN = ["--model", "resnet50", "--image-size", "224", "--batch-size", "256", "--precision", "bf16",
           "--channels-last", "--steps", "30"]
RUN_TIMEOUT_S = 240  # per configuration: the first GPU try (2026-11-26) printed nothing in 500 s
CPU_RUN = ["--model", "mlp", "--image-size", "32", "--batch-size", "16", "--steps", "45"]
LOADERS = {
    "workers=0": [],
    "workers=8 +pin +non_blocking": ["--workers", "8", "--pin-memory", "--non-blocking"],
    "workers=16 +persistent +prefetch4": ["--workers", "16", "--persistent-workers", "--prefetch-factor", "4"],
    "workers=16 +pin +persistent +prefetch4": ["--workers", "16", "--pin-memory", "--non-blocking",
                                               "--persistent-workers", "--prefetch-factor", "4"],
}


def phases(records: list[dict[str, Any]], started: float, ended: float) -> dict[str, Any]:
    """Split a run's wall time with its records' timestamps."""
    start = next(r for r in records if r["kind"] == "start")["time"]
    steps = [r for r in records if r["kind"] == "step"]
    final = next(r for r in records if r["kind"] == "summary")
    step_times = [r["data_time_s"] + r["compute_time_s"] for r in steps]
    gaps = [b["time"] - a["time"] for a, b in zip(steps, steps[1:], strict=False)]
    typical = statistics.median(gaps) if gaps else 0.0
    return {"wall_s": ended - started, "process_start_s": start - started,
            "build_and_first_step_s": steps[0]["time"] - start if steps else None,
            "steps_s": sum(step_times), "epoch_gaps_s": sum(max(0.0, g - typical) for g in gaps),
            "end_s": final["time"] - steps[-1]["time"] if steps else None, "exit_s": ended - final["time"],
            **loader_phases(final), "images_per_s": final.get("images_per_s"), "status": final.get("status")}


def loader_phases(summary: dict[str, Any]) -> dict[str, Any]:
    """The engine's own loader timings (summary ``loader_phases``): building the datasets, each epoch's wait
    for its first batch (worker start), validation passes, the workers' shutdown at the end of the run."""
    phases = summary.get("loader_phases") or {}
    first = phases.get("first_batch_s") or []
    return {"loader_build_s": phases.get("build_s"), "first_batch_s": first[0] if first else None,
            "later_epoch_starts_s": sum(first[1:]) if first else None, "epochs_started": len(first),
            "validation_s": phases.get("validation_s"), "loader_shutdown_s": phases.get("shutdown_s")}


def run(data_dir: Path, common: list[str], extra: list[str], device: str) -> dict[str, Any]:
    from coursekit.metrics import read_metrics

    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "coursekit.train", "--dataset", "jpeg_folder", "--data-dir", str(data_dir),
                   "--device", device, "--log-every", "1", "--progress", "off", "--out", out, *common, *extra]
        started = time.time()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired as expired:
            tail = (expired.stderr or b"")[-2000:]
            return {"status": "failed", "returncode": None, "stderr": f"timed out after {RUN_TIMEOUT_S} s; stderr: "
                    + (tail.decode(errors="replace") if isinstance(tail, bytes) else tail)}
        ended = time.time()
        if done.returncode != 0:
            return {"status": "failed", "returncode": done.returncode, "stderr": done.stderr[-2000:]}
        try:
            return phases(read_metrics(out), started, ended)
        except (StopIteration, KeyError, IndexError, TypeError) as error:  # a record missing: no phases to split
            return {"status": "failed", "returncode": 0, "stderr": f"its metrics lack a start, step or summary "
                    f"record ({type(error).__name__}: {error}); stderr: {done.stderr[-1500:]}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jpeg-dir", type=Path, help="a JPEG tree (written there when empty)")
    parser.add_argument("--cpu", action="store_true", help="a small CPU run (MLP, 160x120 JPEGs)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not args.cpu:
        require_cuda("--cpu")
    check_writable(args.out)
    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    root = args.jpeg_dir or Path(tempfile.mkdtemp(prefix="coursekit-loader-"))
    if not (root / "train").is_dir():  # the tree: 2,400 training JPEGs (ImageNet-sized on a GPU)
        size = (160, 120) if args.cpu else (500, 375)
        started = time.time()
        write_synthetic_jpeg_tree(root, 8 if not args.cpu else 4, 300 if not args.cpu else 60, size=size,
                                  workers=os.cpu_count() or 1)
        print(f"wrote the JPEG tree under {root} in {time.time() - started:.0f} s", flush=True)
    rows: dict[str, Any] = {}
    written = args.out
    for name, extra in LOADERS.items():
        rows[name] = run(root, CPU_RUN if args.cpu else GPU_RUN, extra, "cpu" if args.cpu else "cuda")
        row = rows[name]
        written = save_text(args.out, json.dumps({"command": "python bench/loader_overhead_gpu.py " + " ".join(sys.argv[1:]),
                                                  "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows},
                                                 indent=1) + "\n")  # each row as it ends, before its line
        print(f"{name:<40} " + (" ".join(f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float))
                                 if row.get("status") != "failed" else f"FAILED: {row['stderr'][-300:]}"), flush=True)
    return 0 if written == args.out else 1


if __name__ == "__main__":
    sys.exit(main())
