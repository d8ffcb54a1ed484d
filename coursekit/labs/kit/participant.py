"""The participant's pseudonym: short, safe in job names, shown in the queue and on shared plots."""

from __future__ import annotations

import re

PSEUDONYM_MAX_CHARS = 5
PSEUDONYM_PATTERN = re.compile(r"[a-z][a-z0-9]*")


def choose_pseudonym(pseudonym: str) -> str:
    """Check a pseudonym (1 to 5 lower-case letters or digits, starting with a letter) and return it."""
    if not isinstance(pseudonym, str):
        raise ValueError(f"pseudonym must be a string, got {type(pseudonym).__name__}")
    if not pseudonym:
        raise ValueError("pseudonym is empty: choose 1 to 5 lower-case letters or digits, e.g. 'ada'")
    if len(pseudonym) > PSEUDONYM_MAX_CHARS:
        raise ValueError(f"pseudonym {pseudonym!r} has {len(pseudonym)} characters: use at most "
                         f"{PSEUDONYM_MAX_CHARS} (it prefixes every job name in the shared queue)")
    if not PSEUDONYM_PATTERN.fullmatch(pseudonym):
        raise ValueError(f"pseudonym {pseudonym!r} may hold only lower-case letters a-z and digits, "
                         "starting with a letter (no spaces, dashes or accents), e.g. 'ada' or 'kim42'")
    return pseudonym


def job_name(pseudonym: str, experiment: str) -> str:
    """The job name of one experiment of one participant: ``<pseudonym>-<experiment>``, behind the course's
    ``job_prefix`` when its coursekit.toml sets one (``coursekit instructor jobs`` finds the room's jobs by it)."""
    from coursekit.course import course_setting

    prefix = course_setting("job_prefix")
    return f"{prefix + '-' if prefix else ''}{choose_pseudonym(pseudonym)}-{experiment}"
