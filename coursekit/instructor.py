"""``coursekit instructor ...``: set up a course, stage its data once, follow and clean up the room's jobs.

    coursekit instructor setup COURSE_DIR [--site S] [--account A] [--data-dir D] [--leaderboard F] [--pools D] [--job-prefix P]
                                   [--participants GLOB]
    coursekit instructor data cifar10 --dir D      download + verify CIFAR-10 once for everyone (login node)
    coursekit instructor data jpeg --dir D         lab 05's synthetic JPEG tree, written once in a shared folder
    coursekit instructor data fashion-mnist --dir D  copy + verify Debian's Fashion-MNIST (no internet needed)
    coursekit instructor jobs [--all]              every participant's jobs of this course (by its job prefix)
    coursekit instructor cancel --course           cancel every active job of this course
    coursekit instructor results [--out F.csv]     each participant's lab results in one CSV table
    coursekit instructor room [--csv F.csv]        who is at which lab, whose jobs failed and why, exit tickets
    coursekit instructor race verify [--top N]     lab 09: re-run the top entries as the instructor, the verified board
    coursekit instructor race clear                lab 09: end a round (its runs and claims moved to archive/)

The course's job prefix (``job_prefix`` in its coursekit.toml) starts every job name of its participants
(``<prefix>-<pseudonym>-<experiment>``, ``labs.job_name``): on a cluster the instructor finds the room's
jobs in Slurm by it. On the local site (no Slurm) the course's own job registry is read instead. Where each participant has a course
folder of their own (a hub: ``~/course``), the course's ``participants`` setting (a glob, e.g. ``/home/*/course``)
is where ``results`` and ``room`` read their job folders by default.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import getpass
import glob
import json
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from coursekit import slurm_cli
from coursekit.course import (
    COURSE_CONFIG_FILE,
    COURSE_DIR_ENV,
    JOBS_SUBDIR,
    REGISTRY_FILE,
    course_dir,
    course_setting,
)
from coursekit.jobs.logs import job_logs, job_output, looks_like_job_id
from coursekit.sites import load_site, site_jobs_dir

REPO_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PARTICIPANT_NOTEBOOKS = "notebooks"
DEFAULT_RESULTS = "results.csv"
RESULT_FIELDS = ("participant", "user", "experiment", "job_name", "job_id", "status", "model", "dataset", "batch_size",
                 "precision", "world_size", "steps", "val_acc", "images_per_s", "total_time_s", "time_to_target_s",
                 "device_name", "run_dir")
JOB_FIELDS = ("job_id", "name", "user", "state", "elapsed", "node_list")
RESULT_DIGITS = 4  # significant digits of a float in the results CSV
EXIT_OK, EXIT_FAILED = 0, 1


# ------------------------------------------------------------------------------------------ setup


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quotes, backslashes and control characters escaped)."""
    return json.dumps(value)  # JSON's string escapes are TOML's for basic strings


def course_toml(site: str, account: str | None, data_dir: str, leaderboard: str, job_prefix: str,
                profile: str | None, pools: str | None = None, instructor: str | None = None,
                participants: str | None = None) -> str:
    """The course's coursekit.toml."""
    q = toml_string
    lines = ["# written by `coursekit instructor setup`; every participant's notebook reads it",
             f"site = {q(site)}", f"data_dir = {q(data_dir)}          # CIFAR-10 and lab 05's JPEG tree, shared",
             f"leaderboard = {q(leaderboard)}    # lab 09's race: its folder holds one runs file per user",
             f"job_prefix = {q(job_prefix)}          # starts every job name: `coursekit instructor jobs` finds them"]
    if instructor:
        lines.append(f"instructor = {q(instructor)}          # the instructor's Unix user: lab 09's baseline is theirs only")
    if pools:
        lines.append(f"pools = {q(pools)}          # the room's pooled results (lab 06's team sweeps), one file per user")
    if participants:
        lines.append(f"participants = {q(participants)}          # each participant's course folder: "
                     "`coursekit instructor results` and `room` read their jobs")
    if profile:
        lines.append(f"profile = {q(profile)}")
    if account:
        lines += ["", "[site_defaults]", f"account = {q(account)}"]
    return "\n".join(lines) + "\n"


