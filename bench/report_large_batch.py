"""Write bench/REPORT-large-batch.md from bench/results/large_batch_gpu.json (bench/large_batch_gpu.py calls it).

    python bench/report_large_batch.py [--json bench/results/large_batch_gpu.json] [--out bench/REPORT-large-batch.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from robust import read_json  # noqa: E402

DEFAULT_JSON = BENCH / "results" / "large_batch_gpu.json"
DEFAULT_REPORT = BENCH / "REPORT-large-batch.md"


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _acc(value: float | None, std: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.4f} ± {std or 0:.4f}"


def report_text(result: dict[str, Any]) -> str:
    """The report: where and how it ran, A's and B's cells, C's curve and fit, D's B_simple, the claims."""
    lines = ["# Lab 07 GPU record: large-batch training (the lab's gpu profile)", "",
             f"Recorded on {result.get('device')}, {result.get('date')}, torch {result.get('torch')}, "
             f"`{result.get('command')}`, {result.get('total_s', 0):.0f} s in all"
             + (" — a CPU smoke run, not a measurement." if result.get("smoke") else "."), "",
             f"Model {result.get('model')} ({result.get('precision')}), dataset {result.get('dataset')}, "
             f"{result.get('epochs')} epochs, seeds {result.get('seeds')}, lr0 {result.get('base_lr')} at batch "
             f"{result.get('base_batch')}; base run: `{result.get('base_command')}`.", ""]
    if result.get("dataset_notice"):
        lines += [f"> {result['dataset_notice'].splitlines()[0]}", ""]
    if result.get("cells_a"):
        lines += ["## A. Equal epochs: the gap and LR scaling", "", "| arm | batch | peak LR | steps | test acc (mean ± sd) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {c['arm']} | {c['batch_size']} | {'-' if c.get('lr') is None else format(c['lr'], 'g')} | "
                  f"{c['steps']} | {_acc(c['val_acc'], c['val_acc_std'])} |"
                  for c in result["cells_a"]]
        lines += ["", "## B. Warm-up at a very large LR", "",
                  "| arm | batch | peak loss, first 50 steps | test acc (mean ± sd) |", "|---|---|---|---|"]
        lines += [f"| {c['arm']} | {c['batch_size']} | {_num(c['early_peak_loss'], 2)} | "
                  f"{_acc(c['val_acc'], c['val_acc_std'])} |" for c in result.get("cells_b", [])]
        fit = result.get("fit") or {}
        lines += ["", f"## C. Steps to {result.get('target_acc')} on the held-out split (best LR of the grid)", "",
                  "| batch | steps | samples | best LR | LRs reaching |", "|---|---|---|---|---|"]
        lines += [f"| {r['batch_size']} | {_num(r['steps_to_target'])} | {_num(r['samples_to_target'])} | "
                  f"{_num(r['best_lr'], 4)} | {r['lrs_reaching']}/{r['lrs']} |" for r in result.get("curve", [])]
        lines += ["", f"Fit (S/S_min − 1)(E/E_min − 1) = 1: S_min {_num(fit.get('s_min'), 1)}, E_min "
                      f"{_num(fit.get('e_min'), 0)}, B_crit {_num(fit.get('b_crit'), 0)}.", "",
                  "## D. Noise scale", "",
                  f"B_simple (two-batch estimator, train mode, separate moving averages) at step "
                  f"{result.get('reference_steps_to_target')} (C's reference batch reaches the target): "
                  f"{_num(result.get('b_simple_at_target'), 0)}.", "", "## Claims (as measured, never asserted here)", ""]
        lines += [f"- **{'holds' if c['holds'] else 'not checked' if c['holds'] is None else 'not seen'}**: "
                  f"{c['statement']} — {c['evidence']}" for c in result.get("claims", [])]
        for finding in result.get("findings", []):  # reported whichever way it goes: "MEASURED ...: line\n measured: ..."
            head, _, numbers = finding.partition("\n")
            lines.append(f"- **reported either way**: {head.split(': ', 1)[-1]} — {numbers.strip()}")
    else:
        lines += ["Parts A-C did not all run: no analysis. Runs:", ""]
        lines += [f"- {r.get('part')} {r.get('arm')} B={r.get('batch_size')} seed {r.get('seed')}: {r.get('status')}, "
                  f"{r.get('val_acc')}" for r in result.get("runs", [])]
    return "\n".join(lines) + "\n"


def write_report(json_path: Path = DEFAULT_JSON, out: Path | None = None) -> Path:
    result = read_json(Path(json_path), "large_batch_gpu.py record", "bench/report_large_batch.py")
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
