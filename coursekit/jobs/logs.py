"""``search_log``: find the log files of coursekit's jobs, the way idr_pytools' participants expect.

Every job keeps its logs in its own folder, ``<course>/jobs/<name>/<job_id>/<job_id>_<task>_log.out``
(and ``.err``), one pair per task (per rank). ``search_log`` walks those folders with ``os.scandir`` (no
file is opened) and returns idr_pytools' shape: a sorted list of stdout paths, ONE per job (task 0's, as
idr_pytools has one log per job, so that ``[search_log(contains=j) for j in ids]`` stays aligned with
``ids``), or ``{"stdout": [...], "stderr": [...]}`` with ``with_err``. ``all_tasks=True`` gives every
task's log (``Job.log_paths()`` gives one job's, by rank).

Unlike idr_pytools, a ``contains`` that looks like a job id (``1234`` or ``1234_5``) matches job ids
exactly: ``"123"`` finds job 123 and the tasks ``123_N`` of array 123, never job 1123, job 1234 or a
date holding "123". Any other ``contains`` is a plain substring of ``<name>/<job_id>/<file name>``.
Results are sorted by job id (numerically: oldest first, so ``[-1]`` is the latest job), then name
and task.

Speed: a finished job's folder (submitit's ``<job_id>_0_result.pkl`` is there: nothing will be added)
is listed once ever: its logs are kept in memory and in ``<jobs>/.search_log_index.json``, which the
next process reads instead of listing thousands of folders (slow on the shared file systems of
clusters). Other folders are ``stat``-ed and listed again only when their mtime changed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from coursekit.sites import site_jobs_dir

JOB_ID = re.compile(r"\d+(?:_\d+)?")
LOG_FILE = re.compile(r"(?P<job_id>\d+(?:_\d+)?)_(?P<task>\d+)_log\.(?P<stream>out|err)")
STREAM_KEYS = {"out": "stdout", "err": "stderr"}
LOG_SUFFIXES = ("_log.out", "_log.err")  # same length: the task number sits between prefix and suffix
RECENT_CHANGE_NS = 2_000_000_000  # coarse file-system clocks: do not trust a listing this fresh
MAX_CACHED_FOLDERS = 200_000
FINISHED_MARKER = "0_result.pkl"  # submitit writes <job_id>_0_result.pkl when task 0 has ended
INDEX_FILE = ".search_log_index.json"  # finished jobs' logs: a new process need not list their folders
INDEX_VERSION = 1
# Lines a job's log holds that are not the job's own output: submitit's logger, srun's notes on its tasks
SUBMITIT_CHATTER = re.compile(r"submitit (INFO|DEBUG|WARNING|ERROR) \(")
SRUN_CHATTER = re.compile(r"srun: (error: \S+: tasks? [\d,\-]+: (Exited with exit code|Killed|Terminated)"
                          r"|launch/slurm: _step_signal|Job step aborted|got SIGCONT|forcing job termination"
                          r"|Terminating StepId|Complete StepId|Force Terminated)"
                          # slurmstepd's note when srun --kill-on-bad-exit ends the step of a failed task
                          r"|slurmstepd(-[\w.-]+)?: error: \*\*\* STEP \S+ ON \S+ CANCELLED AT")

def looks_like_job_id(text: str) -> bool:
    """``1234`` or ``1234_5`` (an array task)."""
    return JOB_ID.fullmatch(text) is not None


def same_job(job_id: str, wanted: str) -> bool:
    """``job_id`` is the job ``wanted``, or a task of the array ``wanted``; never a mere substring."""
    return job_id == wanted or ("_" not in wanted and job_id.startswith(wanted + "_"))


def _subfolders(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return [entry for entry in entries if entry.is_dir()]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def _file_names(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def _check_arguments(name: object, contains: object) -> tuple[str, str]:
    if not isinstance(name, str) or not name:
        raise ValueError(f"name={name!r}: give a job name or a glob pattern such as 'bs*' ('*' for every job)")
    if isinstance(contains, int) and not isinstance(contains, bool):
        contains = str(contains)  # a job id given as a number
    if not isinstance(contains, str):
        raise ValueError(f"contains={contains!r}: give a job id such as '1234' or a piece of the log's path")
    return name, contains


LogEntry = tuple[int, str, str]  # (task, "out" | "err", file name)
# folder path -> (finished, mtime_ns, job sort key, logs). A finished job's folder (task 0 wrote its
# result) no longer changes and is not looked at again; another is listed again when its mtime changed.
FolderEntry = tuple[bool, int, tuple[int, ...], tuple[LogEntry, ...]]
_folder_logs: dict[str, FolderEntry] = {}
_indexes: dict[str, dict[str, Any]] = {}  # jobs root -> its index's records, read once per process


def _job_key(job_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in job_id.split("_"))


def _scan_job_folder(path: str, job_id: str, cached: FolderEntry | None) -> FolderEntry | None:
    """List one job folder (unless its cached entry is still valid); None when it is not a job folder."""
    mtime_ns = None
    if cached is not None:
        try:
            mtime_ns = os.stat(path).st_mtime_ns
        except OSError:
            return None
        if mtime_ns == cached[1]:
            return cached
    elif not looks_like_job_id(job_id):
        return None
    names = _file_names(path)
    prefix = job_id + "_"
    start, end = len(prefix), -len(LOG_SUFFIXES[0])
    logs = []
    for file_name in names:
        if file_name.endswith(LOG_SUFFIXES) and file_name.startswith(prefix):
            task = file_name[start:end]
            if task.isdigit() and task.isascii():
                logs.append((int(task), file_name[-3:], file_name))
    key = _job_key(job_id)
    if len(_folder_logs) >= MAX_CACHED_FOLDERS:
        _folder_logs.clear()
    if prefix + FINISHED_MARKER in names:
        entry: FolderEntry = (True, 0, key, tuple(sorted(logs)))
        _folder_logs[path] = entry
        return entry
    if mtime_ns is None:  # stat after listing: a change in between leaves a fresh mtime, never cached
        try:
            mtime_ns = os.stat(path).st_mtime_ns
        except OSError:
            return None
    entry = (False, mtime_ns, key, tuple(sorted(logs)))
    if time.time_ns() - mtime_ns > RECENT_CHANGE_NS:
        _folder_logs[path] = entry
    return entry


def _load_index(base: str) -> dict[str, Any]:
    """``{"<name>/<job_id>": [[task, stream], ...]}`` of the finished folders in ``base``'s index (read once
    per process; empty when there is none or it is not one of ours)."""
    if base not in _indexes:
        try:
            with open(os.path.join(base, INDEX_FILE), encoding="utf-8") as handle:
                data = json.load(handle)
            folders = data["folders"] if data.get("version") == INDEX_VERSION else {}
            _indexes[base] = folders if isinstance(folders, dict) else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            _indexes[base] = {}
    return _indexes[base]


def _entry_from_index(job_id: str, recorded: Any) -> FolderEntry | None:
    """A finished folder's entry from its index record; None when the record is not well formed."""
    try:
        logs = []
        for task, stream in recorded:
            if type(task) is not int or task < 0 or stream not in STREAM_KEYS:
                return None
            logs.append((task, stream, f"{job_id}_{task}_log.{stream}"))
    except (TypeError, ValueError):
        return None
    return True, 0, _job_key(job_id), tuple(sorted(logs))


