"""What the instructor's commands share: their exit statuses, an OSError in words, a CSV cell, a
file's owner."""

from __future__ import annotations

import pwd
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED = 0, 1
RESULT_DIGITS = 4  # significant digits of a float in the results CSV (and the room's)


def os_reason(error: OSError) -> str:
    """An OSError in words: the path it concerns and why ("/a/b: Not a directory")."""
    reason = error.strerror or str(error)
    if isinstance(error, FileExistsError):  # mkdir of a folder where a file stands
        reason = "a file is there, where a folder is needed"
    return f"{error.filename}: {reason}" if error.filename else reason


def csv_cell(value: Any) -> Any:
    """A CSV cell: floats to RESULT_DIGITS significant digits (0.8512, 1234.6), the rest as it is."""
    return float(f"{value:.{RESULT_DIGITS}g}") if isinstance(value, float) else value


def path_owner(path: Path) -> str:
    """The Unix user owning ``path`` ("" when unknown)."""
    try:
        return pwd.getpwuid(path.stat().st_uid).pw_name
    except (OSError, KeyError):
        return ""
