"""Lab 00's exit ticket: its questions come from the participant's own jobs, and a missing fact (a job id
that is not a number, an unexpected state, no accuracies) is asked but never stops the notebook."""

from __future__ import annotations

from pathlib import Path

from coursekit.labs.kit.ticket import NOT_ANSWERED, NOT_MEASURED, RIGHT, WRONG, ExitTicket
from coursekit.labs.lab00_cluster import array_minutes, repeat_note, sharing_note, ticket_questions

SWEEP = [{"lr": 0.01, "val_acc": 0.5}, {"lr": 0.05, "val_acc": 0.9}, {"lr": 0.2, "val_acc": None}]


def test_questions_come_from_the_jobs_and_are_graded() -> None:
    questions = ticket_questions("4711", "CANCELLED", SWEEP)
    assert questions["first_job_id"].grade(4711) == RIGHT and questions["first_job_id"].grade("4712") == WRONG
    assert questions["long_state"].grade("cancelled") == RIGHT and questions["long_state"].grade("COMPLETED") == WRONG
    assert questions["best_lr"].grade(0.05) == RIGHT and questions["best_lr"].grade(None) == NOT_ANSWERED
    # the transfer question: 12 one-GPU runs of 10 min, 4 GPUs at a time: 3 waves, 30 min (not 12 x 10, not 120 / 4 + 10)
    assert questions["array_minutes"].grade(30) == RIGHT and questions["array_minutes"].grade(120) == WRONG
    assert array_minutes(13, 10, 4) == 40 and array_minutes(4, 10, 4) == 10


def test_missing_facts_are_not_counted_and_unanswered_tickets_grade(tmp_path: Path) -> None:
    questions = ticket_questions("123_0", "VANISHED", [{"lr": 0.1, "val_acc": None}])
    assert all(q.measured is None for name, q in questions.items() if name != "array_minutes")
    assert questions["first_job_id"].grade(123) == NOT_MEASURED
    graded = ExitTicket("00", questions).grade({}, course=tmp_path, quiet=True)
    assert (graded.score, graded.total) == (0, 1)  # only the transfer question counts, unanswered


def test_the_repeated_job_reads_as_noise_from_its_own_gap() -> None:
    """The H200 run: the sweep's lr=0.1 job repeated the first job and ended 0.679 against 0.791."""
    note = repeat_note(0.791, 0.679, 0.1, on_gpu=True)
    assert "lr=0.1 job repeats the first job" in note and "0.112 apart" in note and "run-to-run noise" in note
    same = repeat_note(0.61, 0.61, 0.05, on_gpu=False)  # a CPU run that repeats exactly: no noise to call noise
    assert "0.000 apart" in same and "repeats exactly" in same and "run-to-run noise" not in same
    alike = repeat_note(0.791, 0.791, 0.1, on_gpu=True)  # a GPU pair that happened to end alike
    assert "ended alike; on a GPU they need not" in alike and "repeats exactly" not in alike


def test_the_shared_gpu_note_says_what_the_sum_shows() -> None:
    """The H200 run: 9,941 + 9,659 + 9,549 images/s at once against the first job's 13,269 alone."""
    assert "2.2× the first job's images/s: one small job does not fill" in sharing_note(13269, [9941, 9659, 9549])
    busy = sharing_note(13269, [4400, 4400, 4400])
    assert "1.0×" in busy and "not clearly more" in busy and "does not fill" not in busy
    assert "Together" not in sharing_note(13269, [9941, None, 9549])  # a failed job: no sum
