"""Peak GPU memory vs batch size up to the out-of-memory error, each batch size a coursekit job.

As DLO-JZ does, the OOM is detected from the job itself (its state, its stderr and its metrics), not by
catching it in this process: each batch size is submitted through ``coursekit.submit_jobs`` (the local
executor on a machine without Slurm), one after the other so that jobs do not share the GPU.

    python bench/memory_sweep_gpu.py --out bench/results/gpu_memory_sweep.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from robust import check_writable, require_cuda, save_text  # noqa: E402

from coursekit.metrics import steps, summary, throughput  # noqa: E402

BATCH_SIZES = (128, 256, 512, 1024, 2048, 4096)
TEST_STEPS = 6
JOB_TIME = "00:08:00"
WAIT_S = 480
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "OUT_OF_MEMORY")
TRAIN_ARGS = ["-m", "coursekit.train", "--model", "resnet50", "--dataset", "synthetic", "--gpu-resident",
              "--image-size", "224", "--num-classes", "1000", "--precision", "fp32", "--test-steps", str(TEST_STEPS),
              "--log-every", "1", "--progress", "off"]


def classify(job: Any) -> dict[str, Any]:
    """What the job says about itself: completed with its peak memory, or out of memory."""
    try:
        state = job.wait(timeout=WAIT_S)
    except (TimeoutError, RuntimeError) as error:  # still running after WAIT_S, or the scheduler stopped answering
        print(f"batch job {job.job_id}: {error}; cancelled, recorded as TIMEOUT", file=sys.stderr, flush=True)
        job.cancel()
        state = "TIMEOUT"
    records = job.metrics()
    final = summary(records) or {}
    stderr = job.tail(200, stream="err")
    oom = state == "OUT_OF_MEMORY" or any(m in stderr or m in str(final.get("error", "")) for m in OOM_MARKERS)
    peaks = [r.get("mem_allocated_peak_mb") for r in steps(records) if r.get("mem_allocated_peak_mb")]
    rate, _ = throughput(steps(records), "images_per_s", skip=2)  # images / wall time (coursekit/metrics.py)
    return {"job_id": job.job_id, "state": state, "oom": oom,
            "peak_mem_gb": max(peaks) / 1024 if peaks else None,
            "reserved_gb": (final.get("mem_reserved_peak_mb") or 0) / 1024 or None,
            "img_s": rate,
            "memory_estimate_gb": (final.get("memory_estimate") or {}).get("total_bytes", 0) / 2**30 or None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    require_cuda(None)
    check_writable(args.out)
    os.environ.setdefault("COURSEKIT_COURSE_DIR", tempfile.mkdtemp(prefix="coursekit-oom-"))
    from coursekit.jobs.submit import submit_jobs

    rows: list[dict[str, Any]] = []
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "total_memory_gb": torch.cuda.get_device_properties(0).total_memory / 2**30,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/memory_sweep_gpu.py " + " ".join(sys.argv[1:]),
              "model": "resnet50 fp32 224px synthetic", "memory_sweep": rows}
    written = args.out
    for batch in BATCH_SIZES:
        command = " ".join([*TRAIN_ARGS, "--batch-size", str(batch)])
        (job,) = submit_jobs(command, n_gpu=1, name=f"oom{batch}", site="local", time_max=JOB_TIME)
        row = {"batch_size": batch, **classify(job)}
        rows.append(row)
        result["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        written = save_text(args.out, json.dumps(result, indent=2) + "\n")  # each row before its line
        print(f"batch {batch:5d}: {row['state']!s:<14} oom={row['oom']!s:<5} peak {row['peak_mem_gb'] or 0:6.1f} GB "
              f"{row['img_s'] or 0:8.0f} img/s", flush=True)
        if row["oom"]:
            break
    return 0 if written == args.out else 1


if __name__ == "__main__":
    raise SystemExit(main())
