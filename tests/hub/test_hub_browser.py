"""A participant on the workshop's JupyterHub, in headless chromium: ada logs in, is refused a GPU count
outside the form's choices, picks 0 GPUs / 30 min, gets JupyterLab as a Slurm job of hers on node1 or
node2, opens notebook 00 and runs it all; its training jobs are submitted from that node as ada, land in
her course folder, and the notebook shows no error; `coursekit doctor` in her server reports the site, the
partition, the data and her course folder. The instructor sees her server and her jobs.

This is also notebook 00's run on the real Slurm in CI (it replaced its nbval run there).
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from hub_helpers import (
    HUB_URL,
    NODES,
    PARTICIPANT_PYTHON,
    REPO,
    as_user,
    course_of,
    in_server,
    passwords,
    run,
    scontrol_job,
    server_jobs,
    server_of,
    stop_server,
    submitter_host,
    user_job_ids,
    write_as,
)
from lab_page import ALL_RUN, ERROR_OUTPUTS, MS, NOTEBOOK_READY

pytestmark = [pytest.mark.slurm, pytest.mark.browser]

USER, INSTRUCTOR = "ada", "instructor"
JOB_PREFIX = "ws-"  # the course's job_prefix (slurm/hub.sh: COURSE_TEMPLATE's coursekit.toml)
NOTEBOOK = "00_cluster_from_the_notebook.ipynb"
SPAWN_TIMEOUT_S = 180  # sbatch, the queue, JupyterLab's start on a busy 2-core machine
OPEN_TIMEOUT_S = 90
RUN_ALL_TIMEOUT_S = 420
PAGE_TIMEOUT_S = 60
POLL_S = 2.0  # Slurm keeps an ended job 30 s (MinJobAge): every job is seen
BAD_GPUS = "3"
# no outputs and no execution counts (the stored ones would make ALL_RUN true before anything ran)
FORGET_RUNS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type === 'code') { cell.outputs.clear(); cell.executionCount = null; }
    }
}"""  # not one of the form's choices (0, 1, 2, 4)


