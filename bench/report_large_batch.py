"""Write bench/REPORT-large-batch.md from bench/results/large_batch_gpu.json (bench/large_batch_gpu.py calls it).

    python bench/report_large_batch.py [--json bench/results/large_batch_gpu.json] [--out bench/REPORT-large-batch.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DEFAULT_JSON = BENCH / "results" / "large_batch_gpu.json"
DEFAULT_REPORT = BENCH / "REPORT-large-batch.md"


def _acc(value: float | None, std: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f} ± {std:.3f}" if std is not None else f"{value:.3f}"


def report_text(result: dict[str, Any]) -> str:
    small, large = result["small_batch"], result["large_batch"]
    cells = {(c["method"], c["batch_size"]): c for c in result["cells"]}
    methods = list(dict.fromkeys(c["method"] for c in result["cells"]))
    lines = [
        "# Lab 07 GPU record: accuracy against batch size",
        "",
        f"Machine: {result.get('device')} ({result.get('host')}), torch {result.get('torch')}, CUDA "
        f"{result.get('cuda')}, {result.get('date')}. Command: `{result.get('command')}`"
        + (f" ({result['command_note']})" if result.get("command_note") else "")
        + (" — **a CPU smoke run, not a measurement**." if result.get("smoke") else "."),
        "",
        f"Data: the engine's **generated stand-in** of CIFAR-10's size ({result.get('num_samples'):,} images of "
        f"{result.get('image_size')} x {result.get('image_size')}, {result.get('num_classes', 10)} classes; dataset `{result.get('dataset')}`). "
        "CIFAR-10 itself cannot be downloaded on the benchmark machine, so these accuracies are the stand-in's, "
        "not CIFAR-10's; on a cluster with CIFAR-10 staged, lab 07's gpu profile trains on the real one.",
        "",
        f"Model {result.get('model')}, {result.get('precision')}; every run {result.get('epochs')} epochs "
        f"(equal-epochs budget), seeds {result.get('seeds')}; each cell is the mean ± sample std over the seeds "
        f"that completed. Base run: `{result.get('base_command')}`; methods add: "
        + "; ".join(f"{name}: `{opts}`" for name, opts in result.get("methods", {}).items()) + ".",
        "",
        f"| method | batch {small}: val acc | batch {large}: val acc | {large} − {small} | time per run "
        f"{small} / {large} (s) | seeds done |",
        "|---|---|---|---|---|---|",
    ]
    planned = len(result.get("seeds", []))
    for method in methods:
        a, b = cells.get((method, small), {}), cells.get((method, large), {})
        diff = (f"{b['val_acc'] - a['val_acc']:+.3f}" if a.get("val_acc") is not None
                and b.get("val_acc") is not None else "-")
        lines.append(f"| {method} | {_acc(a.get('val_acc'), a.get('val_acc_std'))} | "
                     f"{_acc(b.get('val_acc'), b.get('val_acc_std'))} | {diff} | "
                     f"{a.get('time_s', 0):.1f} / {b.get('time_s', 0):.1f} | "
                     f"{a.get('completed', 0)}/{planned}, {b.get('completed', 0)}/{planned} |")
    started = {(r["method"], r["batch_size"], r["seed"]) for r in result.get("runs", [])}
    not_started = [f"{m} batch {bs} seed {seed}" for seed in result.get("seeds", []) for m in methods
                   for bs in (small, large) if (m, bs, seed) not in started]
    if not_started:
        lines += ["", f"Not started (the run's time budget was spent): {'; '.join(not_started)}."]
    lines += ["", "Images/s per batch size (steady state of a short run, same model and data):", ""]
    if result.get("throughput"):
        lines += ["| batch | images/s |", "|---|---|"]
        lines += [f"| {r['batch_size']} | {r['images_per_s'] or 0:,.0f} |" for r in result["throughput"]]
    else:
        lines.append("not measured (the run's time budget was spent before this part).")
    failed = [r for r in result.get("runs", []) if r.get("status") != "completed"]
    if failed:
        lines += ["", "Runs that did not complete: " + "; ".join(
            f"{r['method']} batch {r['batch_size']} seed {r['seed']}: {r.get('status')} {r.get('error') or ''}"
            for r in failed)]
    total = result.get("total_s_note") or f"{result.get('total_s', 0):.0f} s"
    lines += ["", f"Total time {total}. Read by notebook 07 "
              "(`coursekit.labs.lab07_large_batch.load_recorded`).", ""]
    return "\n".join(lines)


def write_report(json_path: Path = DEFAULT_JSON, out: Path | None = None) -> Path:
    result = json.loads(Path(json_path).read_text(encoding="utf-8"))
    target = out or DEFAULT_REPORT
    target.write_text(report_text(result), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(f"wrote {write_report(args.json, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
