"""The instructor's commands on the workshop hub as the ``instructor`` Unix user (not root), where they need no
runs: the participants' ``coursekit`` console script runs for every user, and ``instructor results`` without
``--out`` on the hub's course (the template is root's) is one sentence that says what to do.

The instructor's day over ada's and bob's real runs (``jobs``, ``results``, ``room``, ``race verify``, ``cancel``,
``race clear`` from the instructor's own JupyterLab) is test_hub_browser.py. Marked ``slurm``; needs slurm/hub.sh
install and start. The users' homes are put back afterwards (conftest.py: ``homes_kept``)."""

from __future__ import annotations

import pytest
from hub_helpers import COURSE_TEMPLATE, PARTICIPANT_PYTHON, REPO, as_user

pytestmark = pytest.mark.slurm

ADA, BOB, INSTRUCTOR = "ada", "bob", "instructor"
COURSEKIT = PARTICIPANT_PYTHON.parent / "coursekit"  # the console script every user runs from a terminal


def as_instructor(command: list[str], **kwargs) -> object:
    """``coursekit`` (this checkout's) as the instructor, on the hub's course (its template, as a workshop's
    instructor would point at it: ``COURSEKIT_COURSE_DIR=/opt/coursekit-hub/course``)."""
    env = ["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={COURSE_TEMPLATE}"]
    return as_user(INSTRUCTOR, [*env, str(COURSEKIT), *command], **kwargs)


def test_the_coursekit_console_script_runs_for_every_user(hub: str) -> None:
    for user in (ADA, BOB, INSTRUCTOR):
        said = as_user(user, [str(COURSEKIT), "--help"], check=False)
        assert said.returncode == 0 and "usage: coursekit" in said.stdout, f"{user}: {said.stderr.strip()}"
    queue = as_user(ADA, [str(COURSEKIT), "queue"], check=False)  # the README's "from a terminal"
    assert queue.returncode == 0 and "Traceback" not in queue.stderr, queue.stderr


def test_results_without_out_on_the_template_is_one_sentence(hub: str) -> None:
    failed = as_instructor(["instructor", "results"], check=False)  # the template is root's: not writable
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and "--out" in failed.stderr, failed.stderr
