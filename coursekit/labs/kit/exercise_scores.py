"""A lab's exercise done in the notebook (lab 10's clinic: four jobs diagnosed), kept for the instructor: this
user's latest score in ``<course>/exercises/<lab>/<user>.json``, written like an exit ticket's (``ticket``), read by
the room's exercises column (``ticket.room_scores(..., kind=EXERCISES_SUBDIR)``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coursekit.labs.kit.ticket import check_lab, own_record_path, save_own_record

EXERCISES_SUBDIR = "exercises"  # <course>/exercises/<lab>/<user>.json: score, total, detail


def save_exercise_score(lab: str, score: int, total: int, detail: Mapping[str, Any],
                        course: Path | None = None) -> str | None:
    """Save this user's score in ``lab``'s in-notebook exercise (``detail``: what was answered, per item) for
    the instructor's room; None when saved, else why not, in words (the exercise goes on either way)."""
    from coursekit.labs.kit.participant import choose_pseudonym

    try:
        pseudonym = choose_pseudonym()
    except ValueError:
        pseudonym = ""
    record = {"lab": check_lab(lab), "pseudonym": pseudonym, "saved_at": time.time(), "score": int(score),
              "total": int(total), "detail": dict(detail)}
    try:
        save_own_record(own_record_path(EXERCISES_SUBDIR, lab, course), record)
    except OSError as error:
        return f"your answers could not be saved for the instructor ({error})"
    return None
