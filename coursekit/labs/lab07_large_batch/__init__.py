"""Lab 07: large-batch training — every run of the lab is one row of one results table.

Four parts, one engine (``python -m coursekit.train``), one schedule shape for every arm of A and B (linear
warm-up counted in steps, then linear decay to 0: only the peak LR, the warm-up and the batch vary):

- **A. gap and recovery** at equal epochs: the reference batch, 4x it naive and linearly scaled with warm-up,
  16x it naive, square-root (4x) and linearly (16x) scaled with warm-up; at 16x also the same 3-point LR grid
  for SGD, LARS and LAMB (tuned alike, Nado et al. 2021), ghost batch norm (Hoffer et al. 2017) and the
  reference's number of steps (equal steps instead of equal epochs);
- **B. warm-up**: the large batch at a very large LR with and without warm-up, the loss logged every step;
- **C. critical batch** (Shallue et al., McCandlish et al.): steps to a target accuracy on a held-out split
  for batches from small to large, the best of a {1/4, 1/2, 1} x linear LR grid per batch, warm-up in
  steps then a constant LR; fit ``(S/S_min − 1)(E/E_min − 1) = 1``, ``B_crit = E_min / S_min``;
- **D. noise scale**: B_simple in train mode from the micro-batches of the reference run (two-batch
  estimator, separate moving averages; ``coursekit/train/noise.py``), read at C's target.

``plan(s)`` names every run (tags ``part``, ``arm``, ``batch_size``, ``lr``, ``seed``, ``optimizer``) with its
``TrainConfig``; ``submit`` sends them as ``s.jobs`` jobs of ``python -m coursekit.train.sweep`` (one start of
Python and torch for many runs); ``results`` waits (a bar counting runs) and reads the table; the rest computes
from it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from coursekit.labs.kit.claims import ClaimResult, check_claim
from coursekit.labs.kit.experiments import DEFAULT_TIMEOUT_S, Sweep, submit_sweeps, summarize_run, wait_runs
from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, on_cifar10, workshop_budget
from coursekit.metrics import mean_std
from coursekit.train.config import TrainConfig

SCALING_RULES = ("none", "sqrt", "linear")
PARTS = ("A", "B", "C", "D")


def scaled_lr(base_lr: float, base_batch: int, batch: int, rule: str) -> float:
    """The learning rate at ``batch`` from ``base_lr`` at ``base_batch``: ``none`` keeps it, ``sqrt`` multiplies
    it by sqrt(k), ``linear`` by k, with k = batch / base_batch (Goyal et al. 2017; Krizhevsky 2014)."""
    if not base_lr > 0:
        raise ValueError(f"base_lr={base_lr} must be positive")
    if base_batch < 1 or batch < 1:
        raise ValueError(f"base_batch={base_batch} and batch={batch} must be at least 1")
    k = batch / base_batch
    factors = {"none": 1.0, "sqrt": math.sqrt(k), "linear": k}
    if rule not in factors:
        raise ValueError(f"rule={rule!r} is unknown; choose one of {', '.join(SCALING_RULES)}")
    return base_lr * factors[rule]


def steps_per_epoch(train_images: int, batch: int) -> int:
    """Optimiser steps of one epoch (the last, short batch dropped, as the lab's runs do)."""
    if batch < 1 or train_images < batch:
        raise ValueError(f"batch={batch} must be between 1 and the {train_images} training images")
    return train_images // batch


# A's arms fall in four groups: the scaling rules, the LR grid of each optimizer, ghost batch norm, equal steps
SCALING, GRID, GHOST, EQUAL_STEPS = "scaling rules", "optimizer grid", "ghost batch norm", "equal steps"
GROUPS = (SCALING, GRID, GHOST, EQUAL_STEPS)


class Arm(NamedTuple):
    """One arm of part A: its name (unique, ending in ``B=<batch>``), batch, peak LR and warm-up (a share of the
    run's steps); its group; the optimizer; ghost batch norm's virtual batch (None: plain batch norm); the run's
    steps (None: the lab's epochs); ``all_seeds`` False: the first seed only (a grid point, equal steps)."""

    name: str
    batch_size: int
    lr: float
    warmup_share: float
    group: str = SCALING
    optimizer: str = "sgd"
    ghost_batch: int | None = None
    steps: int | None = None
    all_seeds: bool = True

    def __repr__(self) -> str:  # the settings block lists arms by name, not as a dataclass
        return repr(self.name)


@dataclass
class Run:
    """One planned run: its tags (a row's first columns) and its configuration."""

    tags: dict[str, Any]
    config: TrainConfig


def _run(part: str, arm: str, config: TrainConfig) -> Run:
    return Run({"part": part, "arm": arm, "batch_size": config.batch_size, "lr": config.lr, "seed": config.seed,
                "optimizer": config.optimizer}, config)


def _arm_config(base: TrainConfig, arm: Arm, images: int, seed: int) -> TrainConfig:
    """An arm's run: one schedule shape (warm-up for ``arm.warmup_share`` of its steps, then linear decay)."""
    per_epoch = steps_per_epoch(images, arm.batch_size)
    steps = arm.steps or base.epochs * per_epoch
    config = base.replace(batch_size=arm.batch_size, lr=arm.lr, warmup_steps=round(arm.warmup_share * steps),
                          optimizer=arm.optimizer, ghost_batch_size=arm.ghost_batch, seed=seed,
                          nesterov=base.nesterov and arm.optimizer == "sgd")  # LARS: heavy ball, as its paper
    if arm.steps:  # validate once, after the last step
        config = config.replace(steps=arm.steps, val_every_epochs=math.ceil(arm.steps / per_epoch))
    return config


def plan(s: Any, seeds: Sequence[int] | None = None) -> list[Run]:
    """Every run of the lab from its settings ``s`` (``profile.settings("07")``), in the order A, B, C, D;
    ``seeds``: A and B's seeds, the first also C and D's and that of A's first-seed arms (``room.my_seeds``: each
    seat of a room its own); None: ``s.seeds``."""
    base, b0, lr0, images = s.base, s.base_batch, s.base_lr, s.train_images
    seeds = list(s.seeds if seeds is None else seeds)
    if not seeds or not all(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in seeds):
        raise ValueError(f"seeds={seeds!r}: give one or more whole numbers, 0 or more (or None: the lab's seeds)")
    runs: list[Run] = []
    for seed in seeds:
        for arm in s.arms:  # A: one shape, only peak LR, warm-up and batch vary (and the optimizer of the grid)
            if arm.all_seeds or seed == seeds[0]:
                runs.append(_run("A", arm.name, _arm_config(base, arm, images, seed)))
        for lr in s.spike_lrs:  # B: the loss of every step, with and without warm-up
            for warmup in (s.spike_warmup_steps, 0):
                arm = f"lr {lr:g}, " + (f"{warmup} warm-up steps" if warmup else "no warm-up")
                runs.append(_run("B", arm, base.replace(batch_size=s.spike_batch, lr=lr, warmup_steps=warmup,
                                                        seed=seed, log_every=1)))
    critical = base.replace(holdout_samples=s.holdout, schedule="constant", warmup_steps=s.critical_warmup_steps,
                            target_acc=s.target_acc, timing_warmup=0)
    for batch in s.critical_batches:  # C: steps to the target on the held-out split
        epochs = s.critical_epochs.get(batch, s.critical_epochs["default"])
        every = max(s.eval_min_steps, math.ceil(s.eval_every_samples / batch))
        for factor in s.critical_lr_factors:
            lr = factor * scaled_lr(lr0, b0, batch, "linear")
            runs.append(_run("C", f"{factor:g} x linear", critical.replace(
                batch_size=batch, lr=lr, epochs=epochs, eval_every=every, seed=seeds[0])))
    runs.append(_run("D", "noise scale", critical.replace(  # D: C's reference batch, split into micro-batches
        batch_size=b0, lr=lr0, epochs=s.noise_epochs, target_acc=None, eval_every=None,
        accumulation_steps=s.noise_micro_batches, noise_every=s.noise_every, log_every=s.noise_log_every,
        seed=seeds[0])))
    return runs


def submit(runs: Sequence[Run], *, name: str, jobs: int = 1, **job: Any) -> list[Sweep]:
    """The runs as ``jobs`` jobs, each making its share one after the other (``submit_sweeps(one_job=True)``):
    A and B dealt by seed, C and D after them, so that the jobs cost alike."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be at least 1")
    if not runs:
        raise ValueError("runs is empty: plan(s) gives the lab's runs")
    shares: list[list[Run]] = [[] for _ in range(jobs)]
    for index, run in enumerate(runs):
        shares[index % jobs].append(run)
    return [submit_sweeps([[r.config for r in share]], names=[name], one_job=True, **job)[0]
            for share in shares if share]


def results(sweeps: Sequence[Sweep], runs: Sequence[Run], timeout_s: float | None = DEFAULT_TIMEOUT_S
            ) -> ResultsTable:
    """Wait for the jobs (a bar counting runs as they end); one row per run: its tags, then its figures."""
    handles = [handle for sweep in sweeps for handle in sweep.jobs]
    jobs = list({id(h.job): h.job for h in handles}.values())
    wait_runs(jobs, [h.run_dir for h in handles], timeout_s, desc="lab 07")
    by_config = {}
    for sweep in sweeps:
        for config, handle in zip(sweep.configs, sweep.jobs, strict=True):
            by_config[id(config)] = handle
    rows = []
    for run in runs:
        handle = by_config[id(run.config)]
        rows.append({**run.tags, "job_id": handle.job_id, **summarize_run(handle.metrics()), "config": run.config})
    return ResultsTable(rows, title="lab 07: every run")


def _ok(row: dict[str, Any]) -> bool:
    return row.get("status") == "completed"


# ----------------------------------------------------------------------------- A: gap and recovery


def cells(table: ResultsTable, part: str = "A") -> ResultsTable:
    """Mean ± std over seeds of every arm of ``part``: final accuracy (a diverged run counts as chance), and
    for B the largest loss of the first ``SPIKE_STEPS`` steps (inf for a run stopped on a NaN loss)."""
    out = []
    for arm in dict.fromkeys(table.where(part=part).column("arm")):
        rows = table.where(part=part, arm=arm)
        acc, acc_std = mean_std(list(arm_accuracy(table, arm, part).values()))
        cell = {"arm": arm, "batch_size": rows[0]["batch_size"], "lr": rows[0]["lr"],
                "optimizer": rows[0].get("optimizer", "sgd"), "seeds": len(rows),
                "val_acc": acc, "val_acc_std": acc_std, "steps": rows[0]["summary"].get("steps"),
                "time_s": mean_std([r["total_time_s"] or float("nan") for r in rows])[0],
                "diverged": sum(not _ok(r) for r in rows)}
        if part == "B":
            cell["early_peak_loss"] = mean_std([early_peak_loss(r["steps"]) if r.get("status") != "nan" else math.inf
                                                for r in rows])[0]
        out.append(cell)
    return ResultsTable(out, title=f"part {part}: mean ± std over seeds")


def arm_accuracy(table: ResultsTable, arm: str, part: str = "A") -> dict[int, float]:
    """``{seed: final accuracy}`` of one arm (a diverged or failed run counts as chance: 0.1)."""
    return {r["seed"]: (r["val_acc"] if _ok(r) and r["val_acc"] is not None else CHANCE)
            for r in table.where(part=part, arm=arm)}


CHANCE = 0.1  # ten classes


def paired(table: ResultsTable, a: str, b: str, part: str = "A") -> tuple[float, float]:
    """Mean ± std over seeds of acc(a) − acc(b), seed by seed."""
    left, right = arm_accuracy(table, a, part), arm_accuracy(table, b, part)
    diffs = [left[k] - right[k] for k in sorted(left) if k in right]
    if not diffs:
        raise ValueError(f"no seed has both arm {a!r} and arm {b!r} in part {part}")
    return mean_std(diffs)


def recovery(table: ResultsTable, reference: str, naive: str, scaled: str) -> dict[str, float]:
    """The gap (reference − naive) and the share of it that the scaled arm wins back, paired over seeds."""
    gap, gap_std = paired(table, reference, naive)
    won, won_std = paired(table, scaled, naive)
    return {"gap": gap, "gap_std": gap_std, "won": won, "won_std": won_std,
            "share": won / gap if gap > 0 else float("nan")}


def accuracy_figure(summary: ResultsTable) -> Any:
    """Final accuracy of each arm of A (mean ± std over seeds), grouped by batch."""
    from coursekit.labs.kit.plots import WIDE_FIGSIZE, new_figure

    figure, ax = new_figure(figsize=WIDE_FIGSIZE)
    rows = list(summary)
    ax.bar(range(len(rows)), [r["val_acc"] for r in rows], yerr=[r["val_acc_std"] for r in rows], capsize=3,
           color=[f"C{sorted({r['batch_size'] for r in rows}).index(r['batch_size'])}" for r in rows])
    labels = [f"{_without_batch(r['arm'])}\nB={r['batch_size']}, lr {r['lr']:g}" for r in rows]
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize="small")
    finite = [r["val_acc"] for r in rows if r["val_acc"] == r["val_acc"]]
    if finite:
        ax.set_ylim(max(0.0, min(finite) - 0.05), min(1.0, max(finite) + 0.02))
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.set_title("A. the gap at equal epochs, and what wins it back")
    return figure


# ------------------------------------------------- A at the large batch: tuned alike, ghost BN, equal steps


def arm_names(s: Any, *groups: str) -> list[str]:
    """The names of A's arms in ``groups`` (every arm of A when none is given), in the plan's order."""
    unknown = set(groups) - set(GROUPS)
    if unknown:
        raise ValueError(f"groups {sorted(unknown)} are unknown; choose from {', '.join(GROUPS)}")
    return [arm.name for arm in s.arms if not groups or arm.group in groups]


def shared_seeds(table: ResultsTable, arms: Sequence[str], part: str = "A") -> list[int]:
    """The seeds that every one of ``arms`` ran (sorted)."""
    seeds = [set(arm_accuracy(table, arm, part)) for arm in arms]
    return sorted(set.intersection(*seeds)) if seeds else []


def grid_table(table: ResultsTable, s: Any) -> ResultsTable:
    """A's LR grid at the large batch: per optimizer and LR, the accuracy (mean ± std over the seeds that every
    grid point ran: equal tuning effort for each optimizer), the LR as a multiple of the optimizer's grid centre,
    and whether it is the optimizer's best point."""
    names = [name for grid in s.optimizer_grid.values() for name in grid]
    seeds = shared_seeds(table, names)
    if not seeds:
        raise ValueError("no seed ran every point of the LR grid: plan(s) runs them all on the first seed")
    rows = []
    for optimizer, grid in s.optimizer_grid.items():
        points = []
        for name in grid:
            accuracy = arm_accuracy(table, name)
            acc, acc_std = mean_std([accuracy[seed] for seed in seeds])
            lr = table.where(part="A", arm=name)[0]["lr"]
            points.append({"optimizer": optimizer, "arm": name, "lr": lr, "lr_multiple": lr / s.grid_centres[optimizer],
                           "seeds": len(seeds), "val_acc": acc, "val_acc_std": acc_std})
        best = max(points, key=lambda point: point["val_acc"])
        rows += [{**point, "best": point is best} for point in points]
    return ResultsTable(rows, title=f"A. the same LR grid for each optimizer at batch {s.large_batch}")


