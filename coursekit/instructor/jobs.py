"""``coursekit instructor jobs | cancel``: the course's jobs, found by its job prefix (Slurm's, every user's; on
the local site the course's registry), listed or cancelled."""

from __future__ import annotations

import getpass
import pwd
from pathlib import Path

from coursekit import slurm_cli
from coursekit.course import (
    COURSE_CONFIG_FILE,
    COURSE_DIR_ENV,
    course_dir,
    course_setting,
)
from coursekit.sites import load_site

JOB_FIELDS = ("job_id", "name", "user", "state", "elapsed", "node_list")


def job_prefix(explicit: str | None) -> str:
    prefix = explicit or course_setting("job_prefix")
    if not prefix:
        raise ValueError(f"no job prefix: {course_dir()} is not a course folder with a job_prefix. Run this from the "
                         f"course folder (the one `coursekit instructor setup` wrote {COURSE_CONFIG_FILE} into), set "
                         f"{COURSE_DIR_ENV} to it, or give --prefix")
    return prefix


NO_ACCOUNTING_NOTE = ("Slurm accounting (sacct) does not answer on this cluster: finished jobs are shown only while "
                      "squeue still lists them (minutes); ask the cluster's admins to enable slurmdbd for the rest")


def course_jobs(prefix: str, finished: bool, notes: list[str] | None = None) -> list[dict[str, str]]:
    """The course's jobs: Slurm's (every user's, by name prefix) on a Slurm site, else the course registry's.
    What could not be asked (no accounting: sacct) is appended to ``notes`` when a list is given."""
    start = prefix + "-"
    if load_site().is_local:
        from coursekit.jobs.handle import list_jobs

        rows = [{"job_id": j.job_id, "name": j.name, "user": _folder_owner(j.folder), "state": j.state,
                 "elapsed": _clock(j.elapsed), "node_list": "local"} for j in list_jobs() if j.name.startswith(start)]
        return [r for r in rows if finished or not _ended(r["state"])]
    rows = [r for r in slurm_cli.squeue(all_states=finished) if r["name"].startswith(start)]
    if finished and slurm_cli.accounting_enabled():
        seen = {r["job_id"] for r in rows}
        fields = (*slurm_cli.SACCT_FIELDS, "User")  # the submitter, last: the rest is parse_sacct's
        text = slurm_cli.run(["sacct", "-a", "-n", "-P", "-X", "-S", "now-7days", "-o", ",".join(fields)])
        for line in text.splitlines():
            head, _, user = line.rpartition(slurm_cli.FIELD_SEPARATOR)
            rows += [{**r, "user": user.strip()} for r in slurm_cli.parse_sacct(head)
                     if r["name"].startswith(start) and r["job_id"] not in seen]
    elif finished and notes is not None:
        notes.append(NO_ACCOUNTING_NOTE)
    return sorted(rows, key=lambda r: [int(p) if p.isdigit() else 0 for p in r["job_id"].split("_")])


def _folder_owner(folder: Path) -> str:
    """The Unix user who owns a local job's folder (who submitted it)."""
    try:
        return pwd.getpwuid(Path(folder).stat().st_uid).pw_name
    except (OSError, KeyError):
        return getpass.getuser()


def _clock(seconds: float | None) -> str:
    """Seconds as Slurm's elapsed time, ``H:MM:SS`` (empty before the job starts)."""
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def _ended(state: str) -> bool:
    return slurm_cli.is_terminal(state)


def print_jobs(rows: list[dict[str, str]], prefix: str) -> None:
    table = [JOB_FIELDS] + [tuple(str(r.get(f, "")) for f in JOB_FIELDS) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(JOB_FIELDS))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"{len(rows)} job(s) of course prefix {prefix!r}")


def cancel_course(prefix: str) -> list[str]:
    """Cancel every active job of the course; their ids."""
    active = [r for r in course_jobs(prefix, finished=False) if not _ended(r["state"])]
    ids = [r["job_id"] for r in active]
    if load_site().is_local:
        from coursekit.jobs.handle import get_job

        for job_id in ids:
            get_job(job_id).cancel()
    else:
        slurm_cli.scancel(ids)
    return ids
