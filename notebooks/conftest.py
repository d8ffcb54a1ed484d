"""nbval runs of the lab notebooks: the local site (unless one is chosen) and a throw-away course folder.

The integration test that runs notebooks against the CI's Slurm sets ``COURSEKIT_SITE=slurm`` (and, if
it likes, ``COURSEKIT_COURSE_DIR``) before pytest starts; both are kept. The kernel nbval starts
inherits this process's environment, so setting it here is enough.
"""

from __future__ import annotations

import os
import shutil
import tempfile

SITE_ENV = "COURSEKIT_SITE"
COURSE_DIR_ENV = "COURSEKIT_COURSE_DIR"
_created: list[str] = []


def pytest_configure(config: object) -> None:
    os.environ.setdefault(SITE_ENV, "local")
    if not os.environ.get(COURSE_DIR_ENV):
        course = tempfile.mkdtemp(prefix="coursekit-nbval-")
        _created.append(course)
        os.environ[COURSE_DIR_ENV] = course


def pytest_unconfigure(config: object) -> None:
    for course in _created:
        shutil.rmtree(course, ignore_errors=True)
        if os.environ.get(COURSE_DIR_ENV) == course:
            del os.environ[COURSE_DIR_ENV]