def best_of_grid(grid: ResultsTable) -> dict[str, dict[str, Any]]:
    """``{optimizer: its best grid point}``."""
    return {row["optimizer"]: row for row in grid if row["best"]}


def best_inside_grid(grid: ResultsTable, tie: float | None = None) -> dict[str, bool]:
    """``{optimizer: its grid brackets its optimum}``: the best LR is inside the grid, or an inner point ends
    within ``tie`` (default ``OPTIMIZER_TIE``, half a point: one seed's noise) of the best edge. False: an edge
    beats every inner point by more than the tie, so the optimum may lie beyond the grid."""
    tie = OPTIMIZER_TIE if tie is None else tie
    inside = {}
    for optimizer, best in best_of_grid(grid).items():
        points = grid.where(optimizer=optimizer)
        low, high = min(points.column("lr_multiple")), max(points.column("lr_multiple"))
        inner = [p["val_acc"] for p in points if low < p["lr_multiple"] < high]
        inside[optimizer] = low < best["lr_multiple"] < high or any(best["val_acc"] - acc <= tie for acc in inner)
    return inside


def optimizer_comparison(table: ResultsTable, s: Any) -> dict[str, Any]:
    """Tuned SGD against the better of the tuned layer-wise optimizers (LARS, LAMB): their best grid points and
    ``margin`` = best layer-wise accuracy − best SGD accuracy (positive: LARS or LAMB ends ahead)."""
    best = best_of_grid(grid_table(table, s))
    layerwise = [row for optimizer, row in best.items() if optimizer != "sgd"]
    if "sgd" not in best or not layerwise:
        raise ValueError(f"the grid needs SGD and a layer-wise optimizer; it has {sorted(best)}")
    top = max(layerwise, key=lambda row: row["val_acc"])
    rows = table.where(part="A", arm=best["sgd"]["arm"])
    steps = rows[0]["summary"].get("steps") if len(rows) and rows[0].get("summary") else None
    return {"sgd": best["sgd"], "layerwise": top, "margin": top["val_acc"] - best["sgd"]["val_acc"], "steps": steps}


