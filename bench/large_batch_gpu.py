"""Lab 07's GPU record: the lab's own gpu profile (``lab_settings("07", "gpu")``), every run, on one GPU.

One command on a machine with one H100/H200 (about 5-6 minutes; progress and an ETA printed per run):

    python bench/large_batch_gpu.py

The airbench-style net (``--model airbench``, bf16, channels_last) with the data set held on the GPU
(``--device-data``): CIFAR-10 where staged (``$COURSEKIT_DATA_DIR``), else Fashion-MNIST (Debian's
``dataset-fashion-mnist``), else the generated stand-in (then a smoke test, not evidence; the record says which).
The runs are lab 07's plan (``coursekit.labs.lab07_large_batch.plan``): A (the gap and LR scaling, 3 seeds), B
(warm-up at a very large LR, the loss of every step, 3 seeds), C (steps to 90 % on a held-out split, batches 64 ...
4096, a 3-point LR grid), D (the noise scale), each through the engine in this process (one start-up). Writes
bench/results/large_batch_gpu.json (cells of A and B, C's curve and fit, D's series, the claims) and
bench/REPORT-large-batch.md (bench/report_large_batch.py); ``--publish`` also copies the JSON to lab 07's
recording. ``--cpu-smoke``: the cpu profile's plan (a tiny MLP on the CPU), to check the script anywhere (not a
measurement; written to a temporary folder unless --out is given).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from robust import check_writable, save_text  # noqa: E402

from coursekit.labs import lab07_large_batch as lb  # noqa: E402
from coursekit.labs import lab_settings  # noqa: E402
from coursekit.labs.kit.experiments import summarize_run  # noqa: E402
from coursekit.labs.kit.results import ResultsTable  # noqa: E402
from coursekit.metrics import read_metrics  # noqa: E402
from coursekit.train.engine import train  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
RECORDING = "large_batch_gpu"
MAX_MINUTES = 12.0  # no run starts after this (the plan takes ~5-6 minutes on an H100)
SPIKE_RECORD_STEPS = 150  # B: the loss of this many first steps goes into the record
KEPT = ("part", "arm", "batch_size", "lr", "seed", "status", "val_acc", "total_time_s", "images_per_s")


def run_one(run: lb.Run, folder: Path) -> dict[str, Any]:
    """One planned run through the engine, quietly; its row (tags and figures, step records included)."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            train(run.config.replace(out=str(folder)))
        except Exception as error:  # noqa: BLE001 - the run's summary records it; the others go on
            print(f"run failed: {type(error).__name__}: {error}", file=sys.stderr)
    return {**run.tags, **summarize_run(read_metrics(folder))}


