"""Where a course keeps its files: the course folder, its job folders and its registry."""

from __future__ import annotations

import os
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


def jobs_dir() -> Path:
    """Root of every job folder: ``<course>/jobs/<name>/<job_id>/``."""
    return course_dir() / JOBS_SUBDIR


def course_config_path() -> Path:
    return course_dir() / COURSE_CONFIG_FILE