def sqrt_over_linear(table: ResultsTable, s: Any) -> tuple[float, float]:
    """acc(square-root rule) − acc(linear rule) at the large batch, mean ± std paired over seeds."""
    return paired(table, s.claim_arms["large_sqrt"], s.claim_arms["large_linear"])


def ghost_gain(table: ResultsTable, s: Any) -> tuple[float, float]:
    """acc(ghost batch norm) − acc(the same run with plain batch norm) at the large batch, paired over seeds."""
    return paired(table, s.claim_arms["large_ghost"], s.claim_arms["large_linear"])


def equal_steps_recovery(table: ResultsTable, s: Any) -> dict[str, float]:
    """The gap at equal epochs (reference − naive large batch) and the share of it that the large batch given the
    reference's steps wins back, paired over the seeds both ran."""
    return recovery(table, s.claim_arms["reference"], s.claim_arms["large_naive"], s.claim_arms["large_equal_steps"])


def large_batch_recovery(table: ResultsTable, s: Any) -> ResultsTable:
    """Every arm of A at the large batch with the lab's epochs (not equal steps): its accuracy (mean over its
    seeds), the share of the gap (reference − naive, over the same seeds) it wins back, and how far below the
    reference it ends, best first."""
    ref, naive = s.claim_arms["reference"], s.claim_arms["large_naive"]
    ref_acc, naive_acc = arm_accuracy(table, ref), arm_accuracy(table, naive)
    rows = []
    for arm in s.arms:
        if arm.batch_size != s.large_batch or arm.steps or arm.name == naive:
            continue
        accuracy = arm_accuracy(table, arm.name)
        seeds = [seed for seed in accuracy if seed in ref_acc and seed in naive_acc]
        if not seeds:
            continue
        acc, r, n = (mean_std([values[seed] for seed in seeds])[0] for values in (accuracy, ref_acc, naive_acc))
        rows.append({"arm": arm.name, "optimizer": arm.optimizer, "seeds": len(seeds), "val_acc": acc,
                     "won_back": (acc - n) / (r - n) if r > n else float("nan"), "below_reference": r - acc})
    rows.sort(key=lambda row: row["below_reference"])
    return ResultsTable(rows, title=f"A. at batch {s.large_batch}, equal epochs: the share of the gap each arm wins back")


def grid_figure(grid: ResultsTable, reference_acc: float | None = None) -> Any:
    """Final accuracy against the LR (as a multiple of each optimizer's grid centre), one line per optimizer, its
    best point ringed; the reference batch's accuracy as a line."""
    from coursekit.labs.kit.plots import new_figure, outside_legend

    figure, ax = new_figure()
    for index, optimizer in enumerate(dict.fromkeys(grid.column("optimizer"))):
        points = grid.where(optimizer=optimizer)
        centre = points[0]["lr"] / points[0]["lr_multiple"]
        ax.errorbar(points.column("lr_multiple"), points.column("val_acc"), yerr=points.column("val_acc_std"),
                    marker="o", capsize=3, color=f"C{index}", label=f"{optimizer.upper()} (centre lr {centre:g})")
        best = best_of_grid(points)[optimizer]
        ax.scatter([best["lr_multiple"]], [best["val_acc"]], s=150, facecolors="none", edgecolors=f"C{index}")
    if reference_acc is not None:
        ax.axhline(reference_acc, color="grey", linestyle=":", label="reference batch")
    ax.set_xscale("log", base=2)
    ax.set_xticks(GRID_FACTORS, [f"{factor:g}" for factor in GRID_FACTORS])
    ax.set_xlabel("peak LR / the optimizer's grid centre")
    ax.set_ylabel("final test accuracy")
    ax.set_title(grid.title or "A. the LR grid")
    outside_legend(ax)
    return figure


# ----------------------------------------------------------------------------- B: warm-up

SPIKE_STEPS = 50  # "early": the first steps of a run


def early_peak_loss(step_records: list[dict[str, Any]], steps: int = SPIKE_STEPS) -> float:
    """The largest training loss of the first ``steps`` step records (inf if the loss is not finite)."""
    losses = [r["loss"] for r in step_records if r["step"] <= steps]
    if not losses:
        return float("nan")
    return max(loss if math.isfinite(loss) else math.inf for loss in losses)


