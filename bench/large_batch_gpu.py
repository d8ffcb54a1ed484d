"""Lab 07's GPU record: accuracy against batch size on one GPU, every cell a mean ± std over 3 seeds.

One command on a machine with one H100/H200 (at most ~7.5 minutes: no run starts after 7; progress and an
ETA printed per run):

    python bench/large_batch_gpu.py

ResNet-18 (bf16, channels_last) on the generated stand-in of CIFAR-10's size (50,000 + 10,000 images of
32 x 32, 10 classes): CIFAR-10 itself cannot be downloaded on the benchmark machine, so the accuracies are
the stand-in's, not CIFAR-10's (the report says so). Lab 07's methods (SGD; SGD + linear scaling + warm-up +
cosine; AdamW; LARS; LAMB, from ``coursekit.labs.lab_settings("07", ...)``) at batch 256 and 4096 for the same number
of epochs (equal-epochs budget only: equal steps at 4096 would be 16 times longer), seeds 0-2, each run
through the engine (``coursekit.train.train``, in this process: one start-up); then images/s of short runs
at batch 256 ... 4096. Writes bench/results/large_batch_gpu.json and bench/REPORT-large-batch.md
(bench/report_large_batch.py); ``--publish`` also copies the JSON to lab 07's recording,
coursekit/labs/recordings/large_batch_gpu.json. ``--cpu-smoke``: the same plan with a tiny MLP on the CPU, to check the
script anywhere (not a measurement; written to a temporary folder unless --out is given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coursekit.labs import lab_settings  # noqa: E402
from coursekit.labs.kit.datasets import standin_config  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402
from coursekit.train.engine import train  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "large_batch_gpu.json"
RECORDING = "large_batch_gpu"  # --publish: coursekit/labs/recordings/large_batch_gpu.json
EPOCHS = 3  # per run: 30 runs x 3 epochs of 50,000 images, estimated ~6 minutes on one H100
WARMUP_EPOCHS = 1.0
SEEDS = (0, 1, 2)
SMALL_BATCH, LARGE_BATCH = 256, 4096  # DLO-JZ's 256 vs 8192 halved: one GPU, within the time budget
THROUGHPUT_BATCHES = (256, 512, 1024, 2048, 4096)
THROUGHPUT_STEPS = 40
THROUGHPUT_LOG_EVERY = 5  # windows of the throughput runs (the runs' own log_every of 50 leaves none in 40 steps)
MAX_MINUTES = 7.0  # no new run starts after this (seeds are the outer loop: finished seeds stay whole)


def gpu_plan(epochs: int) -> tuple[TrainConfig, dict[str, dict[str, Any]], int, int]:
    s = lab_settings("07", "gpu")
    # the whole stand-in (50,000 + 10,000), whatever subset the lab's own gpu profile trains on; in memory: no workers
    full = s.base.replace(dataset="cifar10", num_samples=None, val_fraction=0.0)
    # validation after every epoch, as the record's runs had it (the lab validates only after the last)
    base = standin_config(full).replace(epochs=epochs, log_every=50, progress="off", workers=0,
                                        persistent_workers=False, val_every_epochs=1)
    methods = {name: {**opts, **({"warmup_epochs": WARMUP_EPOCHS} if "warmup_epochs" in opts else {})}
               for name, opts in s.methods.items()}
    return base, methods, SMALL_BATCH, LARGE_BATCH


def smoke_plan() -> tuple[TrainConfig, dict[str, dict[str, Any]], int, int]:
    s = lab_settings("07", "cpu")
    return s.base.replace(num_samples=600, image_size=8, epochs=1, log_every=5), s.methods, 16, 128


def run_one(config: TrainConfig, out: Path) -> dict[str, Any]:
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            summary = train(config.replace(out=str(out)))
        except Exception as error:  # noqa: BLE001 - a failed run is a row of the record, not the end
            summary = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    gc.collect()  # the run's model, optimizer and loader workers go before the next run starts
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"status": summary.get("status"), "val_acc": summary.get("val_acc"),
            "time_s": time.perf_counter() - started, "images_per_s": summary.get("images_per_s"),
            "steps": summary.get("steps"), "error": summary.get("error"), "device": summary.get("device_name")}


def cells(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds per (method, batch)."""
    out = []
    for key in dict.fromkeys((r["method"], r["batch_size"]) for r in runs):
        group = [r for r in runs if (r["method"], r["batch_size"]) == key]
        accs = [r["val_acc"] for r in group if r["status"] == "completed" and r["val_acc"] is not None]
        times = [r["time_s"] for r in group]
        out.append({"method": key[0], "batch_size": key[1], "seeds": len(group), "completed": len(accs),
                    "val_acc": statistics.fmean(accs) if accs else None,
                    "val_acc_std": statistics.stdev(accs) if len(accs) > 1 else None,
                    "time_s": statistics.fmean(times), "time_s_std": statistics.stdev(times) if len(times) > 1 else 0})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny MLP on the CPU: checks the script only")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--max-minutes", type=float, default=MAX_MINUTES)
    parser.add_argument("--out", type=Path, default=None, help=f"results JSON (default {RESULTS})")
    parser.add_argument("--publish", action="store_true",
                        help=f"also copy the JSON to coursekit/labs/recordings/{RECORDING}.json (what the labs read)")
    parser.add_argument("--complete", type=Path, default=None,
                        help="an earlier results JSON of the same plan: its completed runs and throughput are kept, "
                             "only the rest run (a record that a time budget cut short)")
    args = parser.parse_args(argv)
    if args.publish and args.cpu_smoke:
        parser.error("--publish writes the labs' recording: not from a --cpu-smoke run")
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("large_batch_gpu: no GPU here; use --cpu-smoke to check the script on a CPU", file=sys.stderr)
        return 2
    base, methods, small, large = smoke_plan() if args.cpu_smoke else gpu_plan(args.epochs)
    out = args.out or (Path(tempfile.mkdtemp()) / "large_batch_smoke.json" if args.cpu_smoke else RESULTS)
    work = Path(tempfile.mkdtemp(prefix="large-batch-"))
    plan = [(name, batch, seed) for seed in SEEDS for name in methods for batch in (small, large)]
    throughput = [b for b in THROUGHPUT_BATCHES if b <= large] if not args.cpu_smoke else [small, large]
    earlier = json.loads(args.complete.read_text(encoding="utf-8")) if args.complete else {}
    if earlier and (earlier.get("epochs"), earlier.get("small_batch"), earlier.get("large_batch")) != (
            base.epochs, small, large):
        raise SystemExit(f"--complete {args.complete}: its epochs/batches {earlier.get('epochs')}, "
                         f"{earlier.get('small_batch')}/{earlier.get('large_batch')} differ from this plan's "
                         f"{base.epochs}, {small}/{large}: run without --complete or with the same --epochs")
    done = {(r["method"], r["batch_size"], r["seed"]): r for r in earlier.get("runs", []) if r["status"] == "completed"}
    started = time.perf_counter()
    print(f"large_batch_gpu: {len(throughput)} throughput runs, then {len(plan) - len(done)} runs of {base.epochs} "
          f"epoch(s) ({len(done)} kept from {args.complete})" if done else
          f"large_batch_gpu: {len(throughput)} throughput runs, then {len(plan)} runs of {base.epochs} epoch(s)",
          flush=True)
    # images/s first: short, and a time budget that ends the runs early does not lose it (as on 2026-11-26)
    rates = [r for r in earlier.get("throughput", []) if r.get("status") == "completed" and r.get("images_per_s")]
    for batch in [b for b in throughput if b not in {r["batch_size"] for r in rates}]:
        row = run_one(base.replace(batch_size=batch, test_steps=THROUGHPUT_STEPS, log_every=THROUGHPUT_LOG_EVERY),
                      work / f"rate{batch}")
        rates.append({"batch_size": batch, "images_per_s": row["images_per_s"], "status": row["status"]})
        print(f"throughput batch {batch}: {row['images_per_s'] or 0:,.0f} img/s", flush=True)
    rates.sort(key=lambda r: r["batch_size"])
    runs: list[dict[str, Any]] = []
    for index, (name, batch, seed) in enumerate(plan):
        if (name, batch, seed) in done:
            runs.append(done[(name, batch, seed)])
            continue
        elapsed = time.perf_counter() - started
        if elapsed > args.max_minutes * 60:
            print(f"large_batch_gpu: {args.max_minutes} minutes spent; stopping before run {index + 1}", flush=True)
            break
        config = base.replace(**methods[name], batch_size=batch, seed=seed)
        row = {"method": name, "batch_size": batch, "seed": seed, **run_one(config, work / f"run{index:03d}")}
        runs.append(row)
        ran = len(runs) - len(done.keys() & set(plan[:index + 1]))  # run now, not kept
        eta = (time.perf_counter() - started) / max(ran, 1) * (len(plan) - index - 1)
        print(f"[{index + 1}/{len(plan)}] {name} batch {batch} seed {seed}: {row['status']}, val_acc "
              f"{row['val_acc'] if row['val_acc'] is None else round(row['val_acc'], 4)}, {row['time_s']:.1f} s "
              f"(elapsed {time.perf_counter() - started:.0f} s, ETA {eta:.0f} s)", flush=True)
    device = next((r["device"] for r in runs if r.get("device")), None)
    result = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "host": platform.node(),
              "command": " ".join(["python bench/large_batch_gpu.py", *(argv if argv is not None else sys.argv[1:])]),
              "completed_from": str(args.complete) if args.complete else None,
              "smoke": args.cpu_smoke, "dataset": base.dataset, "num_samples": base.num_samples,
              "image_size": base.image_size, "num_classes": base.num_classes, "model": base.model, "precision": base.precision,
              "epochs": base.epochs, "small_batch": small, "large_batch": large, "seeds": list(SEEDS),
              "methods": methods, "base_command": "python -m coursekit.train " + " ".join(base.to_args()),
              "runs": runs, "cells": cells(runs), "throughput": rates,
              "total_s": time.perf_counter() - started}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"large_batch_gpu: wrote {out} in {result['total_s']:.0f} s", flush=True)
    from report_large_batch import write_report

    report = write_report(out, out.parent / "REPORT-large-batch.md" if args.cpu_smoke else None)
    print(f"large_batch_gpu: wrote {report}", flush=True)
    if args.publish:
        from publish import publish  # bench/publish.py
        publish(out, RECORDING)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
