"""Lab 09's race on one GPU: the baseline and one tuned entry, each ``--seeds`` runs of the engine, verified.

Each run is its own ``python -m coursekit.train`` process (as a job would be), with lab 09's gpu settings
(``settings`` in coursekit/labs/lab09_race/): ResNet-18 to 85 % validation accuracy, evaluated every 50 steps,
timed by the engine (untimed warm-up, evaluations off the clock). Where CIFAR-10 is not staged (the GPU
machine has no internet) the settings switch to the generated stand-in of CIFAR-10's shape, and the report
says so. The runs are posted to a leaderboard file and verified as lab 09 does (rules, validation-set
hash, code hash, every seed at the target)::

    python bench/race_gpu.py --out bench/results/race_gpu.json          # one H100, <= 5 min
    python bench/race_gpu.py --gpus 4 --out bench/results/race_gpu4.json # + the tuned entry on 4 GPUs (DDP)
    python bench/race_gpu.py --gpus 2 --multi-gpu-only --out ...         # that entry alone
    python bench/race_gpu.py --report bench/results/race_gpu.json        # rewrite bench/REPORT-race.md
    python bench/race_gpu.py --cpu-smoke --out /tmp/race_smoke.json      # anywhere: the cpu profile's race
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

from robust import check_writable, cuda_devices, read_json, save_text  # noqa: E402

REPORT = ROOT / "bench" / "REPORT-race.md"
RUN_TIMEOUT_S = 240
DEFAULT_TIME_LIMIT_S = 290  # the whole benchmark on one H100; runs that would start later are skipped
DEFAULT_SEEDS = 3
MULTI_GPU_LR_SCALING = "linear"  # --gpus N: the tuned entry's per-GPU batch on N GPUs, LR scaled from its batch


def engine_command(args: list[str], out: Path, processes: int = 1) -> list[str]:
    """``python -m coursekit.train ARGS --out OUT``, under torchrun (DDP) with ``processes`` > 1."""
    launcher = [sys.executable, "-m", "coursekit.train"] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
        "-m", "coursekit.train"]
    return [*launcher, *args, "--out", str(out)]


def machine() -> dict[str, Any]:
    import torch

    return {"host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
            "gpu_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "date": time.strftime("%Y-%m-%d")}


def run_engine(args: list[str], out: Path, processes: int = 1) -> dict[str, Any]:
    """One engine run (``processes`` > 1: DDP under torchrun); its summary record (status "failed" with the
    error's tail when it has none)."""
    from coursekit.metrics import read_metrics, summary

    started = time.perf_counter()
    try:
        done = subprocess.run(engine_command(args, out, processes), cwd=ROOT,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as expired:  # this run is recorded as failed; the others go on
        tail = expired.stderr or b""
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"status": "failed", "error": f"timed out after {RUN_TIMEOUT_S} s; stderr: {tail[-1500:]}",
                "exit_code": None}
    final = summary(read_metrics(out)) if (out / "metrics.jsonl").exists() else None
    if not final:
        return {"status": "failed", "error": (done.stderr or done.stdout)[-2000:], "exit_code": done.returncode}
    return {**final, "process_wall_s": time.perf_counter() - started}


def race_entries(s: Any, gpus: int, multi_gpu_only: bool = False, same_global_batch: bool = False
                 ) -> dict[tuple[str, str], tuple[Any, int]]:
    """(participant, submission) -> (configuration, processes) of ``run_race``, from lab 09's settings ``s``."""
    tuned = s.baseline.replace(**s.tuned)
    entries_in = {}
    if gpus > 1:
        per_gpu = tuned.batch_size // gpus if same_global_batch else tuned.batch_size
        if per_gpu < 1:
            raise ValueError(f"same_global_batch: the tuned batch {tuned.batch_size} cannot be split over {gpus} GPUs")
        name = f"tuned-{gpus}gpu" + ("-same-batch" if same_global_batch else "")
        entries_in[("bench", name)] = (
            tuned.replace(batch_size=per_gpu, lr_scaling=MULTI_GPU_LR_SCALING, base_batch=tuned.batch_size), gpus)
    elif multi_gpu_only:
        raise ValueError("multi_gpu_only needs gpus > 1 (--gpus N)")
    if not multi_gpu_only:
        entries_in.update({("baseline", "baseline"): (s.baseline, 1), ("bench", "tuned"): (tuned, 1)})
    return entries_in


def run_race(profile: str, seeds: int, time_limit_s: float, work: Path, gpus: int = 1,
             multi_gpu_only: bool = False, same_global_batch: bool = False) -> dict[str, Any]:
    """The baseline and the tuned entry of lab 09 (``profile`` settings), ``seeds`` runs each, verified; with
    ``gpus`` > 1 also the tuned entry on that many GPUs (DDP; on the cpu profile, gloo processes), run first
    (the one-GPU entries have a record of their own), or alone with ``multi_gpu_only``. That entry keeps the
    tuned batch on each GPU (a ``gpus`` times larger global batch, the LR scaled linearly), or with
    ``same_global_batch`` splits it over the GPUs (the same global batch and LR as on one GPU)."""
    from coursekit.labs import lab09_race as race
    from coursekit.labs import lab_settings

    os.environ.setdefault("COURSEKIT_COURSE_DIR", str(work))
    s = lab_settings("09", profile)
    rules = race.Rules(f"lab 09 ({profile})", s.baseline, models=s.models, max_parameters=s.max_parameters,
                       max_gpus=max(s.max_gpus, gpus), seeds=seeds)
    board = work / "leaderboard.jsonl"
    started = time.perf_counter()
    entries_in = race_entries(s, gpus, multi_gpu_only, same_global_batch)
    skipped = []
    for (who, name), (config, processes) in entries_in.items():
        rows = []
        for run in rules.submission(config):
            if time.perf_counter() - started > time_limit_s:
                skipped.append(f"{who}/{name} seed {run.seed}")
                continue
            summary = run_engine(run.to_args(), work / f"{who}-{name}-{run.seed}", processes)
            print(f"{who}/{name} seed {run.seed}: {summary.get('status')}, reached {summary.get('target_reached')}, "
                  f"time to target {summary.get('time_to_target_s')}, wall {summary.get('process_wall_s', 0):.1f} s",
                  flush=True)
            rows.append({"job_id": f"{who}-{name}-{run.seed}", "summary": summary if "error" not in summary else {},
                         "error": summary.get("error")})
        race.post_runs(who if who != "baseline" else race.BASELINE, name, rows, board)
        for row in rows:
            if row["error"]:
                print(f"  failed: {row['error'][-500:]}", file=sys.stderr)
    table = race.standings(rules, race.code_hash(), board)
    return {"profile": profile, "machine": machine(), "settings_notice": s.get("dataset_notice"),
            "rules": rules.text(), "gpus": gpus,
            "commands": {f"{w}/{n}": " ".join(engine_command(c.to_args(), Path("OUT"), p)[1:])
                         for (w, n), (c, p) in entries_in.items()},
            "wall_s": time.perf_counter() - started, "skipped": skipped,
            "entries": [{k: v for k, v in row.items()} for row in table]}


def summary_text(result: dict[str, Any]) -> str:
    lines = []
    for e in result["entries"]:
        mean = f"{e['time_to_target_s']:.2f} ± {e['std_s']:.2f} s" if e["time_to_target_s"] is not None else "-"
        lines.append(f"{e['participant']}/{e['submission']}: {e['reached']}/{e['seeds']} seeds at the target, {mean}, "
                     + ("counts" if e["counts"] else "MARKED: " + e["marks"]))
    return "\n".join(lines)


def write_report(results: list[dict[str, Any]]) -> None:
    """bench/REPORT-race.md from result JSON files (one section per file)."""
    out = ["# Lab 09's race on a GPU: the baseline and one tuned entry",
           "",
           "Written by `python bench/race_gpu.py --report ...` from the JSON of `python bench/race_gpu.py --out ...`.",
           "Each run is one `python -m coursekit.train` process with lab 09's settings; the engine times it",
           "(untimed warm-up, evaluations of the full validation set off the clock) and the runs are verified as",
           "in the notebook (rules, validation-set hash, code hash, every seed at the target).", ""]
    reference_tuned = next((e for r in results for e in r["entries"] if e["submission"] == "tuned"), None)
    for result in results:
        m = result["machine"]
        where = f"{m['gpus']} x {m['gpu_name']}" if m.get("gpu_name") else f"CPU ({m.get('host')})"
        out += [f"## {result['profile']} profile — {where}, torch {m.get('torch')}, CUDA {m.get('cuda')}, "
                f"{m.get('date')}", ""]
        if result["profile"] == "cpu":
            out += ["A smoke test of the plumbing (`--cpu-smoke`) on the shared 2-core development machine: runs of "
                    "a few hundredths of a second, whose times are noise (a run stalled by another process shows "
                    "it); the GPU section is the record.", ""]
        if result.get("settings_notice"):
            out += ["**Data: the generated stand-in of CIFAR-10** (CIFAR-10 is not on this machine): "
                    "10 classes, 32 x 32, 50,000 + 10,000 images made by the engine. The times are real; the "
                    "accuracies are not CIFAR-10's.", ""]
        out += ["| entry | seeds at target | time to target (s, mean ± std) | steps to target | hardware | verdict |",
                "| --- | --- | --- | --- | --- | --- |"]
        for e in result["entries"]:
            mean = (f"{e['time_to_target_s']:.2f} ± {e['std_s']:.2f}" if e["time_to_target_s"] is not None else "-")
            steps = f"{e['steps_to_target']:.0f}" if e.get("steps_to_target") is not None else "-"
            out.append(f"| {e['participant']}/{e['submission']} | {e['reached']}/{e['seeds']} | {mean} | {steps} | "
                       f"{e['hardware']} | {'counts' if e['counts'] else 'marked: ' + e['marks']} |")
        base = next((e for e in result["entries"] if e["participant"] == "baseline"), None)
        tuned = next((e for e in result["entries"] if e["submission"] == "tuned"), None)
        if base and tuned and base["time_to_target_s"] and tuned["time_to_target_s"]:
            out += ["", f"Speed-up of the tuned entry: x{base['time_to_target_s'] / tuned['time_to_target_s']:.2f} "
                    f"(baseline {base['time_to_target_s']:.2f} s, tuned {tuned['time_to_target_s']:.2f} s)."]
        one_gpu = tuned or reference_tuned
        for e in result["entries"]:
            if "gpu" in e["submission"] and e["time_to_target_s"] and one_gpu and one_gpu["time_to_target_s"]:
                out += ["", f"{e['submission']} against the tuned entry on one GPU"
                        + ("" if tuned else " (the one-GPU section above)") + f": {e['time_to_target_s']:.2f} against "
                        f"{one_gpu['time_to_target_s']:.2f} s to the target (x{one_gpu['time_to_target_s'] / e['time_to_target_s']:.2f})."]
        out += ["", "Per run (seed: time to target, steps, timed share of the process's wall time):", ""]
        for e in result["entries"]:
            for run in e["runs"]:
                share = (run["train_time_s"] / run["total_time_s"]) if run.get("train_time_s") and run.get("total_time_s") else None
                out.append(f"- {e['participant']}/{e['submission']} seed {run['seed']}: "
                           f"{run.get('time_to_target_s') or 0:.2f} s, {run.get('steps_to_target')} steps, "
                           f"timed {share:.0%} of {run.get('total_time_s') or 0:.1f} s" if share else
                           f"- {e['participant']}/{e['submission']} seed {run['seed']}: did not finish")
        out += ["", "Commands:", ""] + [f"- {k}: `{v}`" for k, v in result["commands"].items()]
        if result.get("skipped"):
            out += ["", f"Skipped (time limit): {', '.join(result['skipped'])}"]
        out += ["", "Rules:", "", "```", result["rules"], "```", ""]
    REPORT.write_text("\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results JSON")
    parser.add_argument("--report", type=Path, nargs="*", help="rewrite bench/REPORT-race.md from these JSON files")
    parser.add_argument("--cpu-smoke", action="store_true", help="the cpu profile's race (seconds, no GPU)")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    parser.add_argument("--time-limit-s", type=float, default=DEFAULT_TIME_LIMIT_S)
    parser.add_argument("--gpus", type=int, default=1,
                        help="also the tuned entry on this many GPUs (DDP; --cpu-smoke: gloo processes)")
    parser.add_argument("--multi-gpu-only", action="store_true",
                        help="with --gpus N: only the N-GPU entry (the one-GPU entries have their own record)")
    parser.add_argument("--same-global-batch", action="store_true",
                        help="with --gpus N: the tuned batch split over the N GPUs (default: that batch on each)")
    args = parser.parse_args(argv)
    if args.report:
        write_report([read_json(Path(p), "race record") for p in args.report])
        print(f"wrote {REPORT}")
        return 0
    if not args.out:
        parser.error("give --out FILE.json (or --report FILE.json ...)")
    if not args.cpu_smoke:
        gpus = cuda_devices()
        if gpus == 0:
            print("bench/race_gpu.py: no CUDA GPU here (torch sees none): nothing to measure; run it on a GPU machine, "
                  "or --cpu-smoke to check the script on a CPU", file=sys.stderr)
            return 2
        if args.gpus > gpus:
            if args.multi_gpu_only and gpus < 2:
                print(f"bench/race_gpu.py: --gpus {args.gpus} --multi-gpu-only asked, this machine shows {gpus} GPU: "
                      "nothing to measure; run it on a machine with several GPUs", file=sys.stderr)
                return 2
            print(f"bench/race_gpu.py: --gpus {args.gpus} asked, this machine shows {gpus} GPU(s): the multi-GPU entry "
                  + (f"runs on {gpus} GPUs" if gpus > 1 else "is not run") + f"; run it on a machine with {args.gpus} "
                  "GPUs for that entry", file=sys.stderr)
            args.gpus = gpus
    check_writable(args.out)
    with tempfile.TemporaryDirectory(prefix="coursekit-race-") as work:
        result = run_race("cpu" if args.cpu_smoke else "gpu", args.seeds, args.time_limit_s, Path(work), args.gpus,
                          args.multi_gpu_only, args.same_global_batch)
    written = save_text(args.out, json.dumps(result, indent=1, default=str))  # first: a print cannot lose it
    print(f"wrote {written}")
    print(summary_text(result))
    return 0 if all(e["counts"] for e in result["entries"]) and written == args.out else 1


if __name__ == "__main__":
    sys.exit(main())