def spike_figure(table: ResultsTable, steps: int = 3 * SPIKE_STEPS) -> Any:
    """Left: the training loss of the first ``steps`` steps of each B arm (seed 0); right: final accuracy."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    summary = cells(table, "B")
    for index, cell in enumerate(summary):
        row = table.where(part="B", arm=cell["arm"])[0]
        points = [r for r in row["steps"] if r["step"] <= steps]
        left.plot([r["step"] for r in points], [r["loss"] for r in points], label=cell["arm"],
                  color=f"C{index // 2}", linestyle="-" if index % 2 == 0 else "--")
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_ylabel("training loss (every step)")
    left.set_title(f"B. the first steps at batch {table.where(part='B')[0]['batch_size']}")
    left.legend(fontsize="small")
    rows = list(summary)
    right.bar(range(len(rows)), [r["val_acc"] for r in rows], yerr=[r["val_acc_std"] for r in rows], capsize=3,
              color=[f"C{i // 2}" for i in range(len(rows))])
    right.set_xticks(range(len(rows)), [r["arm"] for r in rows], rotation=20, fontsize="small")
    right.set_ylabel("final test accuracy")
    return figure


# ----------------------------------------------------------------------------- C: critical batch


def critical_curve(table: ResultsTable) -> ResultsTable:
    """Per batch: the fewest steps to the target over its LR grid (the best LR), and E = S x B samples."""
    out = []
    for batch in sorted(set(table.where(part="C").column("batch_size"))):
        rows = table.where(part="C", batch_size=batch)
        reached = [(r["summary"].get("steps_to_target"), r["lr"]) for r in rows
                   if _ok(r) and r["summary"].get("steps_to_target")]
        best = min(reached) if reached else (None, None)
        out.append({"batch_size": batch, "steps_to_target": best[0], "best_lr": best[1],
                    "samples_to_target": best[0] * batch if best[0] else None,
                    "lrs_reaching": len(reached), "lrs": len(rows)})
    return ResultsTable(out, title="C. steps to the target accuracy (best LR of the grid)")


# Student's t at 97.5 % for 1..10 degrees of freedom (a 95 % interval); beyond 10, 2.23 (a little wider than needed)
T_975 = (12.71, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def fit_critical_batch(curve: ResultsTable) -> dict[str, float] | None:
    """Fit ``(S/S_min − 1)(E/E_min − 1) = 1`` with E = S B, i.e. ``S = S_min (1 + B_crit / B)``, in relative
    error (least squares of (a + b/B)/S − 1, a = S_min, b = E_min): ``s_min``, ``e_min``, ``b_crit`` =
    E_min / S_min, and its 95 % interval ``b_crit_low`` .. ``b_crit_high`` (from the fit's residuals: the
    covariance of a and b, log B_crit's standard error by the delta method, Student's t with n − 2 degrees of
    freedom; None with fewer than three batches). None with fewer than two reached batches; ``b_crit`` inf when
    no knee shows (a <= 0)."""
    points = [(float(r["batch_size"]), float(r["steps_to_target"])) for r in curve if r["steps_to_target"]]
    if len(points) < 2:
        return None
    suu = sum((1 / S) ** 2 for _, S in points)
    svv = sum((1 / (B * S)) ** 2 for B, S in points)
    suv = sum((1 / S) * (1 / (B * S)) for B, S in points)
    su = sum(1 / S for _, S in points)
    sv = sum(1 / (B * S) for B, S in points)
    det = suu * svv - suv**2
    if det <= 0:
        return None
    a = (su * svv - sv * suv) / det
    b = (sv * suu - su * suv) / det
    if a <= 0 or b <= 0:
        return {"s_min": a, "e_min": b, "b_crit": float("inf") if a <= 0 else 0.0, "b_crit_low": None,
                "b_crit_high": None}
    low = high = None
    dof = len(points) - 2
    if dof > 0:
        rss = sum(((a + b / B) / S - 1) ** 2 for B, S in points)
        var_a, var_b, cov_ab = (rss / dof * x / det for x in (svv, suu, -suv))
        se_log = math.sqrt(max(0.0, var_a / a**2 + var_b / b**2 - 2 * cov_ab / (a * b)))
        t = T_975[dof - 1] if dof <= len(T_975) else T_975[-1]
        low, high = b / a * math.exp(-t * se_log), b / a * math.exp(t * se_log)
    return {"s_min": a, "e_min": b, "b_crit": b / a, "b_crit_low": low, "b_crit_high": high}


def critical_grid_check(table: ResultsTable, s: Any) -> ResultsTable:
    """C's LR grid at each batch: the steps to the target of each LR (None: not reached), the best, and whether
    the grid brackets it: the best LR is inside the grid, or an inner LR reached the target within one
    evaluation interval of the best (a step count is read at an evaluation: closer is a tie)."""
    rows = []
    for batch in sorted(set(table.where(part="C").column("batch_size"))):
        runs = sorted(table.where(part="C", batch_size=batch), key=lambda r: r["lr"])
        steps = [r["summary"].get("steps_to_target") if _ok(r) else None for r in runs]
        every = max(s.eval_min_steps, math.ceil(s.eval_every_samples / batch))
        reached = [x for x in steps if x]
        best = min(reached) if reached else None
        inner = [x for x in steps[1:-1] if x]
        at = [i for i, x in enumerate(steps) if x == best]
        inside = best is not None and (any(0 < i < len(steps) - 1 for i in at) or any(x - best <= every for x in inner))
        edge = "" if inside or best is None else ("largest" if at[0] == len(steps) - 1 else "smallest")
        rows.append({"batch_size": batch, "lrs": ", ".join(f"{r['lr']:g}" for r in runs),
                     "steps": ", ".join(str(x) if x else "-" for x in steps), "eval_every": every,
                     "best_lr": runs[at[0]]["lr"] if best else None, "bracketed": inside, "best_at_edge": edge})
    return ResultsTable(rows, title="C. the LR grid at each batch: does it bracket the fastest LR?")


def critical_figure(curve: ResultsTable, fit: dict[str, float] | None, b_simple: float | None = None) -> Any:
    """Left: steps S(B) to the target; right: samples E(B) = S B; both with the fit and B_crit (and B_simple)."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    reached = [r for r in curve if r["steps_to_target"]]
    xs = [r["batch_size"] for r in reached]
    left.plot(xs, [r["steps_to_target"] for r in reached], marker="o", label="measured (best LR)")
    right.plot(xs, [r["samples_to_target"] for r in reached], marker="o", label="measured (best LR)")
    if fit and 0 < fit["b_crit"] < math.inf:
        grid = [r["batch_size"] for r in curve]
        left.plot(grid, [fit["s_min"] * (1 + fit["b_crit"] / b) for b in grid], linestyle="--",
                  label=f"fit, B_crit ≈ {fit['b_crit']:.0f}")
        right.plot(grid, [fit["e_min"] * (1 + b / fit["b_crit"]) for b in grid], linestyle="--",
                   label=f"fit, B_crit ≈ {fit['b_crit']:.0f}")
        for ax in (left, right):
            ax.axvline(fit["b_crit"], color="grey", linestyle=":")
    if b_simple:
        for ax in (left, right):
            ax.axvline(b_simple, color="black", linestyle="-.", label=f"B_simple ≈ {b_simple:.0f}")
    for ax, what in ((left, "steps S"), (right, "samples E = S x B")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"{what} to the target")
        ax.legend(fontsize="small")
    left.set_title("C. perfect scaling, then diminishing returns")
    return figure


# ----------------------------------------------------------------------------- D: noise scale


def noise_series(table: ResultsTable) -> list[dict[str, Any]]:
    """(step, loss, b_simple, grad_sq, trace_sigma) of D's step records that carry an estimate."""
    row = table.one(part="D")
    return [{"step": r["step"], "loss": r["loss"], "b_simple": r["b_simple"], "grad_sq": r.get("grad_sq"),
             "trace_sigma": r.get("trace_sigma")} for r in row["steps"] if r.get("b_simple") is not None]


def b_simple_at(series: list[dict[str, Any]], step: int | None) -> float | None:
    """B_simple of the last record at or before ``step`` (the last record when ``step`` is None or beyond)."""
    if not series:
        return None
    if step is None:
        return series[-1]["b_simple"]
    before = [p for p in series if p["step"] <= step]
    return (before or series[:1])[-1]["b_simple"]


def noise_spread(series: list[dict[str, Any]], step: int | None) -> dict[str, float] | None:
    """The estimator's own spread around ``step``: the lowest and highest B_simple of the records from half to
    twice that step (one doubling of training either side of C's target), and ``factor`` = highest / lowest.
    None without a step or a record in that window."""
    if not step:
        return None
    window = [p["b_simple"] for p in series if step / 2 <= p["step"] <= 2 * step and p["b_simple"] > 0]
    if not window:
        return None
    return {"low": min(window), "high": max(window), "factor": max(window) / min(window), "records": len(window)}


