"""Write bench/REPORT-ddp.md from bench/results/ddp_gpu.json (bench/ddp_gpu.py calls it; or run it alone).

    python bench/report_ddp.py [--json bench/results/ddp_gpu.json] [--out bench/REPORT-ddp.md]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from robust import read_json  # noqa: E402

MIB = 2**20


def all_runs(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every launched run of a result (each has ``ok``, ``log`` and ``exit_codes``)."""
    runs = [*result.get("scaling", []), *result.get("busbw", []), *result.get("script", [])]
    if "buckets" in result:
        runs += [*result["buckets"]["bucket_sweep"], *result["buckets"]["accumulation"]]
    for name in ("node", "task"):
        runs += list(result.get("binding", {}).get(name, {}).values())
    return runs


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else f"{value:{spec}}"


def _size(nbytes: int) -> str:
    return f"{nbytes / MIB / 1024:g} GiB" if nbytes >= 1024 * MIB else f"{nbytes / MIB:g} MiB"


def _check(value: float | None, target: float | None) -> str:
    if value is None or target is None:
        return ""
    return "met" if value >= target else "**missed**"


def _pm(std: float | None, spec: str = ",.0f") -> str:
    """`` ± std`` of repeated runs (nothing for a single run)."""
    return f" ± {format(std, spec)}" if std else ""