def setup(folder: Path, site: str, account: str | None, data_dir: str | None, leaderboard: str | None,
          job_prefix: str, profile: str | None, doctor: bool, force: bool, pools: str | None = None,
          instructor: str | None = None, participants: str | None = None) -> int:
    from coursekit.labs.kit.exercises import strip_folder
    from coursekit.labs.kit.participant import check_pseudonym
    from coursekit.labs.kit.pool import make_shared_folder

    check_pseudonym(job_prefix, what="job_prefix")  # the same rules: short, safe in a job name
    teacher = instructor or getpass.getuser()
    try:
        pwd.getpwnam(teacher)
    except KeyError as error:
        raise ValueError(f"--instructor {teacher}: no such Unix user here; give the instructor's login") from error
    folder = folder.expanduser().resolve()
    config = folder / COURSE_CONFIG_FILE
    if config.exists() and not force:
        raise ValueError(f"{config} exists: give --force to overwrite it, or choose another COURSE_DIR")
    folder.mkdir(parents=True, exist_ok=True)
    data = data_dir or str(folder / "data")
    board = leaderboard or str(folder / "race" / "leaderboard.jsonl")
    shared_pools = pools or str(folder / "pools")
    config.write_text(course_toml(site, account, data, board, job_prefix, profile, shared_pools, teacher, participants))
    make_shared_folder(Path(board).parent)  # 1777, this user's: the instructor clears a round without root
    make_shared_folder(Path(shared_pools))  # 1777 where this setup creates it
    reports = strip_folder(REPO_NOTEBOOKS, folder / PARTICIPANT_NOTEBOOKS) if REPO_NOTEBOOKS.is_dir() else None
    print(f"wrote {config}")
    if reports is None:
        print(f"coursekit instructor setup: error: the kit's notebooks are not in {REPO_NOTEBOOKS} (coursekit installed "
              "without its repository): no participant notebooks written; run setup from a clone of the repository "
              "(pip install -e .)", file=sys.stderr)
        return EXIT_FAILED
    print(f"participants' notebooks (no solutions): {len(reports)} files in {folder / PARTICIPANT_NOTEBOOKS}")
    print(f"data folder: {data} (stage it: coursekit instructor data cifar10 --dir {data}; "
          f"coursekit instructor data jpeg --dir {data}; offline: coursekit instructor data fashion-mnist --dir {data})")
    print(f"leaderboard: {board} (each participant posts to their own file in its folder, mode 1777; the folder must "
          f"be the instructor's ({teacher}), who clears a round with `coursekit instructor race clear`)")
    print(f"pooled results: {shared_pools} (lab 06's team sweeps; every participant must be able to create "
          "files in it: chmod 1777)")
    if participants:
        print(f"participants' course folders: {participants} (`coursekit instructor results` and `room` read their "
              "jobs; the instructor must be able to read them)")
    if not doctor:
        return EXIT_OK
    from coursekit.doctor import doctor as run_doctor

    os.environ[COURSE_DIR_ENV] = str(folder)
    return EXIT_OK if run_doctor(site) else EXIT_FAILED


# ------------------------------------------------------------------------------------------ data


def data_cifar10(folder: Path) -> int:
    """Download CIFAR-10 once (torchvision checks each archive's MD5) and verify the extracted batches."""
    from coursekit.labs.kit import datasets

    if not datasets.cifar10_present(folder):
        try:
            datasets.stage_cifar10(folder)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"--dir {folder}: could not download CIFAR-10 ({error}); run this on a login node "
                             "with internet access") from error
    problems = verify_cifar10(folder)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"CIFAR-10 in {folder / datasets.CIFAR10_FOLDER}: " + ("verified" if not problems else "NOT valid"))
    return EXIT_FAILED if problems else EXIT_OK


def verify_cifar10(folder: Path) -> list[str]:
    """Every batch file present with torchvision's MD5 (empty: all is well)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    base = Path(folder) / CIFAR10.base_folder
    return [f"{base / name}: missing or corrupt (MD5 differs)" for name, md5 in CIFAR10.train_list + CIFAR10.test_list
            if not check_integrity(str(base / name), md5)]


def data_fashion_mnist(folder: Path, source: Path | None = None) -> int:
    """Copy Debian's Fashion-MNIST (package dataset-fashion-mnist, or ``source``) to ``folder/fashion-mnist/``,
    each file verified by the MD5 of its uncompressed bytes; intact files already there are kept."""
    from coursekit.train.data import fashion_mnist

    staged = fashion_mnist.stage(folder, source)
    what = (f"copied {len(staged.copied)} of its 4 files from {staged.source}" if staged.copied
            else "already staged, its 4 files intact")
    print(f"Fashion-MNIST in {staged.folder}: {what} ({staged.bytes / 1e6:.1f} MB, MD5s verified); "
          f"train with --dataset fashion-mnist --data-dir {Path(folder).expanduser()}")
    return EXIT_OK


def data_jpeg(folder: Path, profile: str, workers: int) -> int:
    """Lab 05's JPEG tree (its ``profile`` settings), written once in ``folder`` under the name lab 05 looks for."""
    from coursekit.labs import lab_settings
    from coursekit.labs.lab05_data_loading import jpeg_tree_name
    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    s = lab_settings("05", profile)
    root = Path(folder).expanduser() / jpeg_tree_name(s.jpeg_classes, s.jpeg_images_per_class, s.jpeg_size)
    done = root / ".complete"
    if done.exists():
        print(f"lab 05's JPEG tree is already in {root}")
        return EXIT_OK
    info = write_synthetic_jpeg_tree(root, s.jpeg_classes, s.jpeg_images_per_class, size=tuple(s.jpeg_size),
                                     workers=workers)
    done.write_text("written by coursekit instructor data jpeg\n")
    print(f"lab 05's JPEG tree ({profile} profile) in {root}: {info['images']:,} images, "
          f"{info['bytes'] / 1e6:.1f} MB, written in {info['seconds']:.0f} s")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ jobs


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


