"""Where a course keeps its files: the course folder, its job folders and its registry."""

from __future__ import annotations

import os
import sys
from pathlib import Path

COURSE_DIR_ENV = "COURSEKIT_COURSE_DIR"
COURSE_CONFIG_FILE = "coursekit.toml"
JOBS_SUBDIR = "jobs"


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


def jobs_dir(log_folder: str = JOBS_SUBDIR) -> Path:
    """Where job folders live (``<root>/<name>/<job_id>/``); the one place that decides it.

    ``log_folder`` (a site's, default ``jobs``) with ``$VARS`` and ``~`` expanded, relative to the course
    folder unless absolute. ``Site.jobs_root()`` and the sbatch templates (``python -m coursekit.course``)
    call this."""
    root = Path(os.path.expandvars(log_folder)).expanduser()
    return root if root.is_absolute() else course_dir() / root


def course_config_path() -> Path:
    return course_dir() / COURSE_CONFIG_FILE


def site_jobs_dir() -> Path:
    """``jobs_dir`` of the course's site (its ``log_folder``); the course's ``jobs/`` when no site loads."""
    from coursekit.sites import load_site  # sites import this module

    try:
        return load_site().jobs_root()
    except (ValueError, OSError):
        return jobs_dir()


def course_setting(key: str, default: str | None = None) -> str | None:
    """A top-level value of the course's ``coursekit.toml`` (``data_dir``, ``leaderboard``, ``job_prefix``...),
    relative paths taken from the course folder's side; ``default`` when the file or the key is absent."""
    path = course_config_path()
    if not path.is_file():
        return default
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as handle:
            value = tomllib.load(handle).get(key)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML ({error})") from error
    return default if value is None else str(value)


def course_path(key: str, default: str) -> Path:
    """A path setting of the course (``course_setting``), ``$VARS`` and ``~`` expanded, relative to the course."""
    path = Path(os.path.expandvars(course_setting(key) or default)).expanduser()
    return path if path.is_absolute() else course_dir() / path


if __name__ == "__main__":  # `python -m coursekit.course`: the jobs folder, for shell scripts
    print(site_jobs_dir())
