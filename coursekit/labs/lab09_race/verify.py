"""Entries of the leaderboard and their verification: marked and explained, never silently dropped.

An entry (one participant's submission in one round) counts when it has no mark. Marks:
- a run's configuration breaks a rule (``Rules.problems``);
- a run's validation set is not the baseline's (its size or hash differs);
- a run's code hash is not the kit's (the coursekit source that ran was changed);
- fewer seeds than the rules ask, a seed used twice, or seeds run with different configurations;
- a seed did not reach the target (or did not finish);
- the target was reached on evaluation luck: the held-out part of the validation set (``confirm_fraction``,
  never read by the stopping evaluations, evaluated once at each stop) gives a mean accuracy over the seeds
  more than ``CONFIRM_Z`` standard errors below the target;
- the runs ran on another GPU model (or CPU) than the baseline of the same round (a comparison needs the same
  GPUs; how many of them is the participant's choice within ``max_gpus``);
- the runs are not their poster's: the pseudonym belongs to another Unix user, or the file they came from
  can be written by others (``leaderboard.read_board``). Entries are grouped by the Unix user who posted them
  too: another user's runs under your pseudonym never join or replace yours.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab09_race.leaderboard import BASELINE, group_runs, is_theirs, mean_std
from coursekit.labs.lab09_race.rules import Rules

# An entry is marked when its held-out accuracy at the stops is this many standard errors below the target: an
# honest entry (its models truly at the target) is marked by chance about once in 40, one that stopped on a lucky
# evaluation is marked when its luck was large against the noise of both parts of the validation set.
CONFIRM_Z = 2.0


def hardware(run: dict[str, Any]) -> str:
    """``2 x NVIDIA H100 80GB HBM3`` or the CPU's name: what a time was measured on."""
    if run.get("gpu_count"):
        return f"{run['gpu_count']} x {run.get('gpu_name') or run.get('device_name')}"
    return str(run.get("device_name") or "?")


def device_kind(run: dict[str, Any]) -> str:
    """The GPU model (or the CPU's name without its thread count) a time was measured on: entries must share it
    with the baseline; the number of GPUs is the participant's choice, within the rules' ``max_gpus``."""
    if run.get("gpu_count"):
        return str(run.get("gpu_name") or run.get("device_name"))
    return re.sub(r"\s*\(\d+ threads?\)$", "", str(run.get("device_name") or "?"))


def confirmed_accuracy(runs: list[dict[str, Any]]) -> float | None:
    """The mean held-out accuracy at the stops of the runs that reached the target (None: none was confirmed)."""
    values = [float(r["confirm_acc"]) for r in runs if r.get("target_reached") and r.get("confirm_acc") is not None]
    return sum(values) / len(values) if values else None


def luck_mark(runs: list[dict[str, Any]], target: float) -> str | None:
    """Why the runs' target looks reached on evaluation luck (None: the held-out part confirms it, or there is none).

    The standard error of the mean over ``k`` seeds counts the noise of both parts of the validation set: the
    stopping part (a run stops at its first evaluation over the target, so its own noise can put it there) and
    the held-out part: ``sqrt(t (1 - t) (1/n_held + 1/n_stop) / k)``."""
    confirmed = [r for r in runs if r.get("target_reached") and r.get("confirm_acc") is not None
                 and r.get("confirm_samples") and r.get("val_samples")]
    if not confirmed:
        return None
    mean = sum(float(r["confirm_acc"]) for r in confirmed) / len(confirmed)
    held = sum(int(r["confirm_samples"]) for r in confirmed) / len(confirmed)
    stopping = sum(int(r["val_samples"]) for r in confirmed) / len(confirmed)
    error = math.sqrt(target * (1 - target) * (1 / held + 1 / stopping) / len(confirmed))
    if mean >= target - CONFIRM_Z * error:
        return None
    return (f"the target looks reached on evaluation luck: at the stops, the held-out part of the validation set "
            f"({held:,.0f} samples, never used for stopping) gave {mean:.1%} (mean of {len(confirmed)} seeds), more "
            f"than {CONFIRM_Z:g} standard errors ({CONFIRM_Z * error:.1%}) below the target {target:.1%}")


