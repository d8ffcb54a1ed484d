"""Where a course keeps its files and its settings: the course folder, its ``coursekit.toml``, its job
folders and its registry. The ground floor of coursekit: this module imports nothing from coursekit.

- ``course_config()`` is the one reader of ``coursekit.toml`` (read again only when the file changed);
- ``choose(arg, env_var, key, default)`` is the one "argument > environment > coursekit.toml > default"
  rule (``sites.load_site``, ``labs.kit.profiles``, ``data_dir``);
- ``CoursePaths`` is the one authority on job folders (submitit's ``JobPaths``, one level up): course
  folder -> jobs root (a site's ``log_folder``) -> ``<name>/<job_id>`` (a job's folder, also its run
  directory) and the course's registry.
"""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

COURSE_DIR_ENV = "COURSEKIT_COURSE_DIR"
COURSE_CONFIG_FILE = "coursekit.toml"
DATA_DIR_ENV = "COURSEKIT_DATA_DIR"
JOBS_SUBDIR = "jobs"
REGISTRY_FILE = "registry.jsonl"
INSTRUCTOR_SETTING = "instructor"  # the course's instructor (a Unix user): what only the instructor may do
SUBMITIT_JOB_ID = "%j"  # submitit's placeholder: a job's folder before it has an id

_config_cache: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}


def course_dir() -> Path:
    """The course folder: ``$COURSEKIT_COURSE_DIR``, else the nearest folder (cwd upwards) holding
    ``coursekit.toml``, else the current folder."""
    explicit = os.environ.get(COURSE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser().resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / COURSE_CONFIG_FILE).is_file():
            return folder
    return here


def course_config_path() -> Path:
    return course_dir() / COURSE_CONFIG_FILE


def course_config() -> dict[str, Any]:
    """The course's ``coursekit.toml`` as a dict (``{}`` when there is none), read again only when the
    file changed; ValueError naming the file when it is not valid TOML."""
    path = course_config_path()
    try:
        info = path.stat()
    except OSError:
        return {}
    stamp = (info.st_mtime_ns, info.st_size)
    cached = _config_cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML ({error})") from error
    except OSError:
        return {}
    _config_cache[path] = (stamp, data)
    return data


def course_setting(key: str, default: str | None = None) -> str | None:
    """A top-level value of the course's ``coursekit.toml`` (``data_dir``, ``leaderboard``, ``job_prefix``...),
    as a string; ``default`` when the file or the key is absent."""
    value = course_config().get(key)
    return default if value is None else str(value)


def course_relative(path: str | os.PathLike) -> Path:
    """``path`` with ``$VARS`` and ``~`` expanded, relative to the course folder unless absolute."""
    expanded = Path(os.path.expandvars(os.fspath(path))).expanduser()
    return expanded if expanded.is_absolute() else course_dir() / expanded


def course_path(key: str, default: str) -> Path:
    """A path setting of the course (``course_setting``), ``$VARS`` and ``~`` expanded, relative to the course."""
    return course_relative(course_setting(key) or default)


def user_name(uid: int) -> str:
    """The Unix user name of ``uid`` (``uid1234`` when the system has no name for it)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def course_instructor() -> str | None:
    """The instructor's Unix user (``instructor`` in coursekit.toml, which `coursekit instructor setup` writes);
    None when the course names none (a course of one, on a laptop: its user is the instructor too)."""
    return course_setting(INSTRUCTOR_SETTING) or None


# ---------------------------------------------------------------- argument > environment > toml > default

ARGUMENT, ENVIRONMENT, COURSE_FILE, DEFAULT = "argument", "environment", "coursekit.toml", "default"


@dataclass(frozen=True)
class Choice:
    """A value and where it came from (``source``: argument, environment, coursekit.toml or default)."""

    value: Any
    source: str
    env_var: str | None = None

    @property
    def origin(self) -> str:
        """Where the value came from, in words: ``the argument``, ``$NAME``, the file's path, ``the default``."""
        if self.source == ENVIRONMENT:
            return f"${self.env_var}"
        if self.source == COURSE_FILE:
            return str(course_config_path())
        return f"the {self.source}"


def choose(arg: Any, env_var: str | None, key: str | None, default: Any = None) -> Choice:
    """The first of: ``arg``, ``$env_var``, ``key`` in coursekit.toml, ``default`` (called when it is
    callable, only if needed). ``None`` and ``""`` count as not given."""
    if arg is not None and arg != "":
        return Choice(arg, ARGUMENT)
    from_env = os.environ.get(env_var) if env_var else None
    if from_env:
        return Choice(from_env, ENVIRONMENT, env_var)
    from_file = course_config().get(key) if key else None
    if from_file is not None and from_file != "":
        return Choice(from_file, COURSE_FILE)
    return Choice(default() if callable(default) else default, DEFAULT)


def data_dir(default: str = "data") -> str:
    """Where course datasets live (CIFAR-10 for the gpu profile): ``$COURSEKIT_DATA_DIR`` as given, else
    ``data_dir`` in coursekit.toml (the shared folder `coursekit instructor setup` writes), else
    ``<course>/data``; the last two relative to the course folder."""
    chosen = choose(None, DATA_DIR_ENV, "data_dir", default)
    return chosen.value if chosen.source == ENVIRONMENT else str(course_relative(str(chosen.value)))


# ---------------------------------------------------------------- job folders


@dataclass(frozen=True)
class CoursePaths:
    """Where a course's jobs live; the one place that decides it (``$COURSEKIT_RUN_ROOT`` in a job and the
    sbatch templates get it from here).

    ``course`` (the course folder) -> ``jobs_root`` (``log_folder``, a site's, with ``$VARS`` and ``~``
    expanded, relative to the course unless absolute) -> ``run_root(name)`` (``<jobs_root>/<name>``) ->
    ``job_folder(name, job_id)`` (``<run_root>/<job_id>``: submitit's folder of the job, its logs, its
    result, its ``metrics.jsonl``). ``registry`` is the course's list of jobs, ``<course>/jobs/registry.jsonl``
    whatever the site's log folder."""

    course: Path
    log_folder: str = JOBS_SUBDIR

    @property
    def jobs_root(self) -> Path:
        root = Path(os.path.expandvars(self.log_folder)).expanduser()
        return root if root.is_absolute() else self.course / root

    def run_root(self, name: str) -> Path:
        """The folder of every job called ``name`` (``$COURSEKIT_RUN_ROOT`` of those jobs)."""
        return self.jobs_root / name

    def job_folder(self, name: str, job_id: str = SUBMITIT_JOB_ID) -> Path:
        """One job's folder (default: submitit's ``%j``, for an executor)."""
        return self.run_root(name) / str(job_id)

    def find(self, job_id: str) -> list[Path]:
        """The folders ``<jobs_root>/*/<job_id>`` of a job id, sorted."""
        return sorted(self.jobs_root.glob(f"*/{job_id}"))

    @property
    def registry(self) -> Path:
        return self.course / JOBS_SUBDIR / REGISTRY_FILE


def course_paths(log_folder: str = JOBS_SUBDIR) -> CoursePaths:
    """``CoursePaths`` of this course with jobs under ``log_folder`` (a site's; default ``jobs``)."""
    return CoursePaths(course_dir(), log_folder)


def jobs_dir(log_folder: str = JOBS_SUBDIR) -> Path:
    """``course_paths(log_folder).jobs_root``: where job folders live (``<root>/<name>/<job_id>/``)."""
    return course_paths(log_folder).jobs_root
