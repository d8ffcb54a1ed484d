"""Write bench/REPORT-model-parallel.md from bench/results/model_parallel_gpu.json (the benchmark calls it).

    python bench/report_model_parallel.py [--json bench/results/model_parallel_gpu.json] [--out bench/REPORT-model-parallel.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from robust import read_json  # noqa: E402


def _num(value: Any, spec: str = ",.1f") -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:{spec}}"


def _verdict(run: dict[str, Any]) -> str:
    if run.get("skipped"):
        return "skipped (time)"
    if run.get("oom"):
        return "**out of memory**"
    if run.get("timed_out"):
        return "timed out"
    return "ok" if run.get("ok") else f"failed ({run.get('exit_code')})"


def render(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    big = result.get("big_model", {})
    lines = [
        "# Lab 08 GPU record: model-parallel strategies of the engine",
        "",
        f"- device: {machine.get('gpus')} x {machine.get('device_name')} "
        f"({_num(machine.get('gpu_memory_gib'))} GiB each), host {machine.get('hostname')}",
        f"- torch {machine.get('torch')}, CUDA {machine.get('cuda')}, Python {machine.get('python')}",
        f"- date {result.get('date')}, total {_num(result.get('total_s'), '.0f')} s",
        f"- command: `{result.get('command')}`",
        "",
        "## A model that DDP cannot hold and FSDP2 over two GPUs can",
        "",
        f"GPT of {_num((big.get('num_parameters') or 0) / 1e9, '.2f')} B parameters ({big.get('sizes')}): fp32 "
        f"AdamW state 16 B/parameter = {_num(big.get('ddp_state_gib'), '.0f')} GiB on every GPU under DDP, "
        f"{_num(big.get('zero3_state_gib_per_gpu'), '.0f')} GiB per GPU under FSDP2 (ZeRO-3) over 2.",
        "",
        "| run | GPUs | result | peak memory per GPU (GiB) | state per GPU (GiB) | formula (GiB) | tokens/s | bubble (measured / theory) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in result.get("runs", []):
        bubble = (f"{_num(run.get('bubble_measured'), '.3f')} / {_num(run.get('bubble_theory'), '.3f')}"
                  if run.get("bubble_theory") is not None else "-")
        lines.append(f"| {run['name']} | {run.get('n_gpu')} | {_verdict(run)} | {_num(run.get('peak_mem_gb'), '.3g')} | "
                     f"{_num(run.get('state_gb_per_gpu'), '.3g')} | {_num(run.get('formula_gb_per_gpu'), '.3g')} | "
                     f"{_num(run.get('tokens_per_s'), ',.0f')} | {bubble} |")
        if run["name"] == "big-zero3":
            lines += ["", "## Per strategy, course-size GPT", "",
                      "| run | GPUs | result | peak memory per GPU (GiB) | state per GPU (GiB) | formula (GiB) | "
                      "tokens/s | bubble (measured / theory) |", "|---|---|---|---|---|---|---|---|"]
    failed = [r for r in result.get("runs", []) if not r.get("ok") and r.get("log_tail")]
    for run in failed:
        lines += ["", f"### {run['name']}: last lines of its log", "", "```", run["log_tail"].strip()[-1200:], "```"]
    return "\n".join(lines) + "\n"


def write_report(result: dict[str, Any], out: Path) -> Path:
    out.write_text(render(result), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "model_parallel_gpu.json")
    parser.add_argument("--out", type=Path, default=BENCH / "REPORT-model-parallel.md")
    args = parser.parse_args(argv)
    print(write_report(read_json(args.json, "model_parallel_gpu.py record"), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