def marks_of(runs: list[dict[str, Any]], rules: Rules, kit_code_hash: str,
             reference: dict[str, Any] | None) -> list[str]:
    """Every reason why these runs (one entry) do not count."""
    marks: list[str] = sorted({str(r["not_theirs"]) for r in runs if r.get("not_theirs")})
    seeds = [r.get("seed") for r in runs]
    if len(runs) < rules.seeds:
        marks.append(f"{len(runs)} seed(s) posted, the rules ask for {rules.seeds}")
    if len(set(seeds)) != len(seeds):
        marks.append(f"seeds repeat: {seeds}")
    if len({r.get("config_hash") for r in runs}) > 1:
        marks.append("the seeds ran different configurations (config hashes differ)")
    broken: list[str] = []
    for run in runs:
        for problem in rules.problems(run.get("config") or {}, run.get("num_parameters"), run.get("gpu_count")):
            if problem not in broken:
                broken.append(problem)
    marks += [f"breaks a rule: {problem}" for problem in broken]
    if reference is not None:
        wrong = [r for r in runs if (r.get("val_hash"), r.get("val_samples"))
                 != (reference.get("val_hash"), reference.get("val_samples"))]
        if wrong:
            marks.append(f"validation set differs from the baseline's ({wrong[0].get('val_samples')} samples, hash "
                         f"{wrong[0].get('val_hash')} vs {reference.get('val_samples')}, {reference.get('val_hash')})")
        other = sorted({hardware(r) for r in runs if device_kind(r) != device_kind(reference)})
        if other:
            marks.append(f"ran on {', '.join(other)}, the baseline of this round on {hardware(reference)}")
    foreign = sorted({str(r.get("code_hash")) for r in runs if r.get("code_hash") != kit_code_hash})
    if foreign:
        marks.append(f"code hash {', '.join(foreign)} is not the kit's ({kit_code_hash}): the engine's source was changed")
    missed = [r.get("seed") for r in runs if not r.get("target_reached")]
    if missed:
        marks.append(f"seed(s) {missed} did not reach the target {rules.target_acc:.1%}")
    lucky = luck_mark(runs, rules.target_acc)
    if lucky:
        marks.append(lucky)
    return marks


def baseline_reference(runs: list[dict[str, Any]], round_: int) -> dict[str, Any] | None:
    """The first baseline run of the round (its validation set and hardware are the reference)."""
    for run in runs:
        if run["participant"] == BASELINE and int(run.get("round") or 1) == round_ and is_theirs(run):
            return run
    return None


def entries(runs: list[dict[str, Any]], rules: Rules, kit_code_hash: str,
            problems: Sequence[str] = ()) -> ResultsTable:
    """One row per (participant, submission, round, Unix user): time-to-target mean ± std, the held-out accuracy
    at the stops, the marks, the rank;
    ``table.problems``: what the reader skipped (``problems``: lines or files that are not runs)."""
    rows = []
    for (participant, submission, round_, user), group in group_runs(runs).items():
        times = [r["time_to_target_s"] for r in group if r.get("target_reached") and r.get("time_to_target_s") is not None]
        steps = [r["steps_to_target"] for r in group if r.get("target_reached") and r.get("steps_to_target") is not None]
        mean, std = mean_std(times)
        marks = marks_of(group, rules, kit_code_hash, baseline_reference(runs, round_))
        rows.append({"participant": participant, "submission": submission, "round": round_, "user": user,
                     "seeds": len(group), "reached": len(times), "time_to_target_s": mean, "std_s": std,
                     "steps_to_target": mean_std(steps)[0], "confirm_acc": confirmed_accuracy(group),
                     "hardware": hardware(group[0]),
                     "counts": not marks, "marks": "; ".join(marks) or "-", "runs": group})
    rows.sort(key=lambda r: (not r["counts"], r["time_to_target_s"] if r["time_to_target_s"] is not None
                             else float("inf")))
    rank = 0
    for row in rows:
        row["rank"] = (rank := rank + 1) if row["counts"] else None
    columns = ["rank", "participant", "submission", "round", "seeds", "reached", "time_to_target_s", "std_s",
               "steps_to_target", "confirm_acc", "hardware", "counts", "marks"]
    table = ResultsTable(rows, columns=columns, title=f"Leaderboard — {rules.name} (target {rules.target_acc:.1%})")
    table.problems = list(problems)  # type: ignore[attr-defined]
    return table
