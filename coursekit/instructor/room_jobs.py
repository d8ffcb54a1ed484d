"""The room's jobs, read for ``coursekit instructor room`` (``room.py``): each participant's registry and job
folders and, on a Slurm site, one batched squeue + sacct; grouped per participant, those needing help first."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from coursekit import slurm_cli
from coursekit.course import (
    JOBS_SUBDIR,
    REGISTRY_FILE,
)
from coursekit.instructor.common import path_owner
from coursekit.instructor.jobs import course_jobs
from coursekit.instructor.results import participant_of
from coursekit.jobs.logs import job_logs, job_output, looks_like_job_id
from coursekit.sites import load_site

FAILED_STATES = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
STDERR_LINES = 5  # the last lines of a failed job's stderr shown by default
TAIL_SCAN_FACTOR = 4  # read this many times the lines wanted: submitit's and srun's own lines are dropped


@dataclass
class RoomJob:
    """One job of the room, as the registry, its folder and the scheduler tell it."""

    job_id: str
    name: str
    pseudonym: str
    state: str
    submitted_at: float | None = None
    lab: str | None = None
    folder: Path | None = None
    user: str = ""
    ended_at: float | None = None
    record: dict[str, Any] | None = None  # its registry record (None: found by its folder or by Slurm)


@dataclass
class Participant:
    """One participant of the room: their jobs and the course folders they were read from (where later
    columns, such as exit tickets, find their files)."""

    pseudonym: str
    users: set[str] = field(default_factory=set)
    jobs: list[RoomJob] = field(default_factory=list)
    course_folders: set[Path] = field(default_factory=set)

    def ordered(self) -> list[RoomJob]:
        return sorted(self.jobs, key=lambda j: (j.submitted_at or 0.0, _id_key(j.job_id)))

    @property
    def lab(self) -> str:
        """The latest lab they submitted a job for ("" when no job recorded its lab)."""
        labs = [j.lab for j in self.ordered() if j.lab]
        return labs[-1] if labs else ""

    @property
    def failures(self) -> list[RoomJob]:
        return [j for j in self.ordered() if j.state in FAILED_STATES]

    @property
    def needs_help(self) -> bool:
        """Their latest job (cancelled ones aside) failed: they have not got past it yet."""
        kept = [j for j in self.ordered() if j.state != "CANCELLED"]
        return bool(kept) and kept[-1].state in FAILED_STATES

    @property
    def last_activity(self) -> float | None:
        stamps = [t for j in self.jobs for t in (j.submitted_at, j.ended_at) if t is not None]
        return max(stamps, default=None)


@dataclass
class Room:
    """The room: one ``Participant`` per pseudonym, and what could not be read (each said once)."""

    participants: list[Participant]
    warnings: list[str]
    stderr_lines: int = STDERR_LINES


def _id_key(job_id: str) -> list[int]:
    return [int(p) if p.isdigit() else 0 for p in job_id.split("_")]


def _jobs_root(given: Path) -> Path:
    """A participant's jobs folder from what ``--jobs-dir`` gave: the jobs folder or the course folder."""
    if not (given / REGISTRY_FILE).exists() and (given / JOBS_SUBDIR).is_dir():
        return given / JOBS_SUBDIR
    return given


def _pseudonym(name: str, prefix: str) -> str | None:
    """The pseudonym in ``<prefix>-<pseudonym>-<experiment>``; None for another course's or a malformed name."""
    from coursekit.labs.kit.participant import check_pseudonym

    if not name.startswith(prefix + "-"):
        return None
    who, _ = participant_of(name, prefix)
    try:
        return check_pseudonym(who)
    except ValueError:
        return None


def _timestamp(text: str) -> float | None:
    """Slurm's ``2026-11-27T06:30:00`` (local time) -> seconds since the epoch; None when absent."""
    try:
        return datetime.fromisoformat(text).timestamp() if text and text[:1].isdigit() else None
    except ValueError:
        return None