def knee_reading(s: Any, fit: dict[str, Any] | None, series: list[dict[str, Any]], at_step: int | None) -> str:
    """Where A's batches sit against C's critical batch, worded by the measurement, and why A's knee lies higher:
    C's B_crit is for C's target; A trains further, and the noise scale (D) grows as the loss falls."""
    if not fit or not 0 < fit["b_crit"] < math.inf:
        return "C's fit found no critical batch, so A's batches cannot be placed against it"
    b_crit = fit["b_crit"]
    batches = (s.base_batch, s.mid_batch, s.large_batch)
    below = [b for b in batches if b < b_crit]
    above = [b for b in batches if b >= b_crit]
    sides = "; ".join(part for part in (
        f"batch {', '.join(map(str, below))} below it" if below else "",
        f"batch {', '.join(map(str, above))} above it" if above else "") if part)
    start = b_simple_at(series, at_step)
    end = series[-1] if series else None
    grows = ""
    if start and end:
        higher = "higher" if end["b_simple"] > start else "not higher here: the estimate is noisy"
        grows = (f" D's noise scale B_simple reads {start:.0f} at C's target (step {at_step}) and "
                 f"{end['b_simple']:.0f} at the end of its run (step {end['step']}; {higher})")
    return (f"C's critical batch for {s.target_acc:.0%} on the held-out split: B_crit ≈ {b_crit:.0f}; A's {sides}.\n"
            f"A trains to its last epoch, well past {s.target_acc:.0%}: a harder target, and the critical batch grows "
            f"as the target gets harder (McCandlish et al. 2018).{grows}.")


def noise_figure(series: list[dict[str, Any]], b_crit: float | None, at_step: int | None) -> Any:
    """B_simple along the reference run, with B_crit and the step where C's reference batch reached the target."""
    from coursekit.labs.kit.plots import new_figure

    figure, ax = new_figure()
    ax.plot([p["step"] for p in series], [p["b_simple"] for p in series], label="B_simple (moving averages)")
    if b_crit and 0 < b_crit < math.inf:
        ax.axhline(b_crit, color="grey", linestyle=":", label=f"B_crit from C ≈ {b_crit:.0f}")
    if at_step:
        ax.axvline(at_step, color="black", linestyle="-.", label=f"C's reference reaches the target (step {at_step})")
    ax.set_yscale("log")
    ax.set_xlabel("step of the reference run")
    ax.set_ylabel("B_simple = tr(Σ) / |G|²")
    ax.set_title("D. the noise scale grows as the loss falls")
    ax.legend(fontsize="small")
    return figure


# ----------------------------------------------------------------------------- claims

GAP_MIN = 0.02  # "a gap": the large batch at equal epochs loses at least 2 accuracy points
RECOVERY_MID_MIN = 0.4  # at the middle batch linear scaling + warm-up wins back at least 40 % of the gap
SPIKE_MARGIN = 1.0  # without warm-up the early loss peaks at least 1 nat above the warm-up run's
# below the knee, two doublings of the batch (the smallest batch to 4x it) cut the steps to the target at least
# 2.25x, i.e. 1.5x a doubling (perfect scaling: 4x). Two doublings, not one: a step count is read at an evaluation,
# so one doubling's ratio moves by ~10 % with where the evaluations fall (1.44-1.5x on one H100, 576/400 and 576/384)
TWO_DOUBLINGS_MIN = 2.25
SQRT_OVER_LINEAR_MIN = 0.0  # at the large batch the square-root rule ends above the linear rule (paired mean)
# SGD against the best of LARS and LAMB, tuned alike, is reported as measured, whichever way it goes (Nado et al.
# 2021 against You et al.): a grid point is one seed (sd ~0.3-0.4 points at 4096 on one GPU), so a difference below
# half a point is called a tie; the same tie decides whether a grid's best edge point beats its inner point
OPTIMIZER_TIE = 0.005
# ghost batch norm is reported as seen when its paired gain exceeds this many standard errors of the paired mean
# (3 seeds on one GPU: +0.005 ± 0.002 in one run, +0.003 ± 0.004 in another: a coin flip is "not seen")
GHOST_STANDARD_ERRORS = 2.0
EQUAL_STEPS_RECOVERY_MIN = 0.75  # given the reference's steps, the large batch wins back at least 75 % of the gap


def check_claims(table: ResultsTable, s: Any) -> list[ClaimResult]:
    """The lab's claims on the measured table; each can fail. ``s.strict_claims`` False (the small CPU run):
    printed as measured, not asserted. Reported either way, never asserted: ghost batch norm's gain, whether
    each LR grid (A's and C's) brackets its optimum, and B_simple against B_crit."""
    strict = bool(s.get("strict_claims", True))
    ref, mid_naive, mid_scaled = s.claim_arms["reference"], s.claim_arms["mid_naive"], s.claim_arms["mid_linear"]
    big_naive, big_scaled = s.claim_arms["large_naive"], s.claim_arms["large_linear"]
    k_mid, k_large = s.mid_batch // s.base_batch, s.large_batch // s.base_batch
    big = recovery(table, ref, big_naive, big_scaled)
    mid = recovery(table, ref, mid_naive, mid_scaled)
    results = [
        check_claim(f"at equal epochs, {big_naive} ends at least {GAP_MIN:.2f} below {ref}", big["gap"] >= GAP_MIN,
                    f"gap {big['gap']:+.3f} ± {big['gap_std']:.3f} (paired over {len(s.seeds)} seeds)", strict=strict),
        check_claim(f"at {k_mid}x the batch, {mid_scaled} wins back at least {RECOVERY_MID_MIN:.0%} of the gap of "
                    f"{mid_naive}", mid["gap"] > 0 and mid["share"] >= RECOVERY_MID_MIN,
                    f"won back {mid['won']:+.3f} of a {mid['gap']:+.3f} gap ({mid['share']:.0%})",
                    applies=mid["gap"] > 0, why_not=f"no gap at the middle batch ({mid['gap']:+.3f})", strict=strict),
        check_claim(f"at {k_large}x the batch, linear scaling ({big_scaled}) wins back a smaller share than at "
                    f"{k_mid}x", big["share"] < mid["share"],
                    f"{big['share']:.0%} of {big['gap']:+.3f} vs {mid['share']:.0%} of {mid['gap']:+.3f}",
                    applies=big["gap"] > 0 and mid["gap"] > 0, why_not="no gap at one of the two batches",
                    strict=strict),
    ]
    results += _large_batch_claims(table, s, strict)
    spikes = cells(table, "B")
    pairs = [(spikes[i], spikes[i + 1]) for i in range(0, len(spikes) - 1, 2)]  # (with warm-up, without)
    with_w, without = pairs[-1]  # the largest LR
    jump = without["early_peak_loss"] - with_w["early_peak_loss"]
    results.append(check_claim(
        f"at lr {with_w['lr']:g} (batch {with_w['batch_size']}) the early loss spikes without warm-up (its peak in "
        f"the first {SPIKE_STEPS} steps >= {SPIKE_MARGIN:g} above the warm-up run's) and warm-up ends at least as "
        "accurate", jump >= SPIKE_MARGIN and with_w["val_acc"] >= without["val_acc"],
        f"peak loss {without['early_peak_loss']:.2f} vs {with_w['early_peak_loss']:.2f}; accuracy "
        f"{without['val_acc']:.3f} vs {with_w['val_acc']:.3f} with warm-up", strict=strict))
    results += _critical_claims(table, s, strict)
    return results


