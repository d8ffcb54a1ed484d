"""``search_log``: find the log files of coursekit's jobs, the way idr_pytools' participants expect.

Every job keeps its logs in its own folder, ``<course>/jobs/<name>/<job_id>/<job_id>_<task>_log.out``
(and ``.err``). ``search_log`` walks those folders with ``os.scandir`` (no file is opened) and returns
idr_pytools' shape: a sorted list of stdout paths, or ``{"stdout": [...], "stderr": [...]}``.

Unlike idr_pytools, a ``contains`` that looks like a job id (``1234`` or ``1234_5``) matches job ids
exactly: ``"123"`` finds job 123 and the tasks ``123_N`` of array 123, never job 1123, job 1234 or a
date holding "123". Any other ``contains`` is a plain substring of ``<name>/<job_id>/<file name>``.
Results are sorted by job id (numerically: oldest first, so ``[-1]`` is the latest job), then name
and task.
"""

from __future__ import annotations

import os
import re
import time
from fnmatch import fnmatchcase
from pathlib import Path

from coursekit.course import course_dir, jobs_dir

JOB_ID = re.compile(r"\d+(?:_\d+)?")
LOG_FILE = re.compile(r"(?P<job_id>\d+(?:_\d+)?)_(?P<task>\d+)_log\.(?P<stream>out|err)")
STREAM_KEYS = {"out": "stdout", "err": "stderr"}
LOG_SUFFIXES = ("_log.out", "_log.err")  # same length: the task number sits between prefix and suffix
RECENT_CHANGE_NS = 2_000_000_000  # coarse file-system clocks: do not trust a listing this fresh
MAX_CACHED_FOLDERS = 200_000

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


def _job_sort_key(job_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in job_id.split("_"))


LogEntry = tuple[int, str, str]  # (task, "out" | "err", file name)
_folder_logs: dict[str, tuple[int, tuple[LogEntry, ...]]] = {}


def _logs_of_job_folder(path: str, job_id: str) -> tuple[LogEntry, ...]:
    """The logs of one job folder. A folder is listed again only when its mtime changed (one ``stat``
    instead of a listing); folders changed in the last RECENT_CHANGE_NS are never cached."""
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except OSError:
        return ()
    cached = _folder_logs.get(path)
    if cached is not None and cached[0] == mtime_ns:
        return cached[1]
    prefix = job_id + "_"
    logs = []
    for file_name in _file_names(path):
        if not file_name.endswith(LOG_SUFFIXES) or not file_name.startswith(prefix):
            continue
        task = file_name[len(prefix):-len(LOG_SUFFIXES[0])]
        if task.isascii() and task.isdigit():
            logs.append((int(task), file_name[-3:], file_name))
    found = tuple(logs)
    if time.time_ns() - mtime_ns > RECENT_CHANGE_NS:
        if len(_folder_logs) >= MAX_CACHED_FOLDERS:
            _folder_logs.clear()
        _folder_logs[path] = (mtime_ns, found)
    return found


def default_jobs_root() -> Path:
    """The folder holding ``<name>/<job_id>/`` job folders: the site's ``log_folder`` (relative to the
    course folder), else the course's ``jobs/``."""
    try:
        from coursekit.sites import load_site

        root = Path(os.path.expandvars(load_site().log_folder)).expanduser()
    except (ValueError, OSError):
        return jobs_dir()
    return root if root.is_absolute() else course_dir() / root


def find_logs(name: str = "*", contains: str = "", *, root: str | os.PathLike | None = None
              ) -> dict[str, list[str]]:
    """Every matching log, as ``{"stdout": [...], "stderr": [...]}`` (paths as strings, sorted).

    Per job folder: one ``stat`` (and a listing when it changed); no regex, no file opened.
    """
    name, contains = _check_arguments(name, contains)
    base = os.fspath(root) if root is not None else os.fspath(default_jobs_root())
    wanted_job = contains if looks_like_job_id(contains) else None
    substring = contains if wanted_job is None else ""
    found: dict[str, list[tuple[tuple[int, ...], str, int, str]]] = {"out": [], "err": []}
    for name_folder in _subfolders(base):
        job_name = name_folder.name
        if not fnmatchcase(job_name, name):
            continue
        for job_folder in _subfolders(name_folder.path):
            job_id = job_folder.name
            if wanted_job is not None and not same_job(job_id, wanted_job):
                continue
            if not looks_like_job_id(job_id):
                continue
            logs = _logs_of_job_folder(job_folder.path, job_id)
            if not logs:
                continue
            job_key, folder_path = _job_sort_key(job_id), job_folder.path + os.sep
            for task, stream, file_name in logs:
                if substring and substring not in f"{job_name}/{job_id}/{file_name}":
                    continue
                found[stream].append((job_key, job_name, task, folder_path + file_name))
    return {STREAM_KEYS[stream]: [entry[3] for entry in sorted(entries)] for stream, entries in found.items()}


def search_log(name: str = "*", contains: str = "", with_err: bool = False, *,
               root: str | os.PathLike | None = None) -> list[str] | dict[str, list[str]]:
    """Log files of the jobs called ``name`` (a glob pattern) whose id is ``contains`` (or whose path
    holds it): the sorted stdout paths, or ``{"stdout": [...], "stderr": [...]}`` when ``with_err``.

    ``root`` is the jobs folder (default: the site's log folder, normally the course's ``jobs/``).
    """
    logs = find_logs(name, contains, root=root)
    return logs if with_err else logs["stdout"]


def job_logs(job_folder: str | os.PathLike, stream: str = "out") -> list[Path]:
    """The ``stream`` ("out" or "err") logs of one job folder, task 0 first."""
    if stream not in STREAM_KEYS:
        raise ValueError(f"stream={stream!r}: use 'out' or 'err'")
    folder = Path(job_folder)
    matches = [LOG_FILE.fullmatch(file_name) for file_name in _file_names(os.fspath(folder))]
    logs = [m for m in matches if m is not None and m["stream"] == stream]
    return [folder / m.string for m in sorted(logs, key=lambda m: int(m["task"]))]
