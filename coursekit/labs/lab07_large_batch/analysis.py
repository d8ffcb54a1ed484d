"""Lab 07's analysis: from the table of every run (``plan.results``) to the numbers the figures and the claims
show: A's cells and paired differences, its LR grid per optimizer and the large batch's recoveries; B's early
loss; C's steps to the target, the fit of ``(S/S_min − 1)(E/E_min − 1) = 1`` and ``B_crit``; D's noise scale."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab07_large_batch.settings import GROUPS
from coursekit.metrics import mean_std


def _ok(row: dict[str, Any]) -> bool:
    return row.get("status") == "completed"


# ----------------------------------------------------------------------------- A: gap and recovery


def cells(table: ResultsTable, part: str = "A") -> ResultsTable:
    """Mean ± std over seeds of every arm of ``part``: final accuracy (a diverged run counts as chance), and
    for B the largest loss of the first ``SPIKE_STEPS`` steps (inf for a run stopped on a NaN loss)."""
    out = []
    for arm in dict.fromkeys(table.where(part=part).column("arm")):
        rows = table.where(part=part, arm=arm)
        accuracies = list(arm_accuracy(table, arm, part).values())
        acc, acc_std = mean_std(accuracies)
        cell = {"arm": arm, "batch_size": rows[0]["batch_size"], "lr": rows[0]["lr"],
                "optimizer": rows[0].get("optimizer", "sgd"), "seeds": len(rows),
                "val_acc": acc, "val_acc_std": acc_std if len(accuracies) > 1 else None,  # one seed: no spread
                "steps": rows[0]["summary"].get("steps"),
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
                           "seeds": len(seeds), "val_acc": acc, "val_acc_std": acc_std if len(seeds) > 1 else None})
        best = max(points, key=lambda point: point["val_acc"])
        rows += [{**point, "best": point is best} for point in points]
    return ResultsTable(rows, title=f"A. the same LR grid for each optimizer at batch {s.large_batch}")


# SGD against the best of LARS and LAMB, tuned alike, is reported as measured, whichever way it goes (Nado et al.
# 2021 against You et al.): a grid point is one seed (sd ~0.3-0.4 points at 4096 on one GPU), so a difference below
# half a point is called a tie; the same tie decides whether a grid's best edge point beats its inner point
OPTIMIZER_TIE = 0.005


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
    ``margin`` = best layer-wise accuracy − best SGD accuracy (positive: LARS or LAMB ends ahead); ``each``: the
    best grid point of every layer-wise optimizer."""
    best = best_of_grid(grid_table(table, s))
    layerwise = [row for optimizer, row in best.items() if optimizer != "sgd"]
    if "sgd" not in best or not layerwise:
        raise ValueError(f"the grid needs SGD and a layer-wise optimizer; it has {sorted(best)}")
    top = max(layerwise, key=lambda row: row["val_acc"])
    rows = table.where(part="A", arm=best["sgd"]["arm"])
    steps = rows[0]["summary"].get("steps") if len(rows) and rows[0].get("summary") else None
    return {"sgd": best["sgd"], "layerwise": top, "margin": top["val_acc"] - best["sgd"]["val_acc"], "steps": steps,
            "each": layerwise}


def sqrt_over_linear(table: ResultsTable, s: Any) -> tuple[float, float]:
    """acc(square-root rule) − acc(linear rule) at the large batch, mean ± std paired over seeds."""
    return paired(table, s.claim_arms["large_sqrt"], s.claim_arms["large_linear"])


def ghost_gain(table: ResultsTable, s: Any) -> tuple[float, float]:
    """acc(ghost batch norm) − acc(the same run with plain batch norm: the sqrt rule) at the large batch, paired
    over seeds."""
    return paired(table, s.claim_arms["large_ghost"], s.claim_arms["large_sqrt"])


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
        won_back = (acc - n) / (r - n) if r > n else float("nan")
        rows.append({"arm": arm.name, "optimizer": arm.optimizer, "seeds": len(seeds), "val_acc": acc,
                     "won_back": won_back, "below_reference": r - acc,
                     "won_back_pct": 100 * won_back, "points_below_reference": 100 * (r - acc)})  # as the claims say
    rows.sort(key=lambda row: row["below_reference"])
    return ResultsTable(rows, columns=["arm", "optimizer", "seeds", "val_acc", "won_back_pct", "points_below_reference"],
                        title=f"A. at batch {s.large_batch}, equal epochs: the share of the gap each arm wins back")


