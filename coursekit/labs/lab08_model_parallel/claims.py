"""Lab 08's claims, each a (holds, what was measured) judged on the runs' rows: every strategy ends with serial
training's weights (:func:`equal_to_serial`), the pipeline's gain against the bubble's prediction
(:func:`pipeline_gain`, :func:`schedule_spread`), the measured bubble against the theory
(:func:`bubble_excess`), and values that fall (:func:`decreasing`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coursekit.labs.kit.results import ResultsTable


def equal_to_serial(differences: dict[str, float | None], serial_move: float | None, tolerance: float
                    ) -> tuple[bool, str]:
    """The claim "every strategy ends with serial training's weights", relative to how far serial training
    moved them: each max |w − w_serial| at most ``tolerance`` × ``serial_move`` (serial's largest move, see
    :func:`weights_moved`). A strategy that never updated is off by 1× that move, one that took wrong steps by
    about as much: a fixed tolerance cannot tell them from rounding once the moves are small (bf16 AdamW moves
    a weight by at most lr per step). Returns (holds, what was measured)."""
    if serial_move is None or not serial_move > 0:
        return False, "serial training's own move is missing (its weights file)"
    shown = ", ".join(f"{name} {v:.1e} ({v / serial_move:.2g}×)" if v is not None else f"{name} missing"
                      for name, v in differences.items())
    holds = bool(differences) and all(v is not None and v <= tolerance * serial_move for v in differences.values())
    return holds, f"{shown}; serial training moved a weight by up to {serial_move:.1e}"


def schedule_spread(bubbles: ResultsTable | Sequence[dict[str, Any]]) -> float | None:
    """Run-to-run spread of tokens/s, read off the sweep itself: at every m both GPipe and 1F1B ran, the two
    schedules do the same work with the same bubble (p−1)/(m+p−1), so how far apart their tokens/s lie is the
    noise of one run: |a − b| / their mean, averaged over those m. None when no m has both."""
    speeds: dict[int, dict[str, float]] = {}
    for r in bubbles:
        if r.get("tokens_per_s"):
            speeds.setdefault(r["microbatches"], {})[r["schedule"]] = r["tokens_per_s"]
    pairs = [(v["gpipe"], v["1f1b"]) for v in speeds.values() if "gpipe" in v and "1f1b" in v]
    return sum(abs(a - b) / ((a + b) / 2) for a, b in pairs) / len(pairs) if pairs else None


# the gain must miss the bubble's prediction by this many run-to-run spreads (schedule_spread). Measured spreads:
# 0.7 % and 4.7 % on H100s (the benchmark), 2-16 % on two CPU cores shared with other work; the gain missed the
# prediction by x1.06 against x1.60 on H200s, x1.05-1.12 against x1.60 on CPUs
GAIN_MARGIN_SPREADS = 2


def pipeline_gain(bubbles: ResultsTable | Sequence[dict[str, Any]], schedule: str = "gpipe",
                  margins: float = GAIN_MARGIN_SPREADS) -> tuple[bool, str]:
    """The claim "GPipe's tokens/s from m = 1 to the largest m stay below what the bubble alone predicts, by more
    than ``margins`` run-to-run spreads": at the largest m, GPipe's tokens/s over m = 1's, against
    (1 − b(m)) / (1 − b(1)), what a smaller bubble alone would give. Holds when the measured ratio, raised by
    ``margins`` spreads (:func:`schedule_spread`), still stays below the prediction. It does not claim that
    tokens/s rise: a ratio of 1 or below (no gain, or a fall) holds too. A ratio within the noise of the
    prediction (micro-batches that cost nothing) fails, and so does a sweep without the rows to judge it."""
    rows = [r for r in bubbles if r.get("schedule") == schedule and r.get("tokens_per_s")]
    one = next((r for r in rows if r["microbatches"] == 1), None)
    spread = schedule_spread(bubbles)
    if one is None or len(rows) < 2 or spread is None:
        return False, "missing rows: GPipe at m = 1 and a larger m, and GPipe and 1F1B at one m (the spread)"
    last = max(rows, key=lambda r: r["microbatches"])
    theory = (1 - last["bubble_theory"]) / (1 - one["bubble_theory"])
    measured = last["tokens_per_s"] / one["tokens_per_s"]
    holds = measured * (1 + margins * spread) < theory
    change = "no gain" if round(measured, 2) == 1 else ("a gain" if measured > 1 else "a fall")
    return holds, (f"x{measured:.2f} at m = {last['microbatches']} over m = 1 ({change}), against x{theory:.2f} from "
                   f"the bubble; run-to-run spread {spread:.1%} (GPipe vs 1F1B at the same m), so at most "
                   f"x{theory / (1 + margins * spread):.2f} counts as below the prediction")


def bubble_excess(bubbles: ResultsTable | Sequence[dict[str, Any]], limit: float) -> tuple[bool, str]:
    """The claim "the measured bubble exceeds (p−1)/(m+p−1) by at most ``limit`` of itself": relative, so that at
    m = 4 (theory 0.2 for two stages) a bubble twice the theory fails. Every row needs a measurement."""
    excesses = [(r["schedule"], r["microbatches"], r["bubble_measured"] / r["bubble_theory"] - 1
                 if r.get("bubble_measured") is not None else None) for r in bubbles]
    holds = bool(excesses) and all(e is not None and e <= limit for _, _, e in excesses)
    return holds, ", ".join(f"{sc} m={m}: {e:+.0%}" if e is not None else f"{sc} m={m}: missing"
                            for sc, m, e in excesses) or "no rows"


def decreasing(values: Sequence[float | None]) -> bool:
    """Every value smaller than the one before (None counts as a failure)."""
    return all(v is not None for v in values) and all(b < a for a, b in zip(values, values[1:], strict=False))