def _save_index(base: str, present: set[str] | None) -> None:
    """Record the finished job folders under ``base``: those in ``present`` after a full scan, else the
    index's records plus those found now."""
    prefix = base + os.sep
    folders = {} if present is not None else dict(_load_index(base))
    folders.update({path[len(prefix):].replace(os.sep, "/"): [[task, stream] for task, stream, _ in entry[3]]
                    for path, entry in _folder_logs.items()
                    if entry[0] and path.startswith(prefix) and (present is None or path in present)})
    _indexes[base] = folders
    target = os.path.join(base, INDEX_FILE)
    scratch = f"{target}.{os.getpid()}.tmp"
    try:
        with open(scratch, "w", encoding="utf-8") as handle:  # one write: json.dump would make thousands
            handle.write(json.dumps({"version": INDEX_VERSION, "folders": folders}, separators=(",", ":")))
        os.replace(scratch, target)  # atomic: readers see the old or the new index, never half of one
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(scratch)


def is_chatter(line: str) -> bool:
    """A line of submitit's logger or of srun's notes about its tasks, not the job's own output."""
    return SUBMITIT_CHATTER.match(line) is not None or SRUN_CHATTER.match(line) is not None


def job_output(lines: list[str]) -> list[str]:
    """The job's own lines: submitit's log lines and srun's notes on its tasks left out (a function job's
    traceback stays: it is the function's error)."""
    return [line for line in lines if not is_chatter(line)]