def _critical_claims(table: ResultsTable, s: Any, strict: bool) -> list[ClaimResult]:
    """C's and D's claims: two doublings, the knee's interval, C's grids (reported either way), B_simple."""
    curve = critical_curve(table)
    fit = fit_critical_batch(curve)
    smallest, largest = min(s.critical_batches), max(s.critical_batches)
    speedup = two_doublings_speedup(curve, smallest)
    results = [check_claim(
        f"from batch {smallest} to {4 * smallest} (two doublings) the steps to the target fall at least "
        f"{TWO_DOUBLINGS_MIN:g}x ({math.sqrt(TWO_DOUBLINGS_MIN):g}x a doubling; perfect scaling: 4x)",
        speedup is not None and speedup >= TWO_DOUBLINGS_MIN,
        f"speed-up {speedup:.2f}x ({math.sqrt(speedup):.2f}x a doubling)" if speedup else "-",
        applies=speedup is not None, why_not=f"batch {smallest} or {4 * smallest} did not reach the target",
        strict=strict)]
    low, high = (fit["b_crit_low"], fit["b_crit_high"]) if fit else (None, None)
    results.append(check_claim(
        f"a knee shows: the 95 % interval of the fitted B_crit lies inside the batches measured ({smallest} to "
        f"{largest}), excluding both ends", low is not None and smallest < low and high < largest,
        f"B_crit {fit['b_crit']:.0f}, interval {low:.0f} to {high:.0f}" if low is not None else
        (f"B_crit {fit['b_crit']:.0f}, no interval" if fit else "no fit"),
        applies=fit is not None and len([r for r in curve if r["steps_to_target"]]) >= 3,
        why_not="fewer than three batches reached the target", strict=strict))
    grids = critical_grid_check(table, s)
    edges = [f"{r['batch_size']} (fastest at its {r['best_at_edge']} LR)" for r in grids if r["best_at_edge"]]
    results.append(check_claim(
        "C's LR grid brackets the fastest LR at every batch (within one evaluation interval)",
        all(r["bracketed"] for r in grids if r["best_lr"] is not None),
        "at an edge: batch " + ", ".join(edges) if edges else "every batch's fastest LR inside its grid",
        strict=False))
    series = noise_series(table)
    at_step = reference_steps(curve, s.base_batch)
    b_simple = b_simple_at(series, at_step)
    spread = noise_spread(series, at_step)
    if fit and b_simple and spread and 0 < fit["b_crit"] < math.inf:
        ratio, factor = b_simple / fit["b_crit"], spread["factor"]
        results.append(check_claim(
            "B_simple at C's target and the fitted B_crit agree within the estimator's own spread (the factor "
            "between its lowest and highest reading from half to twice that step)", 1 / factor <= ratio <= factor,
            f"B_simple {b_simple:.0f}, B_crit {fit['b_crit']:.0f} (ratio {ratio:.2f}); B_simple {spread['low']:.0f} "
            f"to {spread['high']:.0f} from step {at_step / 2:.0f} to {2 * at_step} (factor {factor:.2f})",
            strict=False))
    return results


def _large_batch_claims(table: ResultsTable, s: Any, strict: bool) -> list[ClaimResult]:
    """A's claims at the large batch: sqrt vs linear, no LR rule or optimizer closes the gap at equal epochs,
    equal steps does; reported either way: ghost batch norm, whether each grid brackets its optimum; SGD against
    LARS/LAMB tuned alike is printed as measured."""
    arms, large = s.claim_arms, s.large_batch
    gain, gain_std = sqrt_over_linear(table, s)
    results = [check_claim(
        f"at batch {large}, square-root scaling ({arms['large_sqrt']}) ends above linear scaling "
        f"({arms['large_linear']})", gain > SQRT_OVER_LINEAR_MIN, f"{gain:+.3f} ± {gain_std:.3f} (paired over seeds)",
        strict=strict)]
    print(optimizer_finding(optimizer_comparison(table, s), large))
    grid = grid_table(table, s)
    inside = best_inside_grid(grid)
    results.append(check_claim(
        f"each optimizer's LR grid brackets its optimum: its best LR is inside the grid, or an inner LR ends "
        f"within {100 * OPTIMIZER_TIE:g} points of it", all(inside.values()),
        ", ".join(f"{row['optimizer'].upper()} best at {row['lr_multiple']:g}x its centre"
                  + ("" if inside[row["optimizer"]] else " (beyond the tie)") for row in best_of_grid(grid).values()),
        strict=False))
    closest = large_batch_recovery(table, s)
    top = closest[0]
    results.append(check_claim(
        f"at equal epochs, no LR rule or optimizer at batch {large} closes the gap: each ends more than "
        f"{100 * OPTIMIZER_TIE:g} points below {arms['reference']}", top["below_reference"] > OPTIMIZER_TIE,
        f"closest: {top['arm']} {100 * top['below_reference']:.1f} points below (won back {top['won_back']:.0%} "
        "of the gap)", strict=strict))
    gain, gain_std = ghost_gain(table, s)
    seeds = len(shared_seeds(table, [arms["large_ghost"], arms["large_linear"]]))
    error = gain_std / math.sqrt(seeds) if seeds else float("nan")
    results.append(check_claim(
        f"ghost batch norm (virtual batches of {s.ghost_batch}) narrows the gap at batch {large}: "
        f"{arms['large_ghost']} ends above {arms['large_linear']} by more than {GHOST_STANDARD_ERRORS:g} standard "
        "errors", gain > GHOST_STANDARD_ERRORS * error,
        f"{gain:+.3f} ± {gain_std:.3f} over {seeds} seeds (paired; standard error {error:.3f})",
        applies=seeds >= 2, why_not=f"{seeds} seed: a standard error needs two or more", strict=False))
    equal = equal_steps_recovery(table, s)
    steps = next(arm.steps for arm in s.arms if arm.name == arms["large_equal_steps"])
    results.append(check_claim(
        f"given the reference's {steps} steps, {arms['large_equal_steps']} wins back at least "
        f"{EQUAL_STEPS_RECOVERY_MIN:.0%} of the gap at equal epochs", equal["share"] >= EQUAL_STEPS_RECOVERY_MIN,
        f"won back {equal['won']:+.3f} of a {equal['gap']:+.3f} gap ({equal['share']:.0%}; paired over the seeds both "
        "ran)", applies=equal["gap"] > 0, why_not=f"no gap at equal epochs ({equal['gap']:+.3f})", strict=strict))
    return results


def reference_steps(curve: ResultsTable, batch: int) -> int | None:
    """Steps of C's run at ``batch`` to the target (its best LR); None if it did not reach it."""
    rows = curve.where(batch_size=batch)
    return rows[0]["steps_to_target"] if len(rows) else None


def two_doublings_speedup(curve: ResultsTable, smallest: int) -> float | None:
    """How many times fewer steps to the target batch ``4 * smallest`` needed than ``smallest`` (C's best LRs; two
    doublings, perfect scaling: 4); None when one of the two did not reach the target."""
    steps = {r["batch_size"]: r["steps_to_target"] for r in curve if r["steps_to_target"]}
    return steps[smallest] / steps[4 * smallest] if smallest in steps and 4 * smallest in steps else None


def optimizer_finding(tuned: dict[str, Any], batch: int) -> str:
    """One line on SGD against the best of LARS and LAMB tuned alike (``optimizer_comparison``), worded by the
    measurement: a tie within ``OPTIMIZER_TIE``, else who ends ahead and by how much, and how that reads against
    Nado et al. 2021 (``tuned["steps"]``: the run's steps, the likely reason when the layer-wise one wins)."""
    sgd, top, steps = tuned["sgd"], tuned["layerwise"], tuned.get("steps")
    name, margin = top["optimizer"].upper(), tuned["margin"]
    if abs(margin) <= OPTIMIZER_TIE:
        verdict = f"SGD and {name} end level (within {100 * OPTIMIZER_TIE:g} points, one seed's noise)"
        reading = "as Nado et al. (2021) found: tuned alike, SGD with momentum keeps up"
    elif margin > 0:
        verdict = f"{name} ends {100 * margin:.1f} points above SGD"
        reading = (f"this departs from Nado et al. (2021), who found tuned SGD with momentum as good as LARS and "
                   f"tuned Adam as good as LAMB in runs of thousands of steps; here the batch makes {steps} steps, "
                   "and in so short a run a step scaled per layer (and, for LAMB, per weight, as Adam's) gains "
                   "most. With no Adam arm this lab cannot tell LAMB's layer-wise rule from Adam's own"
                   if steps else "this departs from Nado et al. (2021), who found tuned SGD with momentum as good")
    else:
        verdict = f"SGD ends {100 * -margin:.1f} points above {name}, the better layer-wise optimizer"
        reading = "as Nado et al. (2021) found: tuned alike, SGD with momentum keeps up"
    return (f"MEASURED (reported whichever way it goes): tuned alike at batch {batch}, {verdict}: {reading}\n"
            f"    measured: SGD {sgd['val_acc']:.3f} at lr {sgd['lr']:g}; {name} {top['val_acc']:.3f} at lr "
            f"{top['lr']:g}; {sgd['seeds']} seed(s) per grid point")