def record_row(row: dict[str, Any]) -> dict[str, Any]:
    """What the JSON keeps of a row: its tags and figures, C's steps to target, B's first losses."""
    kept = {k: row.get(k) for k in KEPT}
    summary = row.get("summary") or {}
    kept["steps"] = summary.get("steps")
    kept["steps_to_target"] = summary.get("steps_to_target")
    if row["part"] == "B":
        kept["losses"] = [[r["step"], r["loss"]] for r in row["steps"] if r["step"] <= SPIKE_RECORD_STEPS]
    return kept


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def analyse(table: ResultsTable, s: Any) -> dict[str, Any]:
    """Cells of A and B, C's curve and fit, D's series and B_simple, the claims (printed, never raised) and what is
    reported whichever way it goes (SGD against LARS and LAMB)."""
    curve = lb.critical_curve(table)
    fit = lb.fit_critical_batch(curve)
    series = lb.noise_series(table) if table.where(part="D") else []
    at_step = lb.reference_steps(curve, s.base_batch)
    relaxed = {**dict(s.items()), "strict_claims": False}
    claims = lb.check_claims(table, type("S", (dict,), {"__getattr__": dict.__getitem__})(relaxed))
    return {"cells_a": list(lb.cells(table, "A")), "cells_b": list(lb.cells(table, "B")), "curve": list(curve),
            "fit": fit, "noise_series": series, "b_simple_at_target": lb.b_simple_at(series, at_step),
            "reference_steps_to_target": at_step,
            "claims": [{"statement": c.statement, "holds": c.holds, "evidence": c.evidence} for c in claims],
            "findings": [lb.optimizer_finding(lb.optimizer_comparison(table, s), s.large_batch)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="the cpu profile's plan on the CPU (no measurement)")
    parser.add_argument("--out", type=Path, help="the JSON to write (default bench/results/large_batch_gpu.json)")
    parser.add_argument("--parts", default="ABCD", help="the parts to run (default all: ABCD)")
    parser.add_argument("--max-minutes", type=float, default=MAX_MINUTES, help="start no run after this")
    parser.add_argument("--publish", action="store_true", help="also copy the JSON to lab 07's recording")
    args = parser.parse_args(argv)
    if args.cpu_smoke and args.publish:
        parser.error("--publish copies a GPU measurement to lab 07's recording; a --cpu-smoke run is not one")
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("large_batch_gpu: no CUDA device; use --cpu-smoke to check the script on a CPU", file=sys.stderr)
        return 2
    profile = "cpu" if args.cpu_smoke else "gpu"
    s = lab_settings("07", profile)
    out = args.out or (Path(tempfile.mkdtemp(prefix="large-batch-smoke-")) / "large_batch_gpu.json" if args.cpu_smoke
                       else RESULTS / "large_batch_gpu.json")
    check_writable(out)
    runs = [r for r in lb.plan(s) if r.tags["part"] in args.parts]
    work = Path(tempfile.mkdtemp(prefix="large-batch-runs-"))
    if s.get("dataset_notice"):
        print(s.dataset_notice, flush=True)
    print(f"large_batch_gpu: {len(runs)} runs ({profile} profile) -> {out}", flush=True)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for index, run in enumerate(runs):
        if time.perf_counter() - started > args.max_minutes * 60:
            print(f"large_batch_gpu: {args.max_minutes} minutes spent; stopping before run {index + 1}", flush=True)
            break
        row = run_one(run, work / f"run{index:03d}")
        rows.append(row)
        eta = (time.perf_counter() - started) / len(rows) * (len(runs) - len(rows))
        print(f"[{index + 1}/{len(runs)}] {run.tags['part']} {run.tags['arm']} B={run.tags['batch_size']} seed "
              f"{run.tags['seed']}: {row['status']}, val_acc {row['val_acc']}, steps to target "
              f"{(row.get('summary') or {}).get('steps_to_target')}, {row['total_time_s'] or 0:.1f} s "
              f"(elapsed {time.perf_counter() - started:.0f} s, ETA {eta:.0f} s)", flush=True)
    table = ResultsTable(rows)
    base = s.base
    result = {"device": next((r["device"] for r in rows if r.get("device")), None), "torch": torch.__version__,
              "cuda": torch.version.cuda, "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "host": platform.node(), "smoke": args.cpu_smoke,
              "command": " ".join(["python bench/large_batch_gpu.py", *(argv if argv is not None else sys.argv[1:])]),
              "dataset": base.dataset, "dataset_notice": s.get("dataset_notice"), "model": base.model,
              "precision": base.precision, "epochs": base.epochs, "seeds": list(s.seeds),
              "base_batch": s.base_batch, "base_lr": s.base_lr, "target_acc": s.target_acc,
              "base_command": "python -m coursekit.train " + " ".join(base.to_args()),
              "runs": [record_row(r) for r in rows], "total_s": time.perf_counter() - started}
    result["cells"] = [{**c, "part": "A"} for c in lb.cells(table, "A")] if table.where(part="A") else []
    if {"A", "B", "C"} <= set(args.parts) and len(rows) == len(runs):
        result.update(analyse(table, s))
    written = save_text(out, json.dumps(_jsonable(result), indent=1) + "\n")  # first: nothing after it loses it
    print(f"large_batch_gpu: wrote {written} in {result['total_s']:.0f} s", flush=True)
    from report_large_batch import write_report

    try:
        report = write_report(written, out.parent / "REPORT-large-batch.md" if args.cpu_smoke else None)
    except Exception as error:  # noqa: BLE001 - the measurements are written: say how to get the report
        print(f"large_batch_gpu: the report could not be written ({type(error).__name__}: {error}); the results are "
              f"in {written}: python bench/report_large_batch.py --json {written}", file=sys.stderr)
        return 1
    print(f"large_batch_gpu: wrote {report}", flush=True)
    if written != out:
        return 1
    if args.publish:
        from publish import publish  # bench/publish.py

        publish(out, RECORDING)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
