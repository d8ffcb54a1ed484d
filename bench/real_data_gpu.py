"""Labs 02 and 04's accuracy claims on real data (Fashion-MNIST), on one GPU: what the stand-in cannot show.

The generated stand-in is separated perfectly by a ResNet, so on it lab 02's "the largest batch ends clearly
less accurate" and lab 04's "bf16 and fp16 train like fp32" cannot fail. This runs the labs' own gpu
settings (ResNet-18, their batch sizes, epochs, learning rates, loaders) on Fashion-MNIST, the kit's offline
real data set (``--dataset fashion-mnist``, padded to 32 x 32), each run its own engine process, and
writes every run's summary as soon as it ends (so a time limit keeps what finished)::

    COURSEKIT_DATA_DIR=data python bench/real_data_gpu.py --out bench/results/real_data_gpu.json  # one GPU
    python bench/real_data_gpu.py --report bench/results/real_data_gpu.json   # rewrite bench/REPORT-real-data.md
    python bench/real_data_gpu.py --cpu-smoke --out /tmp/real_smoke.json        # anywhere: tiny runs on the CPU

Runs (in this order, the cheapest claim first): lab 04's fp32 / bf16 / fp16 at batch 256 for its 3 epochs,
then lab 02's smallest and largest batch (128 and 2048, 5 epochs, cosine, bf16, channels_last); both labs hold the
images on the GPU (--device-data). The committed record (bench/results/real_data_gpu.json) was made when lab 02
started at batch 64 and both labs read their images with 8 loader workers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, read_json, require_cuda, save_text  # noqa: E402

REPORT = ROOT / "bench" / "REPORT-real-data.md"
DEFAULT_TIME_LIMIT_S = 280
# the labs' gpu settings (coursekit/labs/lab04_mixed_precision.py, lab02_batch_size.py) on Fashion-MNIST
DEVICE_DATA = ["--device-data"]  # the images on the GPU, augmented there (no DataLoader)
LAB04 = ["--model", "resnet18", "--batch-size", "256", "--epochs", "3", "--lr", "0.1", "--schedule", "cosine",
         *DEVICE_DATA]
LAB02 = ["--model", "resnet18", "--epochs", "5", "--lr", "0.1", "--schedule", "cosine", "--precision", "bf16",
         "--channels-last", *DEVICE_DATA]
LAB02_BATCHES = (128, 2048)  # lab 02's smallest and largest (tests/bench/test_real_data_gpu.py holds them equal)
RUNS = ([("04", f"precision {p}", [*LAB04, "--precision", p]) for p in ("fp32", "bf16", "fp16")]
        + [("02", f"batch {b}", [*LAB02, "--batch-size", str(b)]) for b in LAB02_BATCHES])
CPU_SMOKE = ["--model", "mlp", "--num-samples", "512", "--epochs", "1", "--device", "cpu", "--workers", "0"]
SUMMARY_KEYS = ("val_acc", "val_loss", "train_loss", "steps", "train_time_s", "total_time_s", "images_per_s",
                "skipped_steps", "device_name")


def machine() -> dict[str, Any]:
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def run_one(args: list[str], data_dir: str | None, timeout_s: float) -> dict[str, Any]:
    """One engine process; its summary (the last ``summary`` record of its metrics)."""
    from coursekit.metrics import read_metrics, summary

    with tempfile.TemporaryDirectory(prefix="real-data-") as folder:
        command = [sys.executable, "-m", "coursekit.train", "--dataset", "fashion-mnist", *args, "--seed", "0",
                   "--progress", "off", "--out", folder] + (["--data-dir", data_dir] if data_dir else [])
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
            code, error = done.returncode, (done.stderr or done.stdout)[-1500:]
        except subprocess.TimeoutExpired as expired:  # past the time limit: recorded as failed, what finished is kept
            tail = expired.stderr or b""
            code = "timeout"
            error = f"stopped at the time limit ({timeout_s:.0f} s); stderr: " + (
                tail.decode(errors="replace") if isinstance(tail, bytes) else tail)[-1200:]
        final = summary(read_metrics(Path(folder))) or {}
    row = {k: final.get(k) for k in SUMMARY_KEYS}
    row.update(exit=code, wall_s=round(time.monotonic() - start, 1), args=args)
    if code:
        row["error"] = error
    return row


def measure(out: Path, time_limit_s: float, cpu_smoke: bool, only: list[str] | None = None) -> dict[str, Any]:
    data_dir = os.environ.get("COURSEKIT_DATA_DIR")
    result: dict[str, Any] = {"machine": machine(), "data_dir": data_dir, "runs": [],
                              "command": " ".join(["python", "bench/real_data_gpu.py", *sys.argv[1:]])}
    deadline = time.monotonic() + time_limit_s
    for lab, label, args in RUNS:
        if only and label not in only:
            continue
        left = deadline - time.monotonic()
        if left < 20:
            result["runs"].append({"lab": lab, "label": label, "skipped": "time limit"})
            continue
        row = run_one(CPU_SMOKE if cpu_smoke else args, data_dir, left)
        result["runs"].append({"lab": lab, "label": label, **row})
        save_text(out, json.dumps(result, indent=1) + "\n")  # the run's record before its line
        print(f"{lab} {label}: exit {row['exit']}, val_acc {row['val_acc']}, {row['wall_s']} s", flush=True)
    return result


def _f(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "–"


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = ["# Labs 02 and 04 on real data (Fashion-MNIST), one GPU", "",
             f"{m.get('gpu')}, torch {m.get('torch')}, CUDA {m.get('cuda')}, {m.get('date', '')[:10]}; "
             f"`{result['command']}` (data: Fashion-MNIST, 60,000 + 10,000 images padded to 32 x 32; one seed).", "",
             "| lab | run | validation accuracy | validation loss | training loss | steps | run s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in result["runs"]:
        if run.get("skipped") or run.get("exit"):
            lines.append(f"| {run['lab']} | {run['label']} | {run.get('skipped') or 'failed'} | | | | |")
            continue
        lines.append(f"| {run['lab']} | {run['label']} | {_f(run['val_acc'])} | {_f(run['val_loss'])} | "
                     f"{_f(run['train_loss'])} | {run['steps']} | {_f(run['total_time_s'], 1)} |")
    lines += ["", "What it says about the labs' claims is in the paragraph below the table (written from these numbers)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="rewrite bench/REPORT-real-data.md from this record")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--only", action="append", help="only this run (its label, e.g. 'batch 2048'); repeatable")
    args = parser.parse_args(argv)
    if args.report:
        print(report(read_json(args.report, "real_data_gpu.py record")), end="")
        return 0
    if not args.out:
        parser.error("--out FILE is needed to measure")
    if not args.cpu_smoke:
        require_cuda()
    from coursekit.train.data import fashion_mnist

    try:  # where the engine will look: $COURSEKIT_DATA_DIR, else Debian's folder
        fashion_mnist.data_folder(os.environ.get("COURSEKIT_DATA_DIR"))
    except ValueError as error:
        print(f"bench/real_data_gpu.py: Fashion-MNIST is missing: nothing to measure. {error}", file=sys.stderr)
        return 2
    check_writable(args.out)
    result = measure(args.out, args.time_limit, args.cpu_smoke, args.only)
    return 0 if all(not r.get("exit") for r in result["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
