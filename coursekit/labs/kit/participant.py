"""The participant's pseudonym: short, safe in job names, shown in the queue and on shared plots.

Chosen once, in lab 00 (``labs.choose_pseudonym("kim")``), it is remembered for this Unix user and is the
default of every later lab (``labs.choose_pseudonym()``): argument > ``$COURSEKIT_PSEUDONYM`` > remembered >
one made from the login name, so that two participants of a hub never share one by forgetting to choose.
"""

from __future__ import annotations

import getpass
import os
import re
from pathlib import Path

PSEUDONYM_MAX_CHARS = 5
PSEUDONYM_PATTERN = re.compile(r"[a-z][a-z0-9]*")
PSEUDONYM_ENV = "COURSEKIT_PSEUDONYM"
REMEMBERED_FILE = "coursekit/pseudonym"  # under $XDG_CONFIG_HOME (default ~/.config): one per Unix user
LOGIN_HEAD, LOGIN_TAIL = 2, 3  # a long login name keeps its first 2 and last 3 characters: student07 -> stt07
FALLBACK_PREFIX = "p"


def check_pseudonym(pseudonym: str, what: str = "pseudonym") -> str:
    """Check a name (1 to 5 lower-case letters or digits, starting with a letter) and return it; errors
    call it ``what`` (e.g. ``job_prefix``)."""
    if not isinstance(pseudonym, str):
        raise ValueError(f"{what} must be a string, got {type(pseudonym).__name__}")
    if not pseudonym:
        raise ValueError(f"{what} is empty: choose 1 to 5 lower-case letters or digits, e.g. 'ada'")
    if len(pseudonym) > PSEUDONYM_MAX_CHARS:
        raise ValueError(f"{what} {pseudonym!r} has {len(pseudonym)} characters: use at most "
                         f"{PSEUDONYM_MAX_CHARS} (it prefixes every job name in the shared queue)")
    if not PSEUDONYM_PATTERN.fullmatch(pseudonym):
        raise ValueError(f"{what} {pseudonym!r} may hold only lower-case letters a-z and digits, "
                         "starting with a letter (no spaces, dashes or accents), e.g. 'ada' or 'kim42'")
    return pseudonym


def remembered_path() -> Path:
    """Where this Unix user's chosen pseudonym is kept."""
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / REMEMBERED_FILE


def from_login(login: str | None = None) -> str:
    """A valid pseudonym made from a login name: lower-case letters and digits, at most 5 of them."""
    name = re.sub(r"[^a-z0-9]", "", (login if login is not None else getpass.getuser()).lower())
    name = name.lstrip("0123456789")
    if len(name) > PSEUDONYM_MAX_CHARS:
        name = name[:LOGIN_HEAD] + name[-LOGIN_TAIL:]
    return name or f"{FALLBACK_PREFIX}{os.getuid() % 10_000}"


def _remembered() -> str | None:
    try:
        text = remembered_path().read_text().strip()
        return check_pseudonym(text)
    except (OSError, ValueError):
        return None


def choose_pseudonym(pseudonym: str | None = None) -> str:
    """Your pseudonym. Given: checked and remembered as the default of the next labs. Not given:
    ``$COURSEKIT_PSEUDONYM``, else the one remembered, else one made from your login name."""
    if pseudonym is not None:
        check_pseudonym(pseudonym)
        if _remembered() != pseudonym and not os.environ.get(PSEUDONYM_ENV):
            try:
                path = remembered_path()
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(pseudonym + "\n")
            except OSError:
                pass  # a read-only home: the pseudonym still holds for this notebook
        return pseudonym
    chosen = os.environ.get(PSEUDONYM_ENV)
    if chosen:
        return check_pseudonym(chosen, what=f"${PSEUDONYM_ENV}")
    return _remembered() or from_login()


def job_name(pseudonym: str, experiment: str) -> str:
    """The job name of one experiment of one participant: ``<pseudonym>-<experiment>``, behind the course's
    ``job_prefix`` when its coursekit.toml sets one (``coursekit instructor jobs`` finds the room's jobs by it)."""
    from coursekit.course import course_setting

    prefix = course_setting("job_prefix")
    return f"{prefix + '-' if prefix else ''}{check_pseudonym(pseudonym)}-{experiment}"
