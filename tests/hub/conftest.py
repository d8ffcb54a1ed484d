"""The hub tests: JupyterHub on the local Slurm (``bash slurm/hub.sh start``), driven by headless chromium.

They run things as the real users ada, bob and instructor, in their homes: ``homes_kept`` puts every home back
as it was before the first of them (and checks it), so that a hub CI ran on is fresh for its first participant.

Every test here is marked ``slurm`` (the Slurm test group: one worker, one test at a time, never beside the
controller-stop tests) and ``browser``. When the hub, the cluster or chromium is missing they FAIL, never
skip: CI starts the hub (``.ci/run``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "browser"))  # lab_page: what the browser tests ask a JupyterLab page

from hub_helpers import HUB_SCRIPT, PARTICIPANT_PYTHON, PASSWORDS_FILE, homes_kept  # noqa: E402
from lab_page import CHROMIUM_NAMES, find_chromium  # noqa: E402

START_HINT = "install and start it: `bash slurm/hub.sh install && bash slurm/hub.sh start` (as root)"
STATUS_TIMEOUT_S = 30


@pytest.fixture(scope="session", autouse=True)
def users_homes_restored() -> Iterator[None]:
    """ada's, bob's and the instructor's homes as they were before these tests, after them (and checked)."""
    with homes_kept():
        yield


@pytest.fixture(scope="session")
def hub() -> str:
    """The hub answers (``slurm/hub.sh status``) and its passwords and participants' Python are there."""
    done = subprocess.run(["bash", str(HUB_SCRIPT), "status"], capture_output=True, text=True,
                          timeout=STATUS_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"the JupyterHub is not up: {done.stdout.strip()} {done.stderr.strip()}; {START_HINT}")
    for needed in (PASSWORDS_FILE, PARTICIPANT_PYTHON):
        if not needed.exists():
            pytest.fail(f"{needed} is missing; {START_HINT}")
    return done.stdout


@pytest.fixture(scope="session")
def chromium_path() -> str:
    found = find_chromium()
    if found is None:
        pytest.fail(f"no chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}): `apt-get install -y chromium`")
    return found