def _read_root(root: Path, prefix: str, warnings: list[str]) -> list[RoomJob]:
    """The jobs one participant's jobs folder holds: its registry's, then job folders it does not list."""
    from coursekit.jobs import registry

    try:
        with os.scandir(root) as entries:
            names = [e for e in entries if e.is_dir()]
    except FileNotFoundError:
        warnings.append(f"{root}: no such folder (check --jobs-dir)")
        return []
    except OSError as error:
        warnings.append(f"{root}: cannot read it ({error.strerror or error}); its jobs are not shown")
        return []
    jobs, problems, foreign = [], [], 0
    path = root / REGISTRY_FILE
    try:
        records = registry.merged_records(path, problems)
    except OSError as error:
        warnings.append(f"{path}: cannot read it ({error.strerror or error}); its jobs are not shown")
        records = []
    owner = path_owner(path)
    for record in records:
        name, job_id = record.get("name"), str(record["job_id"])
        if not isinstance(name, str) or not looks_like_job_id(job_id):
            problems.append(f"job {job_id!r}: no valid name or id")
            continue
        who = _pseudonym(name, prefix)
        if who is None:
            foreign += 1
            continue
        submitted = record.get("submitted_at")
        lab = record.get("lab")
        jobs.append(RoomJob(job_id, name, who, str(record.get("final_state") or ""),
                            float(submitted) if isinstance(submitted, (int, float)) else None,
                            lab if isinstance(lab, str) else None,
                            Path(record["folder"]) if isinstance(record.get("folder"), str) else None, owner,
                            record=record))
    if problems:
        warnings.append(f"{path}: {len(problems)} malformed record(s) skipped ({'; '.join(problems[:3])}"
                        f"{'; ...' if len(problems) > 3 else ''})")
    if foreign:
        warnings.append(f"{path}: {foreign} job(s) not named {prefix}-<pseudonym>-<experiment> (another "
                        "course's) skipped")
    known = {(j.name, j.job_id) for j in jobs}
    bad_folders = []
    for entry in sorted(names, key=lambda e: e.name):
        who = _pseudonym(entry.name, prefix)
        if who is None:
            continue
        try:
            with os.scandir(entry.path) as inner:
                folders = sorted(e.name for e in inner if e.is_dir())
        except OSError as error:
            warnings.append(f"{entry.path}: cannot read it ({error.strerror or error})")
            continue
        for job_id in folders:
            if not looks_like_job_id(job_id):
                bad_folders.append(f"{entry.name}/{job_id}")
            elif (entry.name, job_id) not in known:
                folder = Path(entry.path) / job_id
                with contextlib.suppress(OSError):  # gone since it was listed: nothing to show
                    jobs.append(RoomJob(job_id, entry.name, who, "", folder.stat().st_mtime, None, folder,
                                        path_owner(folder)))
    if bad_folders:
        warnings.append(f"{root}: {len(bad_folders)} folder(s) that are not job folders skipped "
                        f"({', '.join(bad_folders[:3])}{', ...' if len(bad_folders) > 3 else ''})")
    return jobs


def _settle_states(jobs: list[RoomJob], slurm_rows: dict[str, dict[str, str]]) -> None:
    """Each job's state: the scheduler's (the room's one batched query), else the registry's final state,
    else what its folder tells; and when it last showed activity (its logs' modification time)."""
    from coursekit.jobs.handle import Job

    for job in jobs:
        row = slurm_rows.get(job.job_id)
        if row is not None and row["name"] == job.name:  # a local job's id (a pid) may be a Slurm job's too
            job.state = row["state"]
            job.ended_at = _timestamp(row.get("end_time", ""))
            job.user = job.user or row.get("user", "")
        elif not job.state and job.folder is not None:
            try:
                handle = Job.from_record(job.record) if job.record is not None else Job.from_folder(job.folder)
                if handle.scheduler == "local":  # the backend, not Job.state: nothing is written anywhere
                    job.state = handle.backend.state()
                else:  # Slurm's job, not in the room's query: what its folder tells
                    job.state = handle.state_from_disk() or "UNKNOWN"
            except (OSError, TypeError, ValueError, KeyError):  # a record with fields of the wrong type
                job.state = "UNKNOWN"
        job.state = job.state or "UNKNOWN"
        if job.folder is not None:
            stamps = []
            for stream in ("out", "err"):
                for log in job_logs(job.folder, stream)[:1]:
                    with contextlib.suppress(OSError):
                        stamps.append(log.stat().st_mtime)
            if stamps:
                job.ended_at = max(stamps + [job.ended_at or 0.0])