def _in_own_thread(scenario: Callable[[], Any]) -> Any:
    """Run ``scenario`` in a thread of its own: Playwright's sync API cannot start inside another one's loop
    (tests/browser keeps a session-wide one in the same worker)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(scenario).result()


def _login(page: Any, user: str, password: str) -> None:
    page.goto(f"{HUB_URL}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")


def _submit_form(page: Any, gpus: str, time_min: str) -> None:
    page.wait_for_selector("#spawn_form", timeout=PAGE_TIMEOUT_S * MS)
    page.evaluate("""([gpus]) => {  // a value the form does not offer, as a hand-made request would send
        const select = document.querySelector('#gpus');
        if (![...select.options].some(o => o.value === gpus)) select.add(new Option(gpus, gpus));
    }""", [gpus])
    page.select_option("#gpus", gpus)
    page.select_option("#time_min", time_min)
    page.click("#spawn_form button[type=submit]")


def _follow_jobs(seen: dict[str, dict[str, str]]) -> None:
    """Record ``scontrol show job`` of each of ada's course jobs once it has a node (Slurm forgets a job 30 s
    after its end: MinJobAge)."""
    for job_id in user_job_ids(USER, JOB_PREFIX):
        if job_id not in seen or seen[job_id].get("AllocNode:Sid") is None:
            info = scontrol_job(job_id)
            if info:
                seen[job_id] = {**info, "submitted_from": submitter_host(info)}


def _participant_scenario(chromium: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    found: dict[str, Any] = {"jobs": {}}
    begin = time.monotonic()
    with sync_playwright() as api, concurrent.futures.ThreadPoolExecutor(max_workers=1) as side:
        browser = api.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
            _login(page, USER, passwords()["user"])
            _submit_form(page, BAD_GPUS, "30")
            page.wait_for_selector(".alert", timeout=PAGE_TIMEOUT_S * MS)
            found["refusal"] = page.inner_text(".alert")
            found["jobs_after_refusal"] = server_jobs(USER)

            start = time.monotonic()
            _submit_form(page, "0", "30")
            page.wait_for_url(f"**/user/{USER}/lab**", timeout=SPAWN_TIMEOUT_S * MS)
            page.wait_for_function("() => Boolean(window.jupyterapp && window.jupyterapp.shell)",
                                   timeout=OPEN_TIMEOUT_S * MS)
            found["spawn_s"] = time.monotonic() - start
            found["server_jobs"] = server_jobs(USER)
            doctor = side.submit(in_server, USER, [str(PARTICIPANT_PYTHON), "-m", "coursekit", "doctor"])  # meanwhile

            write_as(USER, course_of(USER) / NOTEBOOK, (REPO / "notebooks" / NOTEBOOK).read_bytes())
            page.goto(f"{HUB_URL}/user/{USER}/lab/tree/{NOTEBOOK}")
            page.wait_for_function(NOTEBOOK_READY, timeout=OPEN_TIMEOUT_S * MS)
            page.evaluate(FORGET_RUNS)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")  # no await
            start, deadline = time.monotonic(), time.monotonic() + RUN_ALL_TIMEOUT_S
            while not page.evaluate(ALL_RUN):  # follow the jobs while the notebook runs
                _follow_jobs(found["jobs"])
                assert time.monotonic() < deadline, f"Run All did not finish in {RUN_ALL_TIMEOUT_S} s"
                time.sleep(POLL_S)
            _follow_jobs(found["jobs"])
            found["run_all_s"] = time.monotonic() - start
            found["errors"] = page.evaluate(ERROR_OUTPUTS)

            admin = browser.new_context().new_page()  # the instructor, in a session of their own
            _login(admin, INSTRUCTOR, passwords()["admin"])
            admin.goto(f"{HUB_URL}/hub/admin")
            admin.wait_for_selector(f"[data-testid='user-row-name'] >> text={USER}", timeout=PAGE_TIMEOUT_S * MS)
            found["admin_row"] = admin.locator("tr", has=admin.locator(f"text={USER}")).first.inner_text()
            found["doctor"] = doctor.result(timeout=OPEN_TIMEOUT_S).stdout
            found["total_s"] = time.monotonic() - begin
        finally:
            browser.close()
    return found


def test_participant_runs_notebook_00_in_a_slurm_jupyterlab(hub: str, chromium_path: str) -> None:
    stop_server(USER)  # the form is shown only to a user without a server
    found = _in_own_thread(lambda: _participant_scenario(chromium_path))
    print(f"hub: spawn {found.get('spawn_s', 0):.1f} s, Run All of {NOTEBOOK} {found.get('run_all_s', 0):.1f} s, "
          f"browser part {found.get('total_s', 0):.1f} s")
    try:
        assert "gpus: 3 is not allowed" in found["refusal"], f"the form's refusal: {found['refusal']!r}"
        assert found["jobs_after_refusal"] == [], "a refused spawn reached sbatch"

        jobs = found["server_jobs"]
        assert len(jobs) == 1 and jobs[0]["user"] == USER and jobs[0]["node"] in NODES, \
            f"ada's JupyterLab is not one Slurm job of ada on node1/node2: {jobs}"
        assert jobs[0]["state"] == "RUNNING"
        assert server_of(USER)["ready"]

        assert found["errors"] == [], f"notebook 00 shows error outputs: {found['errors']}"
        training = found["jobs"]
        assert training, f"notebook 00 sent no job to Slurm (none named {JOB_PREFIX}* of {USER})"
        uid = as_user(USER, ["id", "-u"]).stdout.strip()
        for job_id, info in training.items():
            assert info.get("UserId", "").startswith(f"{USER}({uid})"), f"job {job_id}: UserId {info.get('UserId')}"
            assert info["submitted_from"] == jobs[0]["node"], \
                f"job {job_id} was submitted from {info['submitted_from']!r}, not from ada's node {jobs[0]['node']}"
            assert info.get("WorkDir", "").startswith(str(course_of(USER))), f"job {job_id}: {info.get('WorkDir')}"

        registry = course_of(USER) / "jobs" / "registry.jsonl"
        records = [json.loads(line) for line in as_user(USER, ["cat", str(registry)]).stdout.splitlines()]
        base_ids = {job_id.split("_")[0] for job_id in training}
        for record in records:
            if record.get("event") == "submitted" and record["job_id"].split("_")[0] in base_ids:
                folder = record["folder"]
                assert folder.startswith(f"{course_of(USER)}/jobs/"), f"job folder outside her course: {folder}"
                owner = as_user(USER, ["stat", "-c", "%U", folder]).stdout.strip()
                assert owner == USER, f"{folder} is owned by {owner}"
        assert base_ids <= {r["job_id"].split("_")[0] for r in records}, "a job missing from ada's registry"
        not_hers = run(["find", str(course_of(USER)), "!", "-user", USER]).stdout.split()
        assert not_hers == [], f"files in ada's course folder that are not hers: {not_hers[:5]}"

        doctor = found["doctor"]  # `coursekit doctor` run in ada's server while her notebook opened
        for expected in ("site slurm", "partition gpu", "/opt/coursekit-hub/data", str(course_of(USER))):
            assert expected in doctor, f"`coursekit doctor` in ada's server does not report {expected!r}:\n{doctor}"

        assert "running" in found["admin_row"].lower() or "stop server" in found["admin_row"].lower(), \
            f"the instructor's admin page does not show ada's server: {found['admin_row']!r}"
        listed = as_user("instructor", [str(PARTICIPANT_PYTHON), "-m", "coursekit", "instructor", "jobs", "--all",
                                        "--prefix", JOB_PREFIX.rstrip("-")]).stdout
        for job_id in training:
            assert job_id in listed, f"`coursekit instructor jobs --all` does not list ada's job {job_id}:\n{listed}"
    finally:
        stop_server(USER)  # the hub scancels the server job
    assert server_jobs(USER) == []
