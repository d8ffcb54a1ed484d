"""Lab 09's claims, computed from the board's rows (so that a test can plant rows and see each claim fail).

``race_claims(...)`` returns the keyword arguments of ``labs.check_claim`` for each claim, in the notebook's order.
"""

from __future__ import annotations

import math
from typing import Any

from coursekit.labs.lab09_race.leaderboard import BASELINE
from coursekit.labs.lab09_race.verify import CONFIRM_Z, confirm_floor

# The tuned entry must be faster than the baseline by a factor whose logarithm exceeds this many standard errors.
# Times to the target spread in proportion to their mean (a seed that needs 7 epochs instead of 3 takes 7/3 of
# the time, whatever an epoch costs), so the speed-up is read as a ratio, ln(baseline mean / entry mean), with
# the standard error of each mean's logarithm (its relative standard error, std / (mean sqrt(seeds))).
FASTER_SE = 3.0
RIVAL_MARKS = ("confirm_fraction", "validation set differs")  # what the rival's marks must name


def speedup_margin(base_s: float, base_std: float, base_seeds: int, ours_s: float, ours_std: float,
                   ours_seeds: int) -> tuple[float, float]:
    """The speed-up of a mean time ``ours_s`` over ``base_s`` as ln(base_s / ours_s), and its standard error
    (the two means' relative standard errors combined; each std over its seeds)."""
    se = math.sqrt((base_std / base_s) ** 2 / max(base_seeds, 1) + (ours_std / ours_s) ** 2 / max(ours_seeds, 1))
    return math.log(base_s / ours_s), se


def faster_by(ours: dict[str, Any] | None, base: dict[str, Any] | None, seeds: int) -> tuple[bool, str]:
    """Is ``ours`` faster than ``base`` by a factor beyond FASTER_SE standard errors (their seeds' spread),
    counting, with every seed at the target? And the evidence in words."""
    if not ours or not base or not ours.get("time_to_target_s") or not base.get("time_to_target_s"):
        return False, "no time to the target for the entry or the baseline"
    log_gain, se = speedup_margin(base["time_to_target_s"], base.get("std_s") or 0.0, base.get("reached") or seeds,
                                  ours["time_to_target_s"], ours.get("std_s") or 0.0, ours.get("reached") or seeds)
    holds = bool(ours.get("counts")) and log_gain > FASTER_SE * se
    return holds, (f"{ours['time_to_target_s']:.2f} ± {ours.get('std_s') or 0:.2f} s vs baseline "
                   f"{base['time_to_target_s']:.2f} ± {base.get('std_s') or 0:.2f} s: ×{math.exp(log_gain):.2f} "
                   f"faster, {FASTER_SE:g} standard errors of the ratio = ×{math.exp(FASTER_SE * se):.2f}")


def race_claims(board: list[dict[str, Any]], participant: str, submission: str, rival: str, seeds: int,
                speed_applies: bool, speed_why_not: str = "") -> list[dict[str, Any]]:
    """The claims of lab 09 on ``board`` (``race.standings`` rows): keyword arguments of ``check_claim``."""
    rows = {(r["participant"], r["submission"]): r for r in board}
    base, ours = rows.get((BASELINE, "baseline")), rows.get((participant, submission))
    rival_row = rows.get((rival, "small-val"))
    faster, faster_evidence = faster_by(ours, base, seeds)
    return [
        {"statement": "every seed of the baseline reached the target, the held-out half confirms it (its accuracy at "
                      f"the stops no more than {CONFIRM_Z:g} standard errors below the target), and the baseline counts",
         "holds": base is not None and bool(base["counts"]) and base["reached"] == seeds
         and base.get("confirm_acc") is not None,
         "evidence": f"baseline: {base['reached'] if base else 0} of {seeds} seeds, held-out half "
                     f"{(base or {}).get('confirm_acc') or 0:.1%} at the stops{_floor_text(base)}, "
                     f"marks: {base['marks'] if base else '-'}"},
        {"statement": "an entry that changes the validation set is marked with the broken rule, not ranked",
         "holds": rival_row is not None and not rival_row["counts"] and rival_row["rank"] is None
         and all(mark in rival_row["marks"] for mark in RIVAL_MARKS),
         "evidence": rival_row["marks"] if rival_row else "no rival entry posted"},
        {"statement": "your entry keeps the rules and counts (same code, same validation set, every seed reached)",
         "holds": ours is not None and bool(ours["counts"]),
         "evidence": (ours["marks"] if ours["marks"] not in ("", "-") else "no marks") if ours else "no entry posted"},
        {"statement": f"the tuned entry is faster than the baseline by a factor beyond {FASTER_SE:g} standard "
                      "errors of the ratio of their mean times (the seeds' spread)",
         "holds": faster, "evidence": faster_evidence, "applies": speed_applies, "why_not": speed_why_not},
    ]


def _floor_text(base: dict[str, Any] | None) -> str:
    """Where the baseline's held-out accuracy would be marked as luck: " (target 89.0%, marked under 88.3%)"."""
    runs = (base or {}).get("runs") or []
    target = next((float(r["target_acc"]) for r in runs if r.get("target_acc") is not None), None)
    found = confirm_floor(runs, target) if target is not None else None
    return "" if found is None else f" (target {target:.1%}; a mean under {found[0]:.1%} would be marked as luck)"