def last_stderr(job: RoomJob, n: int = STDERR_LINES) -> list[str]:
    """The job's own last ``n`` stderr lines (submitit's and srun's notes left out): the first task whose log
    holds some, task 0 first."""
    from coursekit.jobs.handle import tail_lines

    if job.folder is None:
        return []
    for log in job_logs(job.folder, "err"):
        try:
            lines = job_output(tail_lines(log, n * TAIL_SCAN_FACTOR))
        except OSError:
            continue
        lines = [line.rstrip() for line in lines if line.strip()]
        if lines:
            return lines[-n:]
    return []


def gather_room(roots: list[Path], prefix: str, *, slurm: bool | None = None,
                stderr_lines: int = STDERR_LINES) -> Room:
    """The room from participants' jobs folders (or course folders) ``roots`` and, on a Slurm site, ONE
    batched squeue + sacct of the course's jobs (``course_jobs``): Slurm's states, and jobs whose folders
    the instructor cannot read."""
    if isinstance(stderr_lines, bool) or not isinstance(stderr_lines, int) or stderr_lines < 0:
        raise ValueError(f"stderr_lines={stderr_lines!r}: give a number of lines, 0 or more")
    from coursekit.labs.kit.participant import check_pseudonym

    check_pseudonym(prefix, what="prefix")
    warnings: list[str] = []
    jobs: list[RoomJob] = []
    folders: dict[int, Path] = {}
    seen: set[tuple[str, str]] = set()
    for root in dict.fromkeys(_jobs_root(Path(r).expanduser()) for r in roots):
        for job in _read_root(root, prefix, warnings):
            if (job.name, job.job_id) not in seen:  # a job listed by two roots counts once
                seen.add((job.name, job.job_id))
                folders[id(job)] = root.parent if root.name == JOBS_SUBDIR else root
                jobs.append(job)
    on_slurm = (not load_site().is_local) if slurm is None else slurm
    slurm_rows: dict[str, dict[str, str]] = {}
    if on_slurm:
        try:
            slurm_rows = {r["job_id"]: r for r in course_jobs(prefix, finished=True, notes=warnings)}
        except slurm_cli.SlurmError as error:
            warnings.append(f"Slurm did not answer ({error.message}): states are the registries' and the logs'")
        known = {j.job_id for j in jobs}
        for job_id, row in slurm_rows.items():
            who = _pseudonym(row["name"], prefix)
            if job_id not in known and who is not None:
                jobs.append(RoomJob(job_id, row["name"], who, "", _timestamp(row.get("submit_time", "")),
                                    user=row.get("user", "")))
    _settle_states(jobs, slurm_rows)
    people: dict[str, Participant] = {}
    for job in jobs:
        person = people.setdefault(job.pseudonym, Participant(job.pseudonym))
        person.jobs.append(job)
        if job.user:
            person.users.add(job.user)
        if id(job) in folders:
            person.course_folders.add(folders[id(job)])
    return Room(sorted(people.values(), key=_help_first), warnings, stderr_lines)


def _help_first(person: Participant) -> tuple[Any, ...]:
    """Who needs help first: latest job failed, then most failures, then behind in the labs, then idle longest."""
    return (not person.needs_help, -len(person.failures), person.lab or "99", person.last_activity or 0.0,
            person.pseudonym)
