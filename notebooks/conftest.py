"""nbval runs of the lab notebooks: the local site (unless one is chosen) and a throw-away course folder.

The integration test that runs notebooks against the CI's Slurm sets ``COURSEKIT_SITE=slurm`` (and, if
it likes, ``COURSEKIT_COURSE_DIR``) before pytest starts; both are kept. The kernel nbval starts
inherits this process's environment, so setting it here is enough. The pseudonym is ``ada`` (labs 01-09
take the one chosen in lab 00, which nbval runs separately; a set ``$COURSEKIT_PSEUDONYM`` is never written
to the user's config).

Four notebooks run in CI as a participant meets them instead (``RUN_ELSEWHERE``): 00 in a JupyterHub server
on the real Slurm, 06 as a participant's copy in the browser on the real Slurm (both fail when Slurm is not
up), 04 and 05 as participants' copies in the browser on the local site, their scripts completed in the
editor. A run of the whole folder on the local site leaves them to those tests rather than execute them twice
(CI's budget). Named on the command line, they run here too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

SITE_ENV = "COURSEKIT_SITE"
COURSE_DIR_ENV = "COURSEKIT_COURSE_DIR"
PSEUDONYM_ENV = "COURSEKIT_PSEUDONYM"  # labs 01-09 take the pseudonym chosen in lab 00; nbval runs each alone
_created: list[str] = []
# notebooks that CI runs as a participant does, not by the local nbval run -> the test that runs them
RUN_ELSEWHERE = {
    "00_cluster_from_the_notebook.ipynb": "tests/hub/test_hub_browser.py",  # in a JupyterHub server, on Slurm
    "06_data_parallelism.ipynb": "tests/browser/test_participant_ddp.py",  # the participant's copy, on Slurm
    "04_mixed_precision.ipynb": "tests/browser/test_participant_exercises.py",  # the participant's copy
    "05_data_loading_profiler.ipynb": "tests/browser/test_participant_exercises.py",
}


def pytest_configure(config: object) -> None:
    os.environ.setdefault(SITE_ENV, "local")
    os.environ.setdefault(PSEUDONYM_ENV, "ada")
    if not os.environ.get(COURSE_DIR_ENV):
        course = tempfile.mkdtemp(prefix="coursekit-nbval-")
        _created.append(course)
        os.environ[COURSE_DIR_ENV] = course


def pytest_unconfigure(config: object) -> None:
    for course in _created:
        shutil.rmtree(course, ignore_errors=True)
        if os.environ.get(COURSE_DIR_ENV) == course:
            del os.environ[COURSE_DIR_ENV]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The notebooks of RUN_ELSEWHERE are left to their tests, unless this run is one of them or names them."""
    if collection_path.name not in RUN_ELSEWHERE or os.environ.get(SITE_ENV) != "local":
        return None
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return None if collection_path.resolve() in named else True