# ----------------------------------------------------------------------------- B: warm-up

SPIKE_STEPS = 50  # "early": the first steps of a run


def early_peak_loss(step_records: list[dict[str, Any]], steps: int = SPIKE_STEPS) -> float:
    """The largest training loss of the first ``steps`` step records (inf if the loss is not finite)."""
    losses = [r["loss"] for r in step_records if r["step"] <= steps]
    if not losses:
        return float("nan")
    return max(loss if math.isfinite(loss) else math.inf for loss in losses)


def warmup_effect(table: ResultsTable) -> list[dict[str, Any]]:
    """Per LR of B, paired seed by seed: ``higher`` (the seeds whose warm-up run ended more accurate) of ``seeds``
    (those both ran), and the mean ± std of acc(with warm-up) − acc(without). B's arms come in pairs: with, then
    without warm-up (``plan``)."""
    arms = list(dict.fromkeys(table.where(part="B").column("arm")))
    out = []
    for with_w, without in zip(arms[::2], arms[1::2], strict=False):
        left, right = arm_accuracy(table, with_w, "B"), arm_accuracy(table, without, "B")
        diffs = [left[k] - right[k] for k in sorted(left) if k in right]
        gain, gain_std = mean_std(diffs, empty=None)
        out.append({"lr": table.where(part="B", arm=with_w)[0]["lr"], "seeds": len(diffs),
                    "higher": sum(d > 0 for d in diffs), "gain": gain, "gain_std": gain_std})
    return out


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


# ----------------------------------------------------------------------------- D: noise scale


def noise_series(table: ResultsTable) -> list[dict[str, Any]]:
    """(step, loss, b_simple, grad_sq, trace_sigma) of D's step records that carry an estimate."""
    row = table.one(part="D")
    return [{"step": r["step"], "loss": r["loss"], "b_simple": r["b_simple"], "grad_sq": r.get("grad_sq"),
             "trace_sigma": r.get("trace_sigma")} for r in row["steps"] if r.get("b_simple") is not None]


def split_step_cost(table: ResultsTable) -> str | None:
    """D's median step time against part A's runs at the same batch without a split (their mean): what the split
    into micro-batches costs a step on one device. None where either is missing."""
    d = table.one(part="D")
    plain = [r["step_time_s"] for r in table if r.get("part") == "A" and r.get("batch_size") == d.get("batch_size")
             and r.get("step_time_s")]
    if not d.get("step_time_s") or not plain:
        return None
    reference = sum(plain) / len(plain)
    parts = getattr(d.get("config"), "accumulation_steps", None)
    return (f"a step of D (batch {d['batch_size']}" + (f" in {parts} micro-batches" if parts else "")
            + f"): {1e3 * d['step_time_s']:.1f} ms (median); of A's runs at batch {d['batch_size']} without a "
            f"split: {1e3 * reference:.1f} ms, so x{d['step_time_s'] / reference:.1f}")


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


def reference_steps(curve: ResultsTable, batch: int) -> int | None:
    """Steps of C's run at ``batch`` to the target (its best LR); None if it did not reach it."""
    rows = curve.where(batch_size=batch)
    return rows[0]["steps_to_target"] if len(rows) else None


def two_doublings_speedup(curve: ResultsTable, smallest: int) -> float | None:
    """How many times fewer steps to the target batch ``4 * smallest`` needed than ``smallest`` (C's best LRs; two
    doublings, perfect scaling: 4); None when one of the two did not reach the target."""
    steps = {r["batch_size"]: r["steps_to_target"] for r in curve if r["steps_to_target"]}
    return steps[smallest] / steps[4 * smallest] if smallest in steps and 4 * smallest in steps else None


def gap_points(table: ResultsTable, s: Any) -> float:
    """A's gap at equal epochs in accuracy points: the reference minus the largest batch at the same LR,
    paired over seeds (the prediction and the exit ticket ask for it)."""
    return 100 * paired(table, s.claim_arms["reference"], s.claim_arms["large_naive"])[0]
