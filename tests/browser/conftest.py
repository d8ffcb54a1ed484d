"""JupyterLab in a real browser: a JupyterLab server on 127.0.0.1 (a free port, a token, its own settings and
a throw-away course folder) and Debian's ``chromium`` driven by Playwright for Python.

Every test here is marked ``browser``. When chromium or Playwright is missing they FAIL (never skip): CI
installs both (``.ci/run``: ``apt-get install chromium``; pip: the ``test`` extra).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lab_page import CHROMIUM_NAMES, find_chromium

HERE = Path(__file__).resolve().parent
INSTALL_HINT = "install it: `apt-get install -y chromium` and `pip install -e '.[test]'` (playwright)"
# a cap, not a wait: beside a CPU hog on CI's 2 cores, with three test workers, one JupyterLab took 56 s to write
# its first log line and was stopped at 60 s while loading its extensions
SERVER_START_TIMEOUT_S = 180.0
SERVER_POLL_S = 0.25
SERVER_STOP_TIMEOUT_S = 15.0
# User settings of the test's JupyterLab: every cell kept in the page (no windowing: the test reads all
# outputs), no news or update checks (a toast over the page, and no network here)
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.browser)


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: its URL, token, served folder and course folder."""

    url: str
    token: str
    root: Path
    course: Path
    log: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    found = find_chromium()
    if found is None:
        pytest.fail(f"no chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)}): {INSTALL_HINT}")
    return found


@pytest.fixture(scope="session")
def playwright_api():  # noqa: ANN201 - playwright's types are only there when it is installed
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        pytest.fail(f"Playwright for Python is not installed ({error}): {INSTALL_HINT}")
    with sync_playwright() as api:
        yield api


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"JupyterLab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=SERVER_POLL_S * 8) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(SERVER_POLL_S)
    pytest.fail(f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def lab_site() -> str:
    """The site the kernels send their jobs to: ``local``; a test module may override this fixture
    (``slurm``: the local two-node cluster, slurm/cluster.sh)."""
    return "local"


@pytest.fixture
def jupyter_lab(tmp_path: Path, lab_site: str) -> Iterator[Lab]:
    """JupyterLab serving ``tmp_path/served`` (the test copies notebooks there), kernels on ``lab_site`` in
    the cpu profile with their own course folder; stopped (with its kernels) at the end."""
    served, course, settings = tmp_path / "served", tmp_path / "course", tmp_path / "lab-settings"
    for folder in (served, course, settings):
        folder.mkdir()
    for relative, values in LAB_SETTINGS.items():
        (settings / relative).parent.mkdir(parents=True, exist_ok=True)
        (settings / relative).write_text(json.dumps(values))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "COURSEKIT_SITE": lab_site, "COURSEKIT_COURSE_DIR": str(course),
           "COURSEKIT_PROFILE": "cpu", "COURSEKIT_PSEUDONYM": "ada", "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "PYTHONUNBUFFERED": "1"}
    env.pop("MPLBACKEND", None)  # the notebook chooses inline
    log = tmp_path / "jupyterlab.log"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={served}", "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate"]
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=served)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(f"{url}/api/status?token={token}", process, log)
        yield Lab(url, token, served, course, log)
    finally:
        process.terminate()  # the server shuts its kernels down
        try:
            process.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def page(playwright_api, chromium_path: str):  # noqa: ANN001, ANN201
    """A page of a fresh headless chromium (``--no-sandbox``: CI runs as root)."""
    browser = playwright_api.chromium.launch(executable_path=chromium_path, headless=True, args=["--no-sandbox"])
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        yield context.new_page()
    finally:
        browser.close()
