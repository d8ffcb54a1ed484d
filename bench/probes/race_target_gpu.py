"""Which target should lab 09's race ask for on Fashion-MNIST? The baseline's and the tuned entry's curves, seeds.

Lab 09's gpu race asks for 85 % on Fashion-MNIST, reached in about one epoch: too soon for a schedule or an
epoch budget to matter. This probe runs lab 09's gpu settings as the lab builds them (``settings("gpu")``:
the baseline and ``baseline.replace(**tuned)``, Fashion-MNIST where CIFAR-10 is not staged) with the target
out of reach (``--target-acc 1.0``: the engine's clock and its evaluation every ``eval_every`` steps on the
stopping half of the validation set, as in the race, but no stop), 3 seeds of each, each run its own engine
process on one GPU (``CUDA_VISIBLE_DEVICES``), as many at once as there are GPUs. From each run's
``metrics.jsonl`` it keeps the curve (epoch, step, seconds on the engine's clock, wall seconds, val_acc and the
held-out half's accuracy) at every evaluation, and for each candidate target from 85 % to 94 % (0.5 % steps):
per recipe the time and epoch at which each seed first reaches it (mean ± std), the tuned entry's margin in
standard errors of the ratio of the mean times (the notebook's claim: ``claims.FASTER_SE``), whether the held-out half would
mark it as evaluation luck (``verify.luck_mark``) and the notebook's projected wall time (3 baseline seeds and 3
tuned seeds one at a time, the rival's one epoch, the other cells).

Runs are capped to fit the budget (``--budget-s``, 320 s; ``plan``): on 4 GPUs each baseline seed has a GPU of its
own for the whole budget and the tuned entry's seeds take turns on the fourth (about 95 s each: the tuned entry is
the faster, its curve is needed up to the baseline's times, not beyond); with fewer GPUs the runs go in waves. A
capped run keeps its curve up to the cap (the 15-epoch cosine schedule is the lab's either way), and a target it
has not reached by then is "not seen" rather than "missed". A baseline seed that needs more than about 90 s of
wall time would not fit the notebook's 7 minutes anyway (3 seeds of each recipe, one at a time).

The held-out half: by default each run is the engine's ``main`` in a process of its own with one addition, an
evaluation of the held-out half (``confirm_fraction``) after each stopping evaluation, off the clock, the random
state put back after it (``--plain-engine``: ``python -m coursekit.train`` as is, no held-out curve)::

    COURSEKIT_DATA_DIR=DIR python bench/probes/race_target_gpu.py --out $OUT/race_target.json   # 4 GPUs, <= 6 min
    python bench/probes/race_target_gpu.py --set num_samples=30000 --out ...  # a variant of the lab's baseline
    python bench/probes/race_target_gpu.py --cpu-smoke --out /tmp/race_target_smoke.json        # the cpu profile

``--cpu-smoke`` checks the code path with the lab's cpu settings (a small MLP on 2,000 Fashion-MNIST images, or
the generated stand-in) cut to 2 seeds and 4 epochs (``--seeds 3 --set epochs=10``: the lab's own), 2 at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHILD_FLAG = "--engine-child"  # argv[1] of a run: the engine's main with the held-out evaluations
UNREACHABLE = 1.0  # the highest target the engine accepts: never reached on Fashion-MNIST's 5,000 stopping images
GPU_BUDGET_S = 320.0  # runs are stopped by then (+ KILL_GRACE_S): 6 minutes on 4 GPUs, start and analysis included
SMOKE_BUDGET_S = 150.0
KILL_GRACE_S = 10.0  # a capped run: SIGINT (the engine exits on KeyboardInterrupt), SIGKILL after this
GPU_TARGETS = [round(0.85 + 0.005 * i, 3) for i in range(19)]  # 0.850 ... 0.940
SMOKE_SEEDS, SMOKE_EPOCHS = 2, 4  # --cpu-smoke: the code path in about a minute on 2 shared cores (flags change them)
SMOKE_TARGETS = [round(0.60 + 0.02 * i, 2) for i in range(11)]  # the cpu race's MLP: 0.60 ... 0.80
MIN_EPOCHS, RELAXED_MIN_EPOCHS = 5.0, 4.0
NOTEBOOK_BUDGET_S = 7 * 60
# the notebook besides its baseline, entry and rival cells: 323.9 s - 195.1 - 104.7 - 16.6 in its last gpu record
# (bench/results/gpu_notebooks_09.json); and per job, what the local site adds to the engine process's own wall time
OTHER_CELLS_S = 8.0
JOB_OVERHEAD_S = 2.0


# ---------------------------------------------------------------------------------------------- the child process
def child_main(argv: list[str]) -> int:
    """The engine's ``main`` with one addition: after each stopping evaluation (target not reached), the held-out
    half of the validation set is evaluated too, off the clock, the random state put back (the training goes on
    as without it), and written as an ``event`` record ``held_out``."""
    import torch

    from coursekit.train import engine
    from coursekit.train.target import TargetRun

    original = TargetRun.validate

    def validate(self: Any, trainer: Any) -> Any:
        before = len(self.evaluations)
        result = original(self, trainer)
        loader = getattr(trainer.data, "confirm_loader", None)
        if len(self.evaluations) == before or self.reached_at is not None or loader is None:
            return result
        self.pause()
        started = time.perf_counter()
        cpu_state = torch.get_rng_state()
        cuda_state = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        _, acc = trainer.evaluate(loader)
        torch.set_rng_state(cpu_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state, self.device)
        trainer.writer.write("event", event="held_out", step=self.evaluations[-1]["step"], confirm_acc=acc,
                             confirm_samples=_size(loader), val_samples=_size(trainer.data.val_loader),
                             steps_per_epoch=self.steps_per_epoch, eval_s=time.perf_counter() - started)
        self.start()
        return result

    TargetRun.validate = validate
    return engine.main(argv)


def _size(loader: Any) -> int | None:
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if dataset is not None and hasattr(dataset, "__len__") else None


# ---------------------------------------------------------------------------------------------- the runs
def lab_configs(profile: str, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Lab 09's settings in ``profile`` as the notebook gets them, the baseline changed by ``overrides``."""
    from coursekit.labs import lab_settings

    s = lab_settings("09", profile)
    baseline = s.baseline.replace(**overrides) if overrides else s.baseline
    return s, {"baseline": baseline, "tuned": baseline.replace(**s.tuned)}


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs typed as TrainConfig's fields (``none`` for None)."""
    from coursekit.train.config import TrainConfig, _base_type

    types = {f.name: _base_type(f.type) for f in dataclasses.fields(TrainConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in types:
            raise SystemExit(f"--set {item}: TrainConfig has no field {key!r}")
        kind = types[key]
        out[key] = None if value.lower() == "none" else (
            value.lower() in ("1", "true", "yes") if kind is bool else kind(value))
    return out


def command(args: list[str], out: Path, plain: bool) -> list[str]:
    from race_gpu import engine_command  # the race bench's: python -m coursekit.train ARGS --out OUT

    if plain:
        return engine_command(args, out)
    return [sys.executable, str(Path(__file__).resolve()), CHILD_FLAG, *args, "--out", str(out)]


def plan(jobs: list[dict[str, Any]], slots: list[str | None], budget_s: float, run_cap_s: float | None) -> str:
    """Give each job its ``lane`` (the slots it may run on) and ``cap_s``. With a slot for every baseline seed and
    at least one more, each baseline seed has a slot of its own for the whole budget and the tuned entry's seeds
    take turns on the others (the tuned entry is the faster: its curve is needed up to the baseline's times, not
    beyond); else every run takes the next free slot, the budget shared over the waves. Returns the plan in words."""
    base = [j for j in jobs if j["recipe"] == "baseline"]
    tuned = [j for j in jobs if j["recipe"] != "baseline"]
    if len(slots) > len(base) and tuned:  # lanes are slot indices (on a CPU every slot is None)
        rest = list(range(len(base), len(slots)))
        turns = math.ceil(len(tuned) / len(rest))
        for index, job in enumerate(base):
            job.update(lane=[index], cap_s=run_cap_s or budget_s - 5)
        for job in tuned:
            job.update(lane=list(rest), cap_s=run_cap_s or (budget_s - 5) / turns - KILL_GRACE_S)
        return (f"each baseline seed on a slot of its own (cap {base[0]['cap_s']:.0f} s), the tuned seeds in "
                f"{turns} turn(s) on {len(rest)} slot(s) (cap {tuned[0]['cap_s']:.0f} s)")
    waves = math.ceil(len(jobs) / len(slots))
    for job in jobs:
        job.update(lane=list(range(len(slots))), cap_s=run_cap_s or (budget_s - 5) / waves - KILL_GRACE_S)
    return f"{waves} wave(s) on {len(slots)} slot(s), cap {jobs[0]['cap_s']:.0f} s a run"


def run_all(jobs: list[dict[str, Any]], slots: list[str | None], budget_s: float, plain: bool, work: Path,
            cpu: bool) -> None:
    """Run ``jobs`` (dicts with ``config``, ``lane`` and ``cap_s``: ``plan``), one per slot (a GPU id; None on a
    CPU) at once, each on a free slot of its lane, capped at its ``cap_s`` and none past ``budget_s`` from now
    (a run with less than half its cap left is skipped); fills in each job's process record."""
    started = time.monotonic()
    pending, running, free = list(jobs), [], list(range(len(slots)))  # slot indices: on a CPU they are all None
    while pending or running:
        now = time.monotonic()
        left = budget_s - (now - started)
        for job in list(pending):
            index = next((i for i in free if i in job["lane"]), None)
            if index is None or left < 0.5 * job["cap_s"]:
                continue
            pending.remove(job)
            free.remove(index)
            slot = slots[index]
            env = dict(os.environ)
            if cpu:
                env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
            else:
                env["CUDA_VISIBLE_DEVICES"] = str(slot)
            out = work / job["name"]
            argv = command(job["config"].replace(target_acc=UNREACHABLE).to_args(), out, plain)
            log = open(work / f"{job['name']}.log", "w", encoding="utf-8")
            job.update(out=out, slot=slot, _index=index, argv=argv, cap_s=min(job["cap_s"], left),
                       launched_unix=time.time(), launched_s=now - started, _log=log)
            job["_proc"] = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
            running.append(job)
            print(f"  start {job['name']} on {'cpu ' + str(index) if cpu else 'GPU ' + str(slot)} at "
                  f"{now - started:.0f} s (cap {job['cap_s']:.0f} s)", flush=True)
        time.sleep(0.5)
        for job in list(running):
            proc, age = job["_proc"], time.monotonic() - started - job["launched_s"]
            if proc.poll() is None and age > job["cap_s"]:  # SIGINT first (the engine ends on KeyboardInterrupt)
                if "_signalled" not in job:
                    job["_signalled"], job["capped"] = time.monotonic(), True
                    signal_group(proc, signal.SIGINT)
                elif time.monotonic() - job["_signalled"] > KILL_GRACE_S:
                    signal_group(proc, signal.SIGKILL)
            if proc.poll() is not None:
                job.update(exit_code=proc.returncode, wall_s=time.monotonic() - started - job["launched_s"])
                job.setdefault("capped", False)
                job.pop("_log").close()
                job.pop("_proc")
                job.pop("_signalled", None)
                running.remove(job)
                free.append(job.pop("_index"))
                print(f"  end   {job['name']}: exit {job['exit_code']}, {job['wall_s']:.0f} s"
                      + (" (capped)" if job["capped"] else ""), flush=True)
        left = budget_s - (time.monotonic() - started)
        if pending and all(left < 0.5 * job["cap_s"] for job in pending) and not running:
            for job in pending:
                job.update(skipped=True, capped=False, exit_code=None, wall_s=0.0)
                print(f"  skip  {job['name']}: no time left", flush=True)
            pending.clear()


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    """``signum`` to the run's process group (the engine and its loader workers)."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------------- the curves
def curve_of(job: dict[str, Any]) -> dict[str, Any]:
    """The run's evaluations (epoch, step, engine clock, wall, val_acc, held-out acc) from its metrics.jsonl."""
    from coursekit.metrics import of_kind, read_metrics

    records = read_metrics(job["out"]) if job.get("out") else []
    events = of_kind(records, "event")
    held = {e["step"]: e for e in events if e.get("event") == "held_out"}
    steps_per_epoch = next((e["steps_per_epoch"] for e in held.values()), None)
    if steps_per_epoch is None:  # the plain engine: from the step records, once epoch 2 has begun
        step_records = of_kind(records, "step")
        if any(r.get("epoch", 1) >= 2 for r in step_records):
            steps_per_epoch = max(r["step"] for r in step_records if r.get("epoch") == 1)
    held_out_s = 0.0  # the held-out evaluations' wall time so far: not part of a notebook's run
    points = []
    for e in events:
        if e.get("event") != "evaluation":
            continue
        extra = held.get(e["step"], {})
        points.append({"epoch": round(e["step"] / steps_per_epoch, 4) if steps_per_epoch else None,
                       "step": e["step"], "clock_s": round(e["train_time_s"], 3),
                       "wall_s": round(e["time"] - job["launched_unix"] - held_out_s, 2),
                       "val_acc": e["val_acc"], "held_out_acc": extra.get("confirm_acc")})
        held_out_s += extra.get("eval_s", 0.0)
    epochs = [{"epoch": r["epoch"], "step": r.get("step"), "val_acc": r.get("val_acc"),
               "wall_s": round(r["time"] - job["launched_unix"] - sum(
                   e.get("eval_s", 0.0) for e in held.values() if e["step"] <= (r.get("step") or 0)), 2)}
              for r in of_kind(records, "epoch")]
    sample = next(iter(held.values()), {})
    summary = of_kind(records, "summary")
    return {"name": job["name"], "recipe": job["recipe"], "seed": job["seed"], "slot": job.get("slot"),
            "command": " ".join(job.get("argv", [])[1:]), "exit_code": job.get("exit_code"),
            "capped": job.get("capped", False), "skipped": job.get("skipped", False),
            "launched_s": round(job.get("launched_s", 0.0), 1), "wall_s": round(job.get("wall_s", 0.0), 1),
            "cap_s": round(job.get("cap_s", 0.0), 1),
            "steps_per_epoch": steps_per_epoch, "val_samples": sample.get("val_samples"),
            "confirm_samples": sample.get("confirm_samples"), "held_out_eval_s": round(held_out_s, 2),
            "status": summary[-1].get("status") if summary else None,
            "observed_epochs": points[-1]["epoch"] if points else None, "epochs": epochs, "curve": points}


def first_reach(run: dict[str, Any], target: float) -> dict[str, Any] | None:
    return next((p for p in run["curve"] if p["val_acc"] is not None and p["val_acc"] >= target), None)


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    from coursekit.metrics import mean_std as ms

    return ms(values, empty=None)


def candidates(runs: list[dict[str, Any]], targets: list[float], rival_s: float | None) -> list[dict[str, Any]]:
    """Per target and recipe: each seed's first reach, mean ± std of time and epoch, the margin, the luck mark,
    the notebook's projected wall time."""
    from coursekit.labs.lab09_race.claims import FASTER_SE, speedup_margin
    from coursekit.labs.lab09_race.verify import luck_mark

    rows = []
    for target in targets:
        row: dict[str, Any] = {"target": target}
        for recipe in ("baseline", "tuned"):
            seeds = [r for r in runs if r["recipe"] == recipe]
            hits = [(r, first_reach(r, target)) for r in seeds]
            reached = [(r, p) for r, p in hits if p is not None]
            times, epochs = [p["clock_s"] for _, p in reached], [p["epoch"] for _, p in reached if p["epoch"]]
            t_mean, t_std = mean_std(times)
            e_mean, e_std = mean_std(epochs)
            luck_runs = [{"target_reached": True, "confirm_acc": p["held_out_acc"], "confirm_samples":
                          r["confirm_samples"], "val_samples": r["val_samples"]} for r, p in reached]
            # one evaluation more at the stop (the lab's confirmation), the job's overhead
            walls = [p["wall_s"] + JOB_OVERHEAD_S + r["held_out_eval_s"] / max(len(r["curve"]), 1) for r, p in reached]
            row[recipe] = {
                "seeds": len(seeds), "reached": len(reached), "all_reached": bool(seeds) and len(reached) == len(seeds),
                "per_seed": [{"seed": r["seed"], **({"clock_s": p["clock_s"], "epoch": p["epoch"], "step": p["step"],
                                                      "wall_s": p["wall_s"], "val_acc": p["val_acc"],
                                                      "held_out_acc": p["held_out_acc"]} if p else
                                                     {"clock_s": None, "epoch": None, "observed_epochs":
                                                      r["observed_epochs"], "not_seen_within_cap": r["capped"]})}
                             for r, p in hits],
                "time_s_mean": t_mean, "time_s_std": t_std, "epoch_mean": e_mean, "epoch_std": e_std,
                "earliest_epoch": min(epochs) if epochs else None,
                "held_out_mean": (sum(p["held_out_acc"] for _, p in reached) / len(reached)
                                  if reached and all(p["held_out_acc"] is not None for _, p in reached) else None),
                "luck_mark": luck_mark(luck_runs, target) if reached and all(
                    x["confirm_acc"] is not None and x["confirm_samples"] for x in luck_runs) else None,
                "notebook_runs_s": sum(walls) if len(reached) == len(seeds) and seeds else None}
        b, t = row["baseline"], row["tuned"]
        if b["all_reached"] and t["all_reached"]:
            log_gain, se = speedup_margin(b["time_s_mean"], b["time_s_std"], b["reached"], t["time_s_mean"],
                                          t["time_s_std"], t["reached"])
            row["margin_se"] = log_gain / se if se > 0 else None  # one seed each: no spread to measure it by
            row["speedup"] = math.exp(log_gain)
            row["tuned_counts_faster"] = log_gain > FASTER_SE * se
            row["notebook_s"] = (b["notebook_runs_s"] + t["notebook_runs_s"] + (rival_s or 0.0) + OTHER_CELLS_S)
        else:
            row.update(margin_se=None, speedup=None, tuned_counts_faster=False, notebook_s=None)
        rows.append(row)
    return rows


def rival_wall_s(runs: list[dict[str, Any]]) -> float | None:
    """The rival's run (the baseline for one epoch): the baseline seeds' mean wall time at their first epoch's end."""
    walls = [r["epochs"][0]["wall_s"] for r in runs if r["recipe"] == "baseline" and r["epochs"]]
    return sum(walls) / len(walls) + JOB_OVERHEAD_S if walls else None


def selected(rows: list[dict[str, Any]], min_epochs: float) -> list[dict[str, Any]]:
    from coursekit.labs.lab09_race.claims import FASTER_SE

    return [r for r in rows if r["margin_se"] is not None and r["baseline"]["earliest_epoch"] is not None
            and r["baseline"]["earliest_epoch"] >= min_epochs and r["margin_se"] >= FASTER_SE]


def line(row: dict[str, Any]) -> str:
    b, t = row["baseline"], row["tuned"]

    def part(x: dict[str, Any]) -> str:
        unseen = sum(1 for p in x["per_seed"] if p.get("not_seen_within_cap"))
        capped = f" ({unseen} capped before it)" if unseen else ""
        if not x["reached"]:
            return "not reached" + capped
        return (f"{x['reached']}/{x['seeds']}{capped} at {x['time_s_mean']:.1f} ± {x['time_s_std']:.1f} s, epoch "
                f"{x['epoch_mean'] or 0:.2f} ± {x['epoch_std'] or 0:.2f} (earliest {x['earliest_epoch'] or 0:.2f})"
                + (f", held-out {x['held_out_mean']:.3f}" if x["held_out_mean"] is not None else "")
                + (" LUCK MARK" if x["luck_mark"] else ""))

    margin = (f"{row['margin_se']:.1f} SE" if row["margin_se"] is not None else "-") + (
        f", x{row['speedup']:.2f}" if row.get("speedup") else "")
    cost = f"{row['notebook_s']:.0f} s" if row["notebook_s"] is not None else "-"
    return f"{row['target']:.3f}: baseline {part(b)}; tuned {part(t)}; margin {margin}; notebook ~{cost}"


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    parser.add_argument("--cpu-smoke", action="store_true", help="the cpu profile's settings, on this CPU")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"per recipe (default: the lab's, 3; --cpu-smoke {SMOKE_SEEDS})")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"every run ends by then (default {GPU_BUDGET_S:.0f}; --cpu-smoke {SMOKE_BUDGET_S:.0f})")
    parser.add_argument("--run-cap-s", type=float, default=None,
                        help="every run's wall-time cap (default: from the budget and the plan, see plan())")
    parser.add_argument("--slots", type=int, default=None,
                        help="runs at once (default: the visible GPUs; --cpu-smoke: the seeds + 1, as on 4 GPUs)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the lab's baseline (the tuned entry inherits it), e.g. num_samples=30000")
    parser.add_argument("--plain-engine", action="store_true",
                        help="python -m coursekit.train as is (no held-out curve)")
    parser.add_argument("--allow-other-data", action="store_true",
                        help="run even where the gpu settings are not on Fashion-MNIST")
    args = parser.parse_args(argv)
    from robust import check_writable, cuda_devices, save_text

    check_writable(args.out)
    profile = "cpu" if args.cpu_smoke else "gpu"
    overrides = parse_overrides(args.overrides)
    if args.cpu_smoke:
        overrides = {"epochs": SMOKE_EPOCHS, **overrides}
    s, configs = lab_configs(profile, overrides)
    dataset = configs["baseline"].dataset
    seeds = args.seeds or (SMOKE_SEEDS if args.cpu_smoke else s.seeds)
    if not args.cpu_smoke:
        gpus = cuda_devices()
        if gpus == 0:
            print("race_target_gpu.py: no CUDA GPU here: nothing to measure (--cpu-smoke checks the script)",
                  file=sys.stderr)
            return 2
        if dataset != "fashion-mnist" and not args.allow_other_data:
            print(f"race_target_gpu.py: lab 09's gpu settings train on {dataset!r} here, not Fashion-MNIST "
                  "(is COURSEKIT_DATA_DIR the folder of its four files? is CIFAR-10 staged there?); "
                  "--allow-other-data runs anyway", file=sys.stderr)
            return 2
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [g.strip() for g in visible.split(",") if g.strip()] if visible else [str(i) for i in range(gpus)]
        slots: list[str | None] = list(ids[: args.slots or len(ids)])
    else:
        slots = [None] * (args.slots or seeds + 1)
    budget = args.budget_s or (SMOKE_BUDGET_S if args.cpu_smoke else GPU_BUDGET_S)
    jobs = [{"name": f"{recipe}-{seed}", "recipe": recipe, "seed": seed, "config": configs[recipe].replace(seed=seed)}
            for seed in range(seeds) for recipe in ("baseline", "tuned")]  # b0 t0 b1 t1 ...: both in each wave
    how = plan(jobs, slots, budget, args.run_cap_s)
    print(f"lab 09 ({profile}): {len(jobs)} runs, {how}, budget {budget:.0f} s; data {dataset}, "
          f"{configs['baseline'].num_samples} training images", flush=True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="coursekit-race-target-") as work:
        run_all(jobs, slots, budget, args.plain_engine, Path(work), args.cpu_smoke)
        runs = [curve_of(job) for job in jobs]
        logs = {job["name"]: (Path(work) / f"{job['name']}.log").read_text(errors="replace")[-1500:]
                for job in jobs if (Path(work) / f"{job['name']}.log").exists()}
    targets = SMOKE_TARGETS if args.cpu_smoke else GPU_TARGETS
    rival = rival_wall_s(runs)
    rows = candidates(runs, targets, rival)
    import torch

    result = {
        "probe": "bench/probes/race_target_gpu.py", "argv": sys.argv[1:], "profile": profile,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "wall_s": round(time.time() - started, 1),
        "machine": {"torch": torch.__version__, "gpus": len(slots) if not args.cpu_smoke else 0,
                    "gpu_name": torch.cuda.get_device_name(0) if not args.cpu_smoke else None},
        "dataset_notice": s.get("dataset_notice"), "lab_target": s.baseline.target_acc,
        "overrides": overrides, "held_out_curve": not args.plain_engine,
        "configs": {k: {"args": c.to_args(), "epochs": c.epochs, "batch_size": c.batch_size,
                        "num_samples": c.num_samples} for k, c in configs.items()},
        "target_disabled_as": UNREACHABLE, "seeds": seeds, "slots": len(slots), "plan": how,
        "budget_s": budget,
        "notebook_model": {"baseline_seeds": seeds, "tuned_seeds": seeds, "rival_s": rival,
                           "other_cells_s": OTHER_CELLS_S, "job_overhead_s": JOB_OVERHEAD_S,
                           "budget_s": NOTEBOOK_BUDGET_S,
                           "how": "each seed's wall time from its launch to its first evaluation at the target "
                                  "(held-out evaluations taken out) + one evaluation + the job overhead, the "
                                  "rival (the baseline's first epoch), the other cells"},
        "runs": runs, "candidates": rows,
        "selected": {f">= {MIN_EPOCHS:g} epochs": [r["target"] for r in selected(rows, MIN_EPOCHS)],
                     f">= {RELAXED_MIN_EPOCHS:g} epochs": [r["target"] for r in selected(rows, RELAXED_MIN_EPOCHS)]},
        "logs_tail": {k: v for k, v in logs.items() if any(j["name"] == k and j.get("exit_code") not in (0, None)
                                                           and not j.get("capped") for j in jobs)}}
    written = save_text(args.out, json.dumps(result, indent=1, default=str))
    print(f"wrote {written} ({result['wall_s']:.0f} s)")
    for run in runs:
        last = run["curve"][-1] if run["curve"] else None
        print(f"{run['name']}: exit {run['exit_code']}{' capped' if run['capped'] else ''}, {run['wall_s']:.0f} s, "
              f"{len(run['curve'])} evaluations, to epoch {run['observed_epochs']}, last val_acc "
              f"{last['val_acc'] if last else None}, best {max((p['val_acc'] for p in run['curve']), default=None)}")
    print("\nevery candidate:")
    for row in rows:
        print("  " + line(row))
    for label, min_epochs in ((f">= {MIN_EPOCHS:g}", MIN_EPOCHS), (f">= {RELAXED_MIN_EPOCHS:g}", RELAXED_MIN_EPOCHS)):
        chosen = selected(rows, min_epochs)
        print(f"\ntargets every seed reaches, the baseline's earliest epoch {label}, margin >= 3 SE "
              f"(notebook budget {NOTEBOOK_BUDGET_S} s):" + ("" if chosen else " none"))
        for row in chosen:
            over = row["notebook_s"] is not None and row["notebook_s"] > NOTEBOOK_BUDGET_S
            print("  " + line(row) + (" OVER THE NOTEBOOK BUDGET" if over else ""))
    return 0 if all(r["curve"] for r in runs) and written == args.out else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == CHILD_FLAG:
        raise SystemExit(child_main(sys.argv[2:]))
    raise SystemExit(main())