def gap_points(table: ResultsTable, s: Any) -> float:
    """A's gap at equal epochs in accuracy points: the reference minus the largest batch at the same LR,
    paired over seeds (the prediction and the exit ticket ask for it)."""
    return 100 * paired(table, s.claim_arms["reference"], s.claim_arms["large_naive"])[0]


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = 1  # GPUs the notebook needs at once in the gpu profile

# gpu profile: LAB-REVIEW.md section 8, measured on Fashion-MNIST on one H100 (2026-11-26): the airbench net,
# Nesterov SGD 0.9, weight decay 5e-4, label smoothing 0.2, lr0 = 0.1 at batch 256 (0.1/0.2/0.4 gave
# 94.26/94.24/94.20 %), 10 epochs; 4096 naive 4.1 points below 256, 1024 0.8 below; steps to 90 % halve per
# doubling up to 512 and stay flat from 1024 (B_crit ~0.5-1 k); the early loss without warm-up at 6.4 and
# 12.8 (4096) peaks at 4.4-15 against 2.5-2.9 with 28 warm-up steps.
GPU_BASE_BATCH, GPU_BASE_LR, GPU_EPOCHS = 256, 0.1, 10
GPU_MID, GPU_LARGE = 1024, 4096
WARMUP_SHARE = 0.2  # warm-up: this share of the run's steps (gpu: 116 steps at 1024, 28 at 4096)
SPIKE_LRS = (6.4, 12.8)  # 64x and 128x lr0 at 4096 (16x and 32x of the equally good base LR 0.4)
HOLDOUT = 10_000  # C, D: the last 10,000 training images are the held-out split
TARGET_ACC = 0.90
CRITICAL_WARMUP_STEPS = 30
CRITICAL_LR_FACTORS = (0.25, 0.5, 1.0)  # x the linear rule lr0 B / 256
GPU_CRITICAL_BATCHES = (64, 128, 256, 512, 1024, 2048, 4096)
# each batch's epoch cap: ~1.5-2x the epochs section 8 measured to 90 % with the best LR (64: 1.5, 128: 1.3,
# 256: 1.9, 512: 1.9, 1024: 2.6, 2048: 5.3, 4096: 9.4 epochs of 50,000), so that an LR that misses ends early
GPU_CRITICAL_EPOCHS = {64: 2, 128: 3, 256: 4, 512: 4, 1024: 5, 2048: 10, "default": 16}
NOISE_MICRO_BATCHES = 4  # D: micro-batches of 64 in the reference batch of 256
NOISE_EPOCHS_GPU = 3  # past C's reference target (~360 steps = 1.8 epochs of 50,000 at 256)


# A's LR grid at the large batch, the same for every optimizer: its centre times these (Nado et al. 2021: compare
# optimizers at equal tuning effort). SGD's centre is the square-root rule (at k = 16: 2x, sqrt 4x and 8x lr0). A
# first grid between the square-root and the linear rule (4x, 8x, 16x) had its best at 4x, its lower edge, on
# Fashion-MNIST on one H100 (0.919 / 0.912 / 0.908); the linear rule stays one of A's arms.
GRID_FACTORS = (0.5, 1.0, 2.0)
# LARS's and LAMB's LRs live on other scales: LARS (trust coefficient eta = 0.001) moves each layer by about
# lr eta |w| a step, LAMB by lr |w|, SGD by lr |g|; heavy-ball momentum (SGD, LARS) multiplies a steady step by up to
# 1/(1 - 0.9) = 10, LAMB's averaged moments do not. Section 8 of LAB-REVIEW.md gives no LARS/LAMB LRs, so: first the
# LR whose step per layer matches SGD's centre, lr_SGD median(|g|/|w|) / eta for LARS and that times eta for LAMB,
# with |g|/|w| of the weight layers over the first steps at batch 512 measured on a CPU (--trust-ratio-every 1):
# airbench 0.02-0.05 (SGD centre 0.8), mlp_bn 0.04-0.2 (SGD centre 0.4), i.e. LARS 20 and LAMB 0.02 for both
# models. Then checked on the cpu profile's large batch (mlp_bn, 512, 2 seeds): LARS was flat from 2.5 to 10 (0.56-
# 0.58) and fell at 20 and 40 (0.52, 0.40); LAMB rose to 0.60 at 0.04-0.05 and fell at 0.1 and 0.2 (0.56, 0.51). So
# the centres are LARS 10 and LAMB 0.05 (between the matched 0.02 and 10x it, the momentum factor). Not yet checked
# on the GPU: whether each grid brackets its optimum is printed beside the claims.
LARS_LR_CENTRE = 10.0
LAMB_LR_CENTRE = 0.05


def _at(batch: int, name: str) -> str:
    return f"{name} B={batch}"  # A's arm names repeat across batches ("naive" at two): the batch makes them unique


def _without_batch(arm: str) -> str:
    """An arm's name without its ``B=<batch>`` ending (a figure writes the batch on a line of its own)."""
    name, _, batch = arm.rpartition(" B=")
    return name if name and batch.isdigit() else arm


def _arms(b0: int, mid: int, large: int, lr0: float, reference_steps: int) -> dict[str, Any]:
    """A's arms, the names the claims read (``claim_arms``), the LR grid of each optimizer (``optimizer_grid``,
    arm names) and its centre (``grid_centres``)."""
    k_mid, k_large = mid // b0, large // b0
    mid_linear, sqrt_lr, linear_lr = (scaled_lr(lr0, b0, mid, "linear"), scaled_lr(lr0, b0, large, "sqrt"),
                                      scaled_lr(lr0, b0, large, "linear"))
    roles = {"reference": Arm(_at(b0, "reference"), b0, lr0, 0.0),
             "mid_naive": Arm(_at(mid, "naive"), mid, lr0, 0.0),
             "mid_linear": Arm(_at(mid, f"linear {k_mid}x + warm-up"), mid, mid_linear, WARMUP_SHARE),
             "large_naive": Arm(_at(large, "naive"), large, lr0, 0.0),
             "large_sqrt": Arm(_at(large, f"sqrt {sqrt_lr / lr0:g}x + warm-up"), large, sqrt_lr, WARMUP_SHARE),
             "large_linear": Arm(_at(large, f"linear {k_large}x + warm-up"), large, linear_lr, WARMUP_SHARE)}
    centres = {"sgd": sqrt_lr, "lars": LARS_LR_CENTRE, "lamb": LAMB_LR_CENTRE}
    arms, grid = list(roles.values()), {}
    for optimizer, centre in centres.items():
        grid[optimizer] = []
        for lr in (centre * factor for factor in GRID_FACTORS):
            same = [arm for arm in arms if arm.batch_size == large and arm.optimizer == optimizer
                    and math.isclose(arm.lr, lr, rel_tol=1e-9)]
            if not same:  # a grid point of its own: the first seed only (the room's seats add seeds)
                name = f"{lr / lr0:g}x + warm-up" if optimizer == "sgd" else f"{optimizer.upper()} lr {lr:g}"
                same = [Arm(_at(large, name), large, lr, WARMUP_SHARE, GRID, optimizer, all_seeds=False)]
                arms += same
            grid[optimizer].append(same[0].name)
    roles["large_ghost"] = Arm(_at(large, f"ghost BN {b0}, linear {k_large}x + warm-up"), large, linear_lr,
                               WARMUP_SHARE, GHOST, ghost_batch=b0)
    # equal steps: the large batch given the reference's steps (k_large times the epochs), one seed. From section 8's
    # step times on one H100 (18.7 ms a step at 4096, ~5 ms at 1024): 2,340 steps at 4096 cost ~45 s a seed, three
    # seeds ~2.2 min, a third of the lab's 7 minutes; the mid batch at equal steps would cost ~12-15 s a seed, but
    # there linear scaling already wins back most of the small gap at equal epochs: the open question ("budget
    # or batch?") is at the large batch, where LR scaling fails. So: the large batch, the first seed only.
    roles["large_equal_steps"] = Arm(_at(large, f"equal steps, linear {k_large}x + warm-up"), large, linear_lr,
                                     WARMUP_SHARE, EQUAL_STEPS, steps=reference_steps, all_seeds=False)
    arms += [roles["large_ghost"], roles["large_equal_steps"]]
    return {"arms": arms, "claim_arms": {role: arm.name for role, arm in roles.items()}, "optimizer_grid": grid,
            "grid_centres": centres, "ghost_batch": b0}