# ------------------------------------------------------------------------------------------ results


def participant_of(job_name: str, prefix: str | None) -> tuple[str, str]:
    """``<prefix>-<pseudonym>-<experiment>`` -> (pseudonym, experiment)."""
    name = job_name[len(prefix) + 1:] if prefix and job_name.startswith(prefix + "-") else job_name
    who, _, experiment = name.partition("-")
    return who, experiment


def gather_results(roots: list[Path], prefix: str | None, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per finished run under the job folders ``<root>/<job name>/<job id>/metrics.jsonl``. A folder or
    file that cannot be read is left out and said in ``warnings`` (when a list is given; else it raises)."""
    from coursekit.metrics import read_metrics, summary

    rows = []
    for root in roots:
        if warnings is not None:
            try:
                with os.scandir(root):
                    pass
            except FileNotFoundError:
                warnings.append(f"{root}: no such folder; no run read from it")
                continue
            except OSError as error:
                warnings.append(f"{root}: cannot read it ({error.strerror or error}); its runs are not in the table")
                continue
        found = [*Path(root).glob("*/*/metrics.jsonl"), *Path(root).glob(f"*/*/{SWEEP_RUN_GLOB}/metrics.jsonl")]
        for path in sorted(found):
            job_folder = path.parent if path.parent.parent.parent == Path(root) else path.parent.parent
            job_name, job_id = job_folder.parent.name, job_folder.name
            if prefix and not job_name.startswith(prefix + "-"):
                continue
            try:
                records = read_metrics(path.parent)
            except OSError as error:
                if warnings is None:
                    raise
                warnings.append(f"{path}: cannot read it ({error.strerror or error}); that run is not in the table "
                                "(run this as a user who can read the participants' job folders)")
                continue
            final = summary(records) or {}
            if not final:
                continue
            config = final.get("config") or {}
            who, experiment = participant_of(job_name, prefix)
            row = {"participant": who, "user": _owner(path), "experiment": experiment, "job_name": job_name,
                   "job_id": job_id,
                   **{k: final.get(k) for k in RESULT_FIELDS if k in final},
                   **{k: config.get(k) for k in ("model", "dataset", "batch_size", "precision")},
                   "run_dir": str(path.parent)}
            rows.append(row)
    return rows


SWEEP_RUN_GLOB = "run[0-9][0-9][0-9]"  # one run of a job making several (labs' one_job sweeps: run000, run001...)


def participant_folders() -> list[Path]:
    """The participants' own course folders (the course's ``participants`` glob, e.g. ``/home/*/course``; ``~``
    and ``$VARS`` expanded), each holding a coursekit.toml; [] when the course has no such setting."""
    from coursekit.course import course_relative

    pattern = course_setting("participants")
    if not pattern:
        return []
    return [Path(m) for m in sorted(glob.glob(str(course_relative(pattern))))
            if (Path(m) / COURSE_CONFIG_FILE).is_file() and Path(m).resolve() != course_dir()]


def _cell(value: Any) -> Any:
    """A CSV cell: floats to RESULT_DIGITS significant digits (0.8512, 1234.6), the rest as it is."""
    return float(f"{value:.{RESULT_DIGITS}g}") if isinstance(value, float) else value


def write_results(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)


# ------------------------------------------------------------------------------------------ room

ROOM_FIELDS = ("pseudonym", "user", "lab", "needs_help", "submitted", "pending", "running", "failed",
               "last_failed_job", "last_failed_state", "last_stderr", "last_activity", "idle_min")
FAILED_STATES = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
STDERR_LINES = 5  # the last lines of a failed job's stderr shown by default
TAIL_SCAN_FACTOR = 4  # read this many times the lines wanted: submitit's and srun's own lines are dropped
ROOM_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
RoomColumn = Callable[["Participant"], dict[str, Any]]
# Extra columns of the room (exit-ticket scores, pooled-sweep completeness, ...): name -> a function of one
# participant giving its cells; their keys are added after ROOM_FIELDS in the terminal, the CSV and the widget.
ROOM_COLUMNS: dict[str, RoomColumn] = {}


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


def _owner(path: Path) -> str:
    """The Unix user owning ``path`` ("" when unknown)."""
    try:
        return pwd.getpwuid(path.stat().st_uid).pw_name
    except (OSError, KeyError):
        return ""


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
    owner = _owner(path)
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
                                        _owner(folder)))
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


def participant_row(person: Participant, stderr_lines: int = STDERR_LINES, now: float | None = None) -> dict[str, Any]:
    """One row of the room (ROOM_FIELDS, then every ROOM_COLUMNS column): integers and strings only."""
    now = time.time() if now is None else now
    states = [j.state for j in person.jobs]
    failed = person.failures
    last = failed[-1] if failed else None
    active = person.last_activity
    row: dict[str, Any] = {
        "pseudonym": person.pseudonym, "user": ",".join(sorted(person.users)), "lab": person.lab,
        "needs_help": "yes" if person.needs_help else "",
        "submitted": len(states), "pending": sum(s in PENDING_STATES for s in states),
        "running": sum(s in RUNNING_STATES for s in states), "failed": len(failed),
        "last_failed_job": last.job_id if last else "", "last_failed_state": last.state if last else "",
        "last_stderr": "\n".join(last_stderr(last, stderr_lines)) if last and stderr_lines else "",
        "last_activity": time.strftime(ROOM_TIME_FORMAT, time.localtime(active)) if active else "",
        "idle_min": max(0, round((now - active) / 60)) if active else "",
    }
    for name, column in ROOM_COLUMNS.items():
        try:
            row.update(column(person))
        except Exception as error:  # noqa: BLE001 - one column's failure must not hide the room
            row[name] = f"? ({error})"
    return row


def exit_ticket_cells(person: Participant) -> dict[str, Any]:
    """The room's exit-ticket column: each lab's latest score ("01 4/4, 02 3/5"), read from the course
    folders of their jobs (``labs.exit_ticket``'s files, attributed to the Unix users owning them)."""
    from coursekit.labs.kit.ticket import room_scores, scores_text

    return {"exit_tickets": scores_text(room_scores(person.course_folders, person.users, person.pseudonym))}


ROOM_COLUMNS["exit_tickets"] = exit_ticket_cells


def room_table(roots: list[str | os.PathLike] | None = None, prefix: str | None = None, *,
               stderr_lines: int = STDERR_LINES, warnings: list[str] | None = None,
               predictions: list[str] | None = None) -> list[dict[str, Any]]:
    """The room, one row per participant, those needing help first (``coursekit instructor room``; a
    notebook widget shows it with ``show_room``). ``roots``: participants' jobs or course folders (default
    this course's); ``prefix``: the course's job prefix (default its coursekit.toml's); what could not be read
    is appended to ``warnings`` (when a list is given), never raised; the room's predictions against what it
    measured, one line per question, to ``predictions`` (when a list is given)."""
    if roots is not None and (isinstance(roots, (str, os.PathLike)) or not all(
            isinstance(r, (str, os.PathLike)) for r in roots)):
        raise ValueError(f"roots={roots!r}: give a list of folders, e.g. ['/home/ada/dl-course/jobs']")
    default = [course_dir() / JOBS_SUBDIR, site_jobs_dir()]  # the registry's folder, the site's job folders
    default = [p for p in default if p.is_dir()] or default[:1]
    default += participant_folders()  # each participant's own course folder (a hub's ~/course)
    room = gather_room([Path(r) for r in roots] if roots else default, job_prefix(prefix), stderr_lines=stderr_lines)
    if warnings is not None:
        warnings += room.warnings
    if predictions is not None:
        predictions += room_prediction_lines(room, warnings)
    return [participant_row(p, room.stderr_lines) for p in room.participants]


def room_prediction_lines(room: Room, warnings: list[str] | None = None) -> list[str]:
    """The room's guesses beside its measurements (``labs.predict``'s files in every participant's course
    folder), one line per question; what cannot be read goes to ``warnings``."""
    from coursekit.labs.kit.predict import prediction_lines, room_predictions

    folders = {folder for person in room.participants for folder in person.course_folders}
    try:
        return prediction_lines(room_predictions(folders, warnings))
    except Exception as error:  # noqa: BLE001 - the predictions must not hide the room
        return [f"predictions could not be read ({error})"]


def room_fields(rows: list[dict[str, Any]]) -> list[str]:
    """ROOM_FIELDS, then the extra columns the rows hold."""
    return [*ROOM_FIELDS, *dict.fromkeys(k for r in rows for k in r if k not in ROOM_FIELDS)]


def write_room(rows: list[dict[str, Any]], out: Path) -> None:
    """The room as CSV (floats rounded as in the results table)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=room_fields(rows))
        writer.writeheader()
        writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)


def team_lines() -> list[str]:
    """Lab 06's team sweeps, one line per team: who holds each part and how many runs they pooled."""
    from coursekit.labs.lab06_data_parallel.team import team_progress

    teams: dict[str, list[str]] = {}
    for row in team_progress():
        who = f"{row['pseudonym'] or row['holder']} ({row['cells']} runs)" if row["holder"] else "nobody yet"
        teams.setdefault(row["team"], []).append(f"part {row['part']} {who}")
    return [f"lab 06 team {team}: " + ", ".join(parts) for team, parts in teams.items()]


def print_room(rows: list[dict[str, Any]], prefix: str, predictions: list[str] | None = None) -> None:
    """The room in the terminal: one line per participant, a failed job's last stderr lines under it."""
    shown = [f for f in room_fields(rows) if f != "last_stderr"]
    table = [tuple(shown)] + [tuple(str(_cell(r.get(f, ""))) for f in shown) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(shown))]
    for i, line in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
        if i and rows[i - 1].get("last_stderr"):
            for text in str(rows[i - 1]["last_stderr"]).splitlines():
                print(f"    | {text}")
    helped = sum(1 for r in rows if r["needs_help"])
    print(f"{len(rows)} participant(s) of course prefix {prefix!r}, {helped} needing help")
    for line in team_lines():
        print(line)
    if predictions:
        print("predictions (the room's guesses, then what it measured):")
        for line in predictions:
            print(f"  {line}")


def show_room(roots: list[str | os.PathLike] | None = None, prefix: str | None = None,
              stderr_lines: int = STDERR_LINES) -> Any:
    """The room as an HTML table for a notebook (those needing help first, highlighted); returns it."""
    from html import escape

    from IPython.display import HTML

    notes: list[str] = []
    guesses: list[str] = []
    rows = room_table(roots, prefix, stderr_lines=stderr_lines, warnings=notes, predictions=guesses)
    fields = room_fields(rows)
    head = "".join(f"<th>{escape(f)}</th>" for f in fields)
    body = "".join(
        "<tr" + (' style="background:#fde2e2"' if r["needs_help"] else "") + ">"
        + "".join(f"<td><pre style='margin:0'>{escape(str(r.get(f, '')))}</pre></td>" if f == "last_stderr"
                  else f"<td>{escape(str(_cell(r.get(f, ''))))}</td>" for f in fields) + "</tr>" for r in rows)
    notes_html = "".join(f"<p>&#9888; {escape(n)}</p>" for n in notes)
    teams_html = "".join(f"<p>{escape(line)}</p>" for line in team_lines())
    guesses_html = ("<p>Predictions (the room's guesses, then what it measured):</p><ul>"
                    + "".join(f"<li>{escape(line)}</li>" for line in guesses) + "</ul>") if guesses else ""
    return HTML(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{teams_html}{guesses_html}"
                f"{notes_html}")


# ------------------------------------------------------------------------------------------ the CLI


def cmd_setup(args: argparse.Namespace) -> int:
    return setup(args.course_dir, args.site, args.account, args.data_dir, args.leaderboard, args.job_prefix,
                 args.profile, doctor=not args.no_doctor, force=args.force, pools=args.pools,
                 instructor=args.instructor, participants=args.participants)


def race_rules(profile: str | None) -> tuple[Any, dict[str, Any]]:
    """Lab 09's rules of the course's profile (``--profile``, else the labs' choice: coursekit.toml's ``profile``,
    $COURSEKIT_PROFILE, a visible GPU) and its settings (the job options of its runs)."""
    from coursekit.labs.kit.profiles import choose_profile
    from coursekit.labs.lab09_race import Rules, settings

    chosen = choose_profile(profile)
    s = settings(chosen.name)
    rules = Rules("lab 09", s["baseline"], models=s["models"], max_parameters=s["max_parameters"],
                  max_gpus=s["max_gpus"], seeds=s["seeds"])
    return rules, {**s, "profile": chosen.name}


def race_verify(args: argparse.Namespace) -> int:
    """``race verify``: re-run the top entries of the board as the instructor's jobs, wait for them (or not:
    ``--collect`` later) and print the verified board (``labs/lab09_race/rerun.py``)."""
    from coursekit.labs.lab09_race import rerun
    from coursekit.labs.lab09_race.leaderboard import read_race
    from coursekit.labs.lab09_race.verify import entries
    from coursekit.labs.lab09_race.view import board_accounting, standings
    from coursekit.train.target import code_hash

    path = args.leaderboard
    me = rerun.check_verifier(path)
    rules, s = race_rules(args.profile)
    kit = code_hash()
    runs, reruns, problems = read_race(path)
    round_ = rerun.board_round(runs, args.round)
    submitted = 0
    if not args.collect:
        claimed = entries(runs, rules, kit, problems, board_accounting(runs, problems))  # the board of the race
        rows, said = rerun.choose(claimed, round_, args.top, reruns, args.again)
        for line in said:
            print(line)
        if not rows and not said:
            raise ValueError(f"no ranked entry in round {round_} to verify ({len(claimed)} entr(y/ies) on the board, "
                             f"read with lab 09's rules of the {s['profile']} profile; another profile: --profile)")
        lines = rerun.submit(rows, rules, s["job"], path)
        submitted = len(lines)
        if lines:
            jobs = sorted({line["job_id"] for line in lines})
            print(f"submitted {submitted} re-run(s) of {len(rows)} entr{'y' if len(rows) == 1 else 'ies'} "
                  f"({', '.join(r['participant'] + '/' + r['submission'] for r in rows)}) as {me}'s job(s) "
                  f"{' '.join(jobs)}")
    running: list[str] = []
    if args.wait or args.collect:
        timeout = args.timeout if args.timeout is not None else float(s["timeout_s"]) * max(1, submitted or rules.seeds)
        try:
            written, running = rerun.collect(path, round_, wait=args.wait, timeout_s=timeout)
        except TimeoutError as error:
            written, running = rerun.collect(path, round_, wait=False)
            print(f"{error}: collect them later", file=sys.stderr)
        print(f"collected {written} re-run(s)" + (f"; still running: {'; '.join(running)}" if running else ""))
    if running or not (args.wait or args.collect):
        print("the re-runs are under way: coursekit instructor race verify --collect (waits for them, then prints "
              "the verified board)")
    table = standings(rules, kit, path)
    print(rerun.report(table, round_))
    _, reruns, _ = read_race(path)
    spent = rerun.cost(table, reruns)
    if spent["runs"]:
        print(f"re-runs' cost: {spent['runs']} run(s), {spent['wall_s'] / 60:.1f} minutes of jobs' wall time, "
              f"{spent['gpu_minutes']:.1f} GPU-minutes (a CPU run counts as one device)")
    for problem in getattr(table, "problems", []):
        print(f"note: {problem}", file=sys.stderr)
    return EXIT_OK


def cmd_race(args: argparse.Namespace) -> int:
    """``race clear``: end a round of lab 09 (its files moved into the race folder's archive); ``race verify``:
    re-run the top entries (``race_verify``)."""
    from coursekit.labs.lab09_race.leaderboard import clear_round

    if args.race_command == "verify":
        return race_verify(args)
    archive, moved = clear_round(args.leaderboard)
    print(f"cleared the round: {len(moved)} file(s) moved to {archive}" + (f": {' '.join(moved)}" if moved else ""))
    return EXIT_OK


def cmd_data(args: argparse.Namespace) -> int:
    if args.dataset == "cifar10":
        return data_cifar10(args.dir)
    if args.dataset == "fashion-mnist":
        return data_fashion_mnist(args.dir, args.source)
    return data_jpeg(args.dir, args.profile, args.workers)


def cmd_jobs(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    notes: list[str] = []
    print_jobs(course_jobs(prefix, finished=args.all, notes=notes), prefix)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    ids = cancel_course(prefix)
    print(f"cancelled {len(ids)} job(s) of course prefix {prefix!r}" + (f": {' '.join(ids)}" if ids else ""))
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    prefix = args.prefix or course_setting("job_prefix")
    roots = [Path(p) for p in args.jobs_dir] or [p for p in [site_jobs_dir()] if p.exists()]  # none yet: no run
    if not args.jobs_dir:  # the participants' own course folders too (a hub's ~/course)
        roots += [folder / JOBS_SUBDIR for folder in participant_folders() if (folder / JOBS_SUBDIR).exists()]
    if args.jobs_dir and not any(root.is_dir() for root in roots):
        raise ValueError(f"--jobs-dir {' '.join(args.jobs_dir)}: no such folder; give the participants' jobs folders, "
                         "e.g. --jobs-dir /home/*/dl-course/jobs")
    notes: list[str] = []
    rows = gather_results(roots, prefix, warnings=notes)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    out = args.out or course_dir() / DEFAULT_RESULTS
    try:
        write_results(rows, out)
    except OSError as error:
        where = "" if args.out else " (the default place, in the course folder)"
        raise ValueError(f"cannot write the results table to {out}{where}: {os_reason(error)}; give --out a CSV "
                         "file in a folder you can write to, e.g. --out ~/results.csv") from error
    people = sorted({r["participant"] for r in rows})
    print(f"{len(rows)} run(s) of {len(people)} participant(s) ({', '.join(people) or '-'}) -> {out}")
    return EXIT_OK


def cmd_room(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    if args.jobs_dir and not any(Path(root).expanduser().is_dir() for root in args.jobs_dir):
        raise ValueError(f"--jobs-dir {' '.join(args.jobs_dir)}: no such folder; give the participants' jobs or course "
                         "folders, e.g. --jobs-dir /home/*/dl-course")
    notes: list[str] = []
    guesses: list[str] = []
    rows = room_table(args.jobs_dir or None, prefix, stderr_lines=args.lines, warnings=notes, predictions=guesses)
    failed: OSError | None = None
    if args.csv:  # written first: the table on the screen cannot lose it
        try:
            write_room(rows, args.csv)
        except OSError as error:
            failed = error
    print_room(rows, prefix, guesses)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    if failed is not None:
        raise ValueError(f"cannot write the room to {args.csv}: {os_reason(failed)}; give --csv a file in a folder "
                         "you can write to (the table above is complete)") from failed
    if args.csv:
        print(f"-> {args.csv}")
    return EXIT_OK


def os_reason(error: OSError) -> str:
    """An OSError in words: the path it concerns and why ("/a/b: Not a directory")."""
    reason = error.strerror or str(error)
    if isinstance(error, FileExistsError):  # mkdir of a folder where a file stands
        reason = "a file is there, where a folder is needed"
    return f"{error.filename}: {reason}" if error.filename else reason


WHAT_TO_DO = {  # per action: what the instructor can do about a file or folder that cannot be used
    "setup": "choose a COURSE_DIR (and --data-dir, --leaderboard, --pools) you can write to",
    "data": "choose a --dir you can write to (the course's shared data folder)",
    "jobs": "check that the course folder and the job folders can be read (COURSEKIT_COURSE_DIR, --prefix)",
    "cancel": "check that the course folder and the job folders can be read (COURSEKIT_COURSE_DIR, --prefix)",
    "results": "give --out a CSV file in a folder you can write to, and --jobs-dir folders you can read",
    "room": "give --jobs-dir folders you can read, and --csv a file in a folder you can write to",
    "race": "run it as the instructor (coursekit.toml's `instructor`), from a course folder of theirs (the re-runs' "
            "job folders go there), the race folder theirs too (chown it to them once, as root)",
}


def slurm_advice(error: slurm_cli.SlurmError) -> str:
    """What to do about a Slurm command that failed, after what it said."""
    if "not installed or not on PATH" in error.message:
        return ("this course's site is a Slurm site: run this on the cluster's login node, where Slurm's commands "
                "are, or use the local site (COURSEKIT_SITE=local)")
    if "no answer within" in error.message:
        return "Slurm's controller did not answer: try again in a minute, or ask the cluster's admins"
    return "check that Slurm answers here (squeue, sacct), or ask the cluster's admins"


def guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """An instructor command whose failures caused by the environment (a file or folder that cannot be read or
    written, Slurm's commands missing or failing, a child process failing) end in one sentence on stderr, naming
    the problem and what to do, and exit status 1: never a Python traceback."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        action = getattr(args, "instructor_command", None) or "command"
        said = f"coursekit instructor {action}: error:"
        try:
            return handler(args)
        except BrokenPipeError:  # the reader stopped reading (`... | head`): nothing to say
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # so that Python's flush at exit says nothing
            return EXIT_OK
        except slurm_cli.SlurmError as error:
            print(f"{said} {error}; {slurm_advice(error)}", file=sys.stderr)
        except OSError as error:
            print(f"{said} {os_reason(error)}; {WHAT_TO_DO.get(action, 'check the paths given')}", file=sys.stderr)
        except subprocess.SubprocessError as error:
            print(f"{said} a command it runs failed ({error}); {WHAT_TO_DO.get(action, 'check the paths given')}",
                  file=sys.stderr)
        except (ValueError, KeyError) as error:
            print(f"{said} {error.args[0] if isinstance(error, KeyError) and error.args else error}", file=sys.stderr)
        return EXIT_FAILED

    return run


def _positive(text: str) -> int:
    """``--top``, ``--round``: a whole number, 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 1 or more")
    return int(text)


def _lines(text: str) -> int:
    """``--lines``: a count of lines, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"--lines {text!r}: give a number of lines, 0 or more")
    return int(text)


def add_parser(commands: Any) -> None:
    """The ``instructor`` command group of ``coursekit`` (cli.py)."""
    group = commands.add_parser("instructor", help="set up a course, stage its data, follow and clean up the "
                                "room's jobs, gather results", description=__doc__.splitlines()[0])
    sub = group.add_subparsers(dest="instructor_command", metavar="ACTION", required=True)

    s = sub.add_parser("setup", help="write COURSE_DIR/coursekit.toml and the participants' notebooks, run the doctor")
    s.add_argument("course_dir", type=Path, metavar="COURSE_DIR", help="the course folder (created)")
    s.add_argument("--site", default="local", help="site profile (coursekit sites), default local")
    s.add_argument("--account", help="Slurm account of the course (site_defaults.account)")
    s.add_argument("--data-dir", help="shared data folder (default COURSE_DIR/data)")
    s.add_argument("--leaderboard", help="lab 09's leaderboard file (default COURSE_DIR/race/leaderboard.jsonl)")
    s.add_argument("--pools", help="folder of the room's pooled results, e.g. lab 06's team sweeps "
                                   "(default COURSE_DIR/pools)")
    s.add_argument("--job-prefix", default="ck", help="starts every participant's job name (1-5 letters/digits)")
    s.add_argument("--profile", choices=("cpu", "gpu"), help="force the labs' profile (default: chosen per kernel)")
    s.add_argument("--instructor", help="the instructor's Unix user, who alone posts lab 09's baseline and clears "
                   "its rounds (default: the user running setup)")
    s.add_argument("--participants", metavar="GLOB", help="where each participant's own copy of the course lives, "
                   "e.g. '/home/*/course' on a hub (quoted: a glob read later): results and room read their jobs")
    s.add_argument("--no-doctor", action="store_true", help="skip the doctor's checks of the site")
    s.add_argument("--force", action="store_true", help="overwrite an existing coursekit.toml")
    s.set_defaults(handler=guarded(cmd_setup))

    d = sub.add_parser("data", help="stage a dataset once in a shared folder")
    d.add_argument("dataset", choices=("cifar10", "fashion-mnist", "jpeg"),
                   help="cifar10: download + verify; fashion-mnist: copy + verify Debian's files; jpeg: lab 05's tree")
    d.add_argument("--dir", type=Path, required=True, help="the shared data folder (the course's data_dir)")
    d.add_argument("--profile", choices=("cpu", "gpu"), default="gpu", help="jpeg: whose size (default gpu)")
    d.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="jpeg: writer processes")
    d.add_argument("--source", type=Path, help="fashion-mnist: the folder holding its four files (default Debian's "
                   "/usr/share/datasets/fashion-mnist)")
    d.set_defaults(handler=guarded(cmd_data))

    j = sub.add_parser("jobs", help="every participant's jobs of this course (active; --all: finished too)")
    j.add_argument("--all", action="store_true", help="also the finished jobs (sacct, last 7 days)")
    j.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    j.set_defaults(handler=guarded(cmd_jobs))

    c = sub.add_parser("cancel", help="cancel every active job of this course (end of the day)")
    c.add_argument("--course", action="store_true", required=True, help="every job of the course (required)")
    c.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    c.set_defaults(handler=guarded(cmd_cancel))

    r = sub.add_parser("results", help="each participant's finished runs in one CSV table")
    r.add_argument("--out", type=Path, help=f"CSV file (default COURSE/{DEFAULT_RESULTS})")
    r.add_argument("--jobs-dir", action="extend", nargs="+", default=[],
                   help="job folders to read, one or more (default the course's): e.g. /home/*/dl-course/jobs")
    r.add_argument("--prefix", help="only jobs with this prefix (default: the course's job_prefix)")
    r.set_defaults(handler=guarded(cmd_results))

    m = sub.add_parser("room", help="one row per participant: their lab, jobs, last failure and its stderr, "
                       "exit-ticket scores; those needing help first")
    m.add_argument("--jobs-dir", action="extend", nargs="+", default=[],
                   help="participants' jobs (or course) folders, one or more (default the course's): "
                   "e.g. /home/*/dl-course")
    m.add_argument("--csv", type=Path, help="also write the room to this CSV file")
    m.add_argument("--lines", type=_lines, default=STDERR_LINES,
                   help=f"last stderr lines of each participant's last failed job (default {STDERR_LINES})")
    m.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    m.set_defaults(handler=guarded(cmd_room))

    g = sub.add_parser("race", help="lab 09's race: verify the top entries by re-running them, clear a round")
    g.add_argument("race_command", choices=("verify", "clear"), help="verify: re-run the top entries' configurations "
                   "and seeds as your jobs and print the verified board (the race's final standings); clear: move the "
                   "round's runs and claims to the race folder's archive/<time>/ (the folder must be yours: setup "
                   "makes it so)")
    g.add_argument("--leaderboard", type=Path, help="the leaderboard setting's file (default: the course's)")
    g.add_argument("--top", type=_positive, default=3, help="verify: how many of the top entries to re-run (default 3)")
    g.add_argument("--round", type=_positive, help="verify: the round (default: the latest on the board)")
    g.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="verify: wait for the re-runs and collect them (default); --no-wait returns at once: "
                   "`race verify --collect` later")
    g.add_argument("--collect", action="store_true", help="verify: submit nothing, collect the re-runs submitted "
                   "before (waiting for them unless --no-wait) and print the verified board")
    g.add_argument("--again", action="store_true", help="verify: re-run entries already re-run too")
    g.add_argument("--profile", choices=("cpu", "gpu"), help="verify: lab 09's rules of this profile (default: the "
                   "course's, as the notebooks choose it)")
    g.add_argument("--timeout", type=float, help="verify: seconds to wait for the re-runs (default: the lab's "
                   "timeout per run x the runs)")
    g.set_defaults(handler=guarded(cmd_race))
