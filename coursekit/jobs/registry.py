"""The course's on-disk list of submitted jobs: ``<course>/jobs/registry.jsonl``.

One JSON object per line, appended under an exclusive lock (several kernels may submit at once):
``{"event": "submitted", "job_id": ..., "name": ..., "folder": ..., ...}`` when a job is submitted and
``{"event": "state", "job_id": ..., "state": ...}`` when coursekit learns a final state. Later lines
update earlier ones. Records only: after a kernel restart, ``coursekit.jobs.handle.list_jobs()`` and
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


def read_records(path: Path | None = None) -> list[dict[str, Any]]:
    """Every complete record, oldest first (a torn or foreign line is skipped)."""
    path = path or registry_path()
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("job_id") is not None:
                records.append(record)
    return records


def _key(record: dict[str, Any]) -> tuple[str, str]:
    return str(record.get("scheduler", "slurm")), str(record["job_id"])


def merged_records(path: Path | None = None) -> list[dict[str, Any]]:
    """One dict per job (submission fields, then the latest known state), in submission order."""
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_records(path):
        key = _key(record)
        if record["event"] == "submitted":
            jobs[key] = {k: v for k, v in record.items() if k != "event"}
        elif key in jobs and record.get("state"):
            jobs[key]["final_state"] = record["state"]
    return list(jobs.values())