def settings(profile: str) -> dict[str, Any]:
    """Lab 07's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("07")`` shows them."""
    values = _cpu_settings() if profile == "cpu" else _gpu_settings()
    b0 = values["base_batch"]
    reference_steps = values["base"].epochs * steps_per_epoch(values["train_images"], b0)
    values.update(_arms(b0, values["mid_batch"], values["large_batch"], values["base_lr"], reference_steps))
    return values


def _common(b0: int, mid: int, large: int) -> dict[str, Any]:
    return {"base_batch": b0, "mid_batch": mid, "large_batch": large, "spike_batch": large,
            "critical_lr_factors": CRITICAL_LR_FACTORS, "target_acc": TARGET_ACC,
            "noise_micro_batches": NOISE_MICRO_BATCHES}


def _gpu_settings() -> dict[str, Any]:
    base = TrainConfig(model="airbench", dataset="cifar10", data_dir=data_dir(), device_data=True, drop_last=True,
                       epochs=GPU_EPOCHS, val_every_epochs=GPU_EPOCHS, lr=GPU_BASE_LR, nesterov=True,
                       momentum=0.9, weight_decay=5e-4, label_smoothing=0.2, schedule="linear",
                       precision="bf16", channels_last=True, log_every=10, **QUIET)
    values = {"base": base, **_common(GPU_BASE_BATCH, GPU_MID, GPU_LARGE), "base_lr": GPU_BASE_LR,
              "seeds": [0, 1, 2], "train_images": 60_000, "num_samples": None, "holdout": HOLDOUT,
              "spike_lrs": SPIKE_LRS, "spike_warmup_steps": round(WARMUP_SHARE * GPU_EPOCHS * (60_000 // GPU_LARGE)),
              "critical_batches": GPU_CRITICAL_BATCHES, "critical_epochs": GPU_CRITICAL_EPOCHS,
              "critical_warmup_steps": CRITICAL_WARMUP_STEPS, "eval_every_samples": 2048, "eval_min_steps": 5,
              "noise_epochs": NOISE_EPOCHS_GPU, "noise_every": 1, "noise_log_every": 10, "jobs": 1,
              "strict_claims": True, "job": job_options("gpu", "00:20:00"), "timeout_s": 1800}
    # from bench/REPORT-large-batch.md (one H100, every run of the plan before A's grid, ghost BN and equal steps:
    # 274 s in one process; the notebook 4.3 min): A's six arms 118 s and B 48 s for 3 seeds, C 87 s, D 21 s; one
    # job's start ~30 s. A's new arms, from section 8's 18.7 ms a step at 4096 plus the record's ~1 s a run: the grid's
    # 7 runs of 140 steps (1 seed; LARS/LAMB loop over the tensors, ~15 % slower) ~28 s, ghost BN (16 normalisations
    # of 256 per layer, ~30 % slower) ~14 s for 3 seeds, equal steps 2,340 steps ~45 s: ~1.5 min. In all ~6.7 min.
    values["budget"] = workshop_budget({"A and B, 3 seeds": (1, 2.8), "A: LR grid, ghost BN, equal steps": (1, 1.5),
                                        "C, critical batch": (1, 1.5), "D, noise scale": (1, 0.35),
                                        "start-up": (1, 0.5)})
    values = on_cifar10(values, "base")
    if values["base"].dataset == "generated":  # the stand-in: a smoke test (the notice says so)
        values["strict_claims"] = False
        values["train_images"] = values["base"].num_samples - int(values["base"].num_samples
                                                                  * values["base"].val_fraction)
    elif values["base"].dataset == "cifar10":
        values["train_images"] = 50_000
    return values


# cpu profile (CI: two cores, the whole notebook about a minute): the same four parts, scaled down: a batch-norm
# MLP on the first 4,000 Fashion-MNIST images at 16 x 16 pixels, batches 32 / 128 / 512, 2 epochs (250, 62 and
# 14 steps). Its claims are printed, not asserted: a tiny model on a subset is not the evidence the gpu profile
# gives (on one CPU core: ~0.5-4 s a run, 42 runs in two jobs; A's equal-steps run, 250 steps at 512, ~4 s).
CPU_SUBSET, CPU_SIDE, CPU_EPOCHS = 4000, 16, 2
CPU_BASE_BATCH, CPU_MID, CPU_LARGE, CPU_BASE_LR = 32, 128, 512, 0.05


def _cpu_settings() -> dict[str, Any]:
    base = TrainConfig(model="mlp_bn", dataset="cifar10", data_dir=data_dir(), device_data=True, drop_last=True,
                       num_samples=CPU_SUBSET, image_size=CPU_SIDE, epochs=CPU_EPOCHS, val_every_epochs=CPU_EPOCHS,
                       lr=CPU_BASE_LR, nesterov=True, momentum=0.9, weight_decay=5e-4, label_smoothing=0.2,
                       schedule="linear", log_every=5, device="cpu", **QUIET)
    values = {"base": base, **_common(CPU_BASE_BATCH, CPU_MID, CPU_LARGE), "base_lr": CPU_BASE_LR, "seeds": [0, 1],
              "train_images": CPU_SUBSET, "num_samples": CPU_SUBSET, "holdout": CPU_HOLDOUT,
              "spike_lrs": (1.6,), "spike_warmup_steps": round(WARMUP_SHARE * CPU_EPOCHS * (CPU_SUBSET // CPU_LARGE)),
              "critical_batches": (32, 64, 128, 256, 512), "critical_epochs": {"default": CPU_EPOCHS},
              "critical_warmup_steps": 5, "eval_every_samples": 256, "eval_min_steps": 2,
              "noise_epochs": 1, "noise_every": 1, "noise_log_every": 5, "jobs": 2,
              "strict_claims": False, "job": job_options("cpu", "00:10:00"), "timeout_s": 600}
    values = on_cifar10(values, "base", image_size=CPU_SIDE)
    values["target_acc"] = CPU_TARGET_ACC
    if values["base"].dataset == "generated":  # the stand-in: CPU_SUBSET training images + CPU_STANDIN_VAL
        total = CPU_SUBSET + CPU_STANDIN_VAL
        values["base"] = values["base"].replace(num_samples=total, val_fraction=CPU_STANDIN_VAL / total)
    return values


CPU_TARGET_ACC = 0.65
CPU_HOLDOUT = 1000
CPU_STANDIN_VAL = 1000
