"""Lab 09's claims on planted board rows: each holds on rows shaped like the GPU run's and fails on a wrong one."""

from __future__ import annotations

from typing import Any

from coursekit.labs.lab09_race.claims import race_claims
from coursekit.labs.lab09_race.leaderboard import BASELINE

RIVAL_MARKS = ("breaks a rule: confirm_fraction = 0.9, the race fixes it to 0.5; validation set differs from the "
               "baseline's (500 samples, hash b vs 5000, a); 1 seed(s) posted, the rules ask for 3")


def row(participant: str, submission: str, time_s: float | None, std_s: float, counts: bool = True,
        marks: str = "", reached: int = 3, rank: int | None = 1) -> dict[str, Any]:
    return {"participant": participant, "submission": submission, "time_to_target_s": time_s, "std_s": std_s,
            "counts": counts, "marks": marks, "reached": reached, "rank": rank if counts else None,
            "confirm_acc": 0.886, "runs": []}


def board(ours: float = 16.0, ours_std: float = 1.4, base: float = 48.0, base_std: float = 6.0,
          rival_marks: str = RIVAL_MARKS) -> list[dict[str, Any]]:
    """Rows shaped like the GPU run's (recorded on Fashion-MNIST at 85 %: tuned 8.46 ± 0.71 s, baseline
    27.05 ± 4.33 s; at 88 % both about twice as long)."""
    return [row(BASELINE, "baseline", base, base_std, rank=2), row("ada", "tuned-1", ours, ours_std),
            row("ada-rival", "small-val", 3.0, 0.0, counts=False, marks=rival_marks, reached=0)]


def verdicts(rows: list[dict[str, Any]]) -> list[bool]:
    return [c["holds"] for c in race_claims(rows, "ada", "tuned-1", "ada-rival", 3, speed_applies=True)]


def test_every_claim_holds_on_rows_shaped_like_the_gpu_run() -> None:
    assert verdicts(board()) == [True, True, True, True]


def test_an_entry_within_the_seeds_spread_of_the_baseline_is_not_faster() -> None:
    # x1.14 faster, but 3 standard errors of ln(ratio) are 3 sqrt((6/48)^2/3 + (1.4/42)^2/3) = 0.224, x1.25
    assert verdicts(board(ours=42.0))[3] is False
    assert verdicts(board(ours=30.0))[3] is True  # x1.6: beyond the noise


def test_the_speed_claim_reads_a_ratio_so_a_slow_baseline_seed_does_not_hide_a_fourfold_speed_up() -> None:
    # the GPU run of 2026-11-30: baseline seeds 71.1, 24.5 and 48.8 s, the tuned entry's 9.98, 13.4 and 9.92 s;
    # 37 s faster is only 2.7 standard errors of the difference, x4.3 is 4.9 standard errors of the ratio
    claim = race_claims(board(ours=11.10, ours_std=1.99, base=48.13, base_std=23.34), "ada", "tuned-1",
                        "ada-rival", 3, speed_applies=True)[3]
    assert claim["holds"] is True and "×4.34 faster, 3 standard errors of the ratio = ×2.45" in claim["evidence"]
    # the same spread around a baseline only twice as slow: not resolved
    assert verdicts(board(ours=24.0, ours_std=4.3, base=48.13, base_std=23.34))[3] is False


def test_a_rival_without_the_validation_mark_or_ranked_fails_the_claim() -> None:
    assert verdicts(board(rival_marks="breaks a rule: confirm_fraction = 0.9, the race fixes it to 0.5"))[1] is False
    rows = board()
    rows[2].update(counts=True, rank=3)
    assert verdicts(rows)[1] is False
    assert verdicts(board()[:2])[1] is False  # no rival posted


def test_a_baseline_with_a_missed_seed_or_an_entry_that_does_not_count_fails() -> None:
    rows = board()
    rows[0].update(reached=2, counts=False, marks="seed(s) [1] did not reach the target 88.0%")
    assert verdicts(rows)[0] is False
    rows = board()
    rows[1].update(counts=False, marks="code hash x is not the kit's")
    assert verdicts(rows)[2] is False and verdicts(rows)[3] is False


def test_the_baseline_evidence_says_where_its_held_out_accuracy_would_be_marked_and_a_clean_entry_has_no_marks() -> None:
    rows = board()
    rows[0]["runs"] = [{"target_reached": True, "target_acc": 0.89, "confirm_acc": 0.885, "confirm_samples": 5000,
                        "val_samples": 5000, "seed": seed} for seed in range(3)]
    rows[1]["marks"] = "-"  # what the board writes for an entry that counts
    claims = race_claims(rows, "ada", "tuned-1", "ada-rival", 3, speed_applies=True)
    # 2 standard errors of the mean of 3 seeds, both halves' noise: 2 sqrt(0.89 0.11 (2/5000) / 3) = 0.72 points
    assert "held-out half 88.6% at the stops (target 89.0%; a mean under 88.3% would be marked as luck)" \
        in claims[0]["evidence"]
    assert claims[2]["evidence"] == "no marks"
