"""Claim checks: verdict lines, failures raise, and the small statistics they use."""

import math

import pytest

from coursekit.labs.kit import claims
from coursekit.metrics import mean_std


def test_claim_that_holds_prints_stable_line_and_numbers(capsys):
    result = claims.check_claim("variance falls as 1/B", True, "slope -0.98")
    out = capsys.readouterr().out.splitlines()
    assert out == ["CLAIM HOLDS: variance falls as 1/B", "    measured: slope -0.98"]
    assert result.holds is True


def test_claim_that_fails_raises(capsys):
    with pytest.raises(AssertionError, match="CLAIM DOES NOT HOLD: bigger is faster"):
        claims.check_claim("bigger is faster", False, "x0.9")
    assert "CLAIM DOES NOT HOLD" in capsys.readouterr().out


def test_non_strict_claim_that_fails_is_reported_as_not_seen(capsys):
    result = claims.check_claim("LAMB beats SGD", False, "-0.01", strict=False)
    assert result.holds is False
    assert capsys.readouterr().out.splitlines() == ["NOT SEEN ON THIS DATA: LAMB beats SGD", "    measured: -0.01"]
    claims.check_claim("LAMB beats SGD", True, "+0.01", strict=False)
    assert capsys.readouterr().out.startswith("CLAIM HOLDS: LAMB beats SGD")


def test_claim_not_applicable_is_reported_not_checked(capsys):
    result = claims.check_claim("tensor cores speed up bf16", False, "", applies=False, why_not="no GPU here")
    assert result.holds is None
    assert capsys.readouterr().out.startswith("NOT CHECKED HERE: tensor cores speed up bf16\n    why: no GPU here")


def test_loglog_slope_recovers_power_laws():
    xs = [1, 2, 4, 8, 16, 128]
    assert claims.loglog_slope(xs, [3.0 / x for x in xs]) == pytest.approx(-1.0)
    assert claims.loglog_slope(xs, [x**0.5 for x in xs]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive"):
        claims.loglog_slope([1, 2], [0.0, 1.0])
    with pytest.raises(ValueError, match="same length"):
        claims.loglog_slope([1, 2], [1.0])


def test_share_of_increases():
    assert claims.share_of_increases([5, 4, 3, 2]) == 0.0
    assert claims.share_of_increases([5, 6, 3, 4, 2]) == 0.5
    assert claims.share_of_increases([1]) == 0.0


def test_saturation_detects_flattening_growth_and_rejects_linear_growth():
    batch = [1, 4, 16, 64, 256]
    saturating = [100, 350, 800, 1000, 1050]
    holds, evidence = claims.saturates(batch, saturating)
    assert holds and "log-log slope" in evidence
    linear = [100 * b for b in batch]
    assert claims.saturates(batch, linear)[0] is False  # same slope at the end as at the start
    one_bad_point = [100, 350, 800, 700, 1050]  # a disturbed run in the large half does not flip the verdict
    assert claims.saturates(batch, one_bad_point)[0] is True
    assert claims.saturates(batch, [100, 101, 102, 103, 104])[0] is False  # no real growth


def test_time_to_target_and_mean_std():  # mean_std: coursekit.metrics, the one definition
    assert claims.time_to_target([1, 2, 3], [0.2, 0.6, 0.9], 0.5) == 2
    assert claims.time_to_target([1, 2], [0.2, 0.3], 0.5) is None
    mean, std = mean_std([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(std, 1.0)
    assert mean_std([4.0]) == (4.0, 0.0)
    assert mean_std([], empty=None) == (None, None)
    with pytest.raises(ValueError):
        mean_std([])


def test_a_share_that_rounds_to_zero_from_below_reads_as_zero_not_minus_zero() -> None:
    assert [claims.percent(x) for x in (-0.004, 0.0, 0.96, 1.08, -0.2)] == ["0%", "0%", "96%", "108%", "-20%"]
    assert [claims.percent(x, 1, sign=True) for x in (-0.0004, 0.011, -0.011)] == ["+0.0%", "+1.1%", "-1.1%"]
    assert [claims.signed(x) for x in (-0.0001, 0.0392, -0.0121)] == ["+0.000", "+0.039", "-0.012"]
