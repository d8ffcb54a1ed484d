"""The closing check of every lab: its claim, tested on the data just measured, said in words.

``check_claim`` prints one line that is stable from run to run (the statement and whether it held) and
one ``measured:`` line with the numbers (which vary, and which nbval's sanitiser masks). A claim that
does not hold raises ``AssertionError``, so a notebook run in CI fails when the lab stops teaching the
truth. A claim that cannot be seen in this profile (tensor cores on a CPU) is reported as not checked. A
claim checked with ``strict=False`` (a result of the literature that the lab's small data need not show) that
does not hold is reported as not seen on this data, with what was measured: the lab states what it measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

HOLDS = "CLAIM HOLDS"
FAILS = "CLAIM DOES NOT HOLD"
NOT_CHECKED = "NOT CHECKED HERE"
NOT_SEEN = "NOT SEEN ON THIS DATA"  # a non-strict claim that did not hold: reported, not asserted


@dataclass(frozen=True)
class ClaimResult:
    statement: str
    holds: bool | None  # None: not checked in this profile
    evidence: str
    strict: bool = True  # False: reported, not asserted (see check_claim)

    def __str__(self) -> str:
        if self.holds is None:
            return f"{NOT_CHECKED}: {self.statement}\n    why: {self.evidence}"
        head = HOLDS if self.holds else FAILS if self.strict else NOT_SEEN
        return f"{head}: {self.statement}\n    measured: {self.evidence}"


def check_claim(statement: str, holds: bool, evidence: str, *, applies: bool = True,
                why_not: str = "", strict: bool = True) -> ClaimResult:
    """Print the verdict on `statement`; raise AssertionError when it applies, fails and `strict`."""
    if not applies:
        result = ClaimResult(statement, None, why_not or "the effect does not exist in this profile")
        print(result)
        return result
    result = ClaimResult(statement, bool(holds), evidence, strict)
    print(result)
    if strict and not result.holds:
        raise AssertionError(f"{FAILS}: {statement} ({evidence})")
    return result


# --- small statistics the claims use ------------------------------------------------------------

def percent(share: float, digits: int = 0, sign: bool = False) -> str:
    """A share as a percent for a claim's evidence ("96%", with ``sign`` "+1.1%"), never "-0%" or "-0.0%": a share
    that rounds to zero from below reads as zero."""
    rounded = round(share, digits + 2) or 0.0
    return f"{rounded:{'+' if sign else ''}.{digits}%}"


def signed(value: float, digits: int = 3) -> str:
    """A signed number for a claim's evidence ("+0.039", "-0.012"), never "-0.000": a value that rounds to zero
    from below reads as zero."""
    return f"{round(value, digits) + 0.0:+.{digits}f}"


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log(y) against log(x): -1 when y falls as 1/x."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("loglog_slope needs two sequences of the same length >= 2")
    if any(v <= 0 for v in (*x, *y)):
        raise ValueError("loglog_slope needs positive values (a log of 0 or less is undefined)")
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        raise ValueError("loglog_slope needs at least two different x values")
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sxx


def share_of_increases(values: Sequence[float]) -> float:
    """Share of consecutive pairs where the value went up (0 for a smooth descent)."""
    if len(values) < 2:
        return 0.0
    ups = sum(1 for a, b in zip(values, values[1:], strict=False) if b > a)
    return ups / (len(values) - 1)


def saturates(x: Sequence[float], y: Sequence[float], min_total_gain: float = 1.5) -> tuple[bool, str]:
    """Does y grow with x (by ``min_total_gain`` overall) and grow less over the larger half of x than over the
    smaller half? Each half is a least-squares log-log slope, so one noisy point does not decide."""
    if len(x) < 3:
        raise ValueError("saturates needs at least three points")
    middle = len(x) // 2
    early, late = loglog_slope(x[: middle + 1], y[: middle + 1]), loglog_slope(x[middle:], y[middle:])
    total = y[-1] / y[0]
    holds = total >= min_total_gain and late < early
    evidence = (f"x{total:.1f} from {x[0]:g} to {x[-1]:g}; log-log slope {early:.2f} up to {x[middle]:g}, "
                f"{late:.2f} beyond")
    return holds, evidence


def time_to_target(times: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """The first time at which `values` reach `target` (None when they never do)."""
    for t, v in zip(times, values, strict=True):
        if v is not None and v >= target:
            return t
    return None
