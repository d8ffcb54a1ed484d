"""The course's on-disk list of submitted jobs: ``<course>/jobs/registry.jsonl``.

One JSON object per line, appended under an exclusive lock (several kernels may submit at once):
``{"event": "submitted", "job_id": ..., "name": ..., "folder": ..., ...}`` when a job is submitted and
``{"event": "state", "job_id": ..., "state": ...}`` when coursekit learns a final state. Later lines
update earlier ones. A submission record carries ``"lab"`` (its two-digit number, ``"00"``, ``"01"``...) when the kernel knows which
lab it is working on (``set_current_lab``, called by ``labs.lab_settings``): ``coursekit instructor room``
reads it; older records lack it. Records only: after a kernel restart, ``coursekit.jobs.handle.list_jobs()`` and
``get_job(id)`` build the handles back from them. Where the file lives: ``coursekit.course.CoursePaths``.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from coursekit.course import course_paths

EVENTS = ("submitted", "state")
_current_lab: str | None = None  # the lab this kernel works on, recorded with each job it submits


def set_current_lab(lab: str | None) -> None:
    """Note the lab (its two-digit number, ``"00"``, ``"01"``...) this kernel works on: the next submissions record it."""
    if lab is not None and not (isinstance(lab, str) and lab.isdigit() and len(lab) == 2):
        raise ValueError(f"lab={lab!r}: use a lab number such as '02'")
    global _current_lab
    _current_lab = lab


def current_lab() -> str | None:
    """The lab this kernel works on (``set_current_lab``), None when no lab said so."""
    return _current_lab


def registry_path() -> Path:
    """``<course>/jobs/registry.jsonl`` (``CoursePaths.registry``), whatever the site's log folder."""
    return course_paths().registry


def append(record: dict[str, Any], path: Path | None = None) -> None:
    """Append one record (one ``write`` under ``flock``: concurrent writers never interleave)."""
    if record.get("event") not in EVENTS:
        raise ValueError(f"registry event {record.get('event')!r}: use one of {EVENTS}")
    path = path or registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    append_line(path, (json.dumps(record, sort_keys=True) + "\n").encode())


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` in one ``write`` under an exclusive ``flock`` (the registry, lab 09's leaderboard)."""
    with open(path, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            os.write(handle.fileno(), line)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_records(path: Path | None = None, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every complete record, oldest first (a torn or foreign line is skipped, and named in ``problems``
    when a list is given; a line still being written, without its newline, is not a problem)."""
    path = path or registry_path()
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if problems is not None and line.endswith("\n"):
                    problems.append(f"line {number}: not a JSON record")
                continue
            if isinstance(record, dict) and record.get("job_id") is not None and record.get("event") in EVENTS:
                records.append(record)
            elif problems is not None:
                problems.append(f"line {number}: not a job record of coursekit")
    return records


def _key(record: dict[str, Any]) -> tuple[str, str]:
    return str(record.get("scheduler", "slurm")), str(record["job_id"])


def merged_records(path: Path | None = None, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """One dict per job (submission fields, then the latest known state), in submission order
    (``problems``: see ``read_records``)."""
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_records(path, problems):
        key = _key(record)
        if record["event"] == "submitted":
            jobs[key] = {k: v for k, v in record.items() if k != "event"}
        elif key in jobs and record.get("state"):
            jobs[key]["final_state"] = record["state"]
    return list(jobs.values())