class LogList(list):
    """search_log's list of paths (a plain ``list`` of ``str``), shown one path per line in a notebook."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("\n".join(self) if self else "no log found")


class LogPaths(dict):
    """search_log's ``{"stdout": [...], "stderr": [...]}`` (a plain ``dict``), shown readably in a notebook."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("\n".join(f"{key}:\n" + ("\n".join(f"  {p}" for p in paths) or "  (none)")
                                for key, paths in self.items()))


def find_logs(name: str = "*", contains: str = "", *, root: str | os.PathLike | None = None,
              all_tasks: bool = False) -> dict[str, list[str]]:
    """Every matching log, as ``{"stdout": [...], "stderr": [...]}`` (paths as strings, sorted): task 0's
    (the lowest task's) of each job, or every task's with ``all_tasks``.

    Finished jobs' folders are listed once ever (then kept in the cache and in the jobs folder's
    index file); no log file is opened.
    """
    name, contains = _check_arguments(name, contains)
    if not isinstance(all_tasks, bool):
        raise ValueError(f"all_tasks={all_tasks!r}: use True (every task's log) or False (one log per job)")
    base = os.path.abspath(root if root is not None else site_jobs_dir())
    wanted_job = contains if looks_like_job_id(contains) else None
    substring = contains if wanted_job is None else ""
    full_scan = name == "*" and wanted_job is None
    index = _load_index(base)
    folders, present, newly_finished = [], set(), 0
    for name_folder in _subfolders(base):
        job_name = name_folder.name
        if not fnmatchcase(job_name, name):
            continue
        for job_folder in _subfolders(name_folder.path):
            job_id, path = job_folder.name, job_folder.path
            if wanted_job is not None and not same_job(job_id, wanted_job):
                continue
            present.add(path)
            entry = _folder_logs.get(path)
            if entry is None and index:
                entry = _entry_from_index(job_id, index.get(f"{job_name}/{job_id}"))
                if entry is not None:
                    _folder_logs[path] = entry
            if entry is None or not entry[0]:
                entry = _scan_job_folder(path, job_id, entry)
                newly_finished += entry is not None and entry[0]
            if entry is not None and entry[3]:
                folders.append((entry[2], job_name, job_id, path + os.sep, entry[3]))
    if newly_finished:
        _save_index(base, present if full_scan else None)
    folders.sort()
    found: dict[str, list[str]] = {"out": [], "err": []}
    for _, job_name, job_id, folder_path, logs in folders:
        first_task = {stream: min(task for task, s, _ in logs if s == stream) for _, stream, _ in logs}
        for task, stream, file_name in logs:
            if not all_tasks and task != first_task[stream]:
                continue
            if not substring or substring in f"{job_name}/{job_id}/{file_name}":
                found[stream].append(folder_path + file_name)
    return {STREAM_KEYS[stream]: paths for stream, paths in found.items()}


def search_log(name: str = "*", contains: str = "", with_err: bool = False, *,
               root: str | os.PathLike | None = None, all_tasks: bool = False) -> list[str] | dict[str, list[str]]:
    """Log files of the jobs called ``name`` (a glob pattern) whose id is ``contains`` (or whose path
    holds it): the sorted stdout paths, one per job (task 0's), or ``{"stdout": [...], "stderr": [...]}``
    when ``with_err``. ``all_tasks=True``: every task's (every rank's) log, task after task.

    ``root`` is the jobs folder (default: the site's log folder, normally the course's ``jobs/``).
    """
    if not isinstance(with_err, bool):
        raise ValueError(f"with_err={with_err!r}: use True (stdout and stderr paths) or False (stdout only)")
    logs = find_logs(name, contains, root=root, all_tasks=all_tasks)
    if with_err:
        return LogPaths((key, LogList(paths)) for key, paths in logs.items())
    return LogList(logs["stdout"])


def job_logs(job_folder: str | os.PathLike, stream: str = "out") -> list[Path]:
    """The ``stream`` ("out" or "err") logs of one job folder, task 0 first."""
    if stream not in STREAM_KEYS:
        raise ValueError(f"stream={stream!r}: use 'out' or 'err'")
    folder = Path(job_folder)
    matches = [LOG_FILE.fullmatch(file_name) for file_name in _file_names(os.fspath(folder))]
    logs = [m for m in matches if m is not None and m["stream"] == stream]
    return [folder / m.string for m in sorted(logs, key=lambda m: int(m["task"]))]
