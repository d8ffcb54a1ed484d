"""Lab 00's exit ticket: its questions come from the participant's own jobs, and a missing fact (a job id
that is not a number, an unexpected state, no accuracies) is asked but never stops the notebook."""

from __future__ import annotations

from pathlib import Path

from coursekit.labs.kit.ticket import NOT_ANSWERED, NOT_MEASURED, RIGHT, WRONG, ExitTicket
from coursekit.labs.lab00_cluster import array_minutes, ticket_questions

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