def scaling_table(rows: list[dict[str, Any]], targets: dict[str, float]) -> list[str]:
    repeats = max((r.get("repeats", 1) for r in rows), default=1)
    note = [f"Mean ± sample std over {repeats} runs of each configuration, run in turn.", ""] if repeats > 1 else []
    lines = [*note, "| scaling | GPUs | batch per GPU | global batch | images/s | per GPU | step (ms) | speed-up "
             "| efficiency | target |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        target = targets.get(str(r["world_size"])) if r["mode"] == "weak" else None
        verdict = f"≥ {target} {_check(r.get('efficiency'), target)}" if target else ""
        lines.append(f"| {r['mode']} | {r['world_size']} | {r['batch_per_gpu']} | {r['global_batch']} | "
                     f"{_num(r.get('img_s'))}{_pm(r.get('img_s_std'))} | {_num(r.get('img_s_per_gpu'))} | "
                     f"{_num(r.get('step_ms'), '.1f')} | {_num(r.get('speedup'), '.2f')} | "
                     f"{_num(r.get('efficiency'), '.3f')}{_pm(r.get('efficiency_std'), '.3f')} | {verdict} |"
                     + ("" if r["ok"] else " (failed: see its log)"))
    return lines


def busbw_table(runs: list[dict[str, Any]]) -> list[str]:
    runs = [r for r in runs if r.get("rows")]
    if not runs:
        return ["(no bus-bandwidth run succeeded)"]
    header = " | ".join(f"{r['world_size']} GPUs, {r['binding']}: busbw GB/s (time µs)" for r in runs)
    lines = [f"| size | {header} |", "|---|" + "---|" * len(runs)]
    for i, row in enumerate(runs[0]["rows"]):
        cells = [f"{_num(r['rows'][i]['busbw_gbs'], ',.1f')} ({_num(r['rows'][i]['time_us'], ',.0f')})"
                 for r in runs]
        lines.append(f"| {_size(row['bytes'])} | " + " | ".join(cells) + " |")
    return lines


def binding_section(binding: dict[str, Any], model: str) -> list[str]:
    lines = [f"On {binding['world_size']} GPUs:", "",
             "| binding | what each process sees | busbw at the largest size (GB/s) | NCCL transports "
             f"(connections) | {model} images/s |", "|---|---|---|---|---|"]
    seen = {"node": "every GPU of the node, picks its local rank's", "task": "its own GPU only (CUDA_VISIBLE_DEVICES)"}
    for name in ("node", "task"):
        part = binding.get(name, {})
        bw, engine = part.get("busbw", {}), part.get("engine", {})
        last = (bw.get("rows") or [{}])[-1].get("busbw_gbs")
        via = ", ".join(f"{k} {v}" for k, v in (bw.get("nccl_debug") or {}).get("via", {}).items()) or "-"
        lines.append(f"| {name} | {seen[name]} | {_num(last, ',.1f')} | {via} | {_num(engine.get('img_s'))} |")
    for name in ("node", "task"):
        debug = binding.get(name, {}).get("busbw", {}).get("nccl_debug") or {}
        if debug.get("examples"):
            lines += ["", f"NCCL_DEBUG=INFO, {name} binding (log `{binding[name]['busbw']['log']}`):", "```",
                      *debug.get("ring_lines", []), *debug.get("tree_lines", []), *debug["examples"], "```"]
    return lines


def buckets_section(part: dict[str, Any]) -> list[str]:
    lines = [f"On {part['world_size']} GPUs, batch {part['bucket_sweep'][0]['batch_per_gpu']} per GPU:", "",
             "| run | options | step (ms) | images/s |", "|---|---|---|---|"]
    for r in [*part["bucket_sweep"], *part["accumulation"]]:
        lines.append(f"| {r['name']} | `{' '.join(r['options'])}` | {_num(r.get('step_ms'), '.1f')} | "
                     f"{_num(r.get('img_s'))} |")
    return lines


def render(result: dict[str, Any], logs_dir: Path | str = "bench/results/ddp_gpu_logs") -> str:
    m, p = result["machine"], result["profile"]
    smoke = m["profile"] != "gpu"
    title = "DDP benchmark — CPU smoke run (gloo; checks the script, not a measurement)" if smoke else \
        f"DDP benchmark — {m.get('gpus')}× {m.get('device_name')}"
    lines = [f"# {title}", "",
             f"Measured {result['date']} on `{m['hostname']}`: {m['device_name']}, {m['gpus']} GPU(s), "
             f"{m['cpus']} CPUs; torch {m['torch']}, CUDA {m['cuda']}, NCCL {m.get('nccl')}, Python {m['python']}. "
             f"Environment: {', '.join(f'{k}={v}' for k, v in result['nccl_env'].items())}.", "",
             f"Command: `{result['command']}` ({result['total_s']:.0f} s in all; every run's log, with the exact "
             f"command it ran, goes to `{logs_dir}/`: per-run logs are not kept in git, rerun to get them).", "",
             f"Engine runs: `{p['model']}`, {p['precision']}, channels_last, synthetic GPU-resident "
             f"{p['image_size']}×{p['image_size']} images, {p['steps']} steps logged every {p['log_every']}; the "
             f"first {p['warmup_steps']} steps are warm-up; throughput = median over the remaining windows.", ""]
    if "scaling" in result:
        lines += ["## (a) Scaling through the engine (`torchrun -m coursekit.train`)", "",
                  "Weak scaling keeps the batch per GPU; strong scaling keeps the global batch "
                  f"({p['batch_per_gpu']}). Efficiency = speed-up / GPUs, against 1 GPU.", "",
                  *scaling_table(result["scaling"], result["targets"]), ""]
    if "busbw" in result:
        lines += ["## (b) NCCL all-reduce bus bandwidth", "",
                  "busbw = algbw × 2(n−1)/n (as nccl-tests), algbw = bytes / time; float32 tensors; "
                  f"{p['busbw_iters']} timed all-reduces per size after a warm-up.", "",
                  *busbw_table(result["busbw"]), ""]
    if "binding" in result:
        lines += ["## (c) GPU binding: node vs task, and (e) what NCCL_DEBUG=INFO says", "",
                  "Both launched one process per GPU like `srun` (not torchrun). \"task\" here is "
                  "CUDA_VISIBLE_DEVICES only; a Slurm task cgroup that hides the other GPUs' device files can cost "
                  "NCCL its peer-to-peer path, which this machine cannot show.", "",
                  *binding_section(result["binding"], p["model"]), ""]
    if "buckets" in result:
        lines += ["## (d) Gradient buckets and no_sync", "",
                  "`--bucket-cap-mb` sets DDP's bucket size (ResNet-50: about 98 MiB of fp32 gradients). With "
                  f"`--accumulation-steps {result['buckets']['accumulation_steps']}` the engine skips the all-reduce "
                  "on all but the last micro-batch (`no_sync`); `--sync-every-micro-batch` all-reduces after each.",
                  "", *buckets_section(result["buckets"]), ""]
    if result.get("script"):
        lines += ["## Lab 06's participant script beside the engine", "",
                  "`lab06_data_parallel/train_ddp.py` (its solution, plain PyTorch DDP, a small CNN on 12×12 images: launch and "
                  "synchronisation dominate, not compute) through torchrun, images/s of its last epoch:", "",
                  "| processes | options | images/s | speed-up | val_acc |", "|---|---|---|---|---|",
                  *[f"| {r['world_size']} | `{' '.join(r['options'])}` | {_num(r.get('img_s'))} | "
                    f"{_num(r.get('speedup'), '.2f')} | {_num(r.get('val_acc'), '.3f')} |" for r in result["script"]],
                  ""]
    failed = [r for r in all_runs(result) if not r["ok"]]
    if failed:
        lines += ["## Failed runs", "", *[f"- {r['name']}: exit codes {r['exit_codes']} (log `{r['log']}`)"
                                          for r in failed], ""]
    return "\n".join(lines)


def write_report(result: dict[str, Any], path: Path, logs_dir: Path | str = "bench/results/ddp_gpu_logs") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result, logs_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, nargs="+", default=[BENCH / "results" / "ddp_gpu.json"],
                        help="one or more result files (one section each, in this order)")
    parser.add_argument("--out", type=Path, default=BENCH / "REPORT-ddp.md")
    args = parser.parse_args(argv)
    sections = [render(read_json(path, "ddp_gpu.py record"), f"bench/results/{path.stem}_logs") for path in args.json]
    args.out.write_text("\n\n".join(sections))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
