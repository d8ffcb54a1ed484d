"""The instructor's day on the workshop's JupyterHub, in headless chromium, three people at once.

- **The instructor** logs in on the hub's login page, gets JupyterLab as a Slurm job of theirs and posts lab 09's
  baseline from it (lab 09's own cells up to the baseline's: only the course's ``instructor`` may post it).
- **ada** is refused a GPU count outside the form's choices, picks 0 GPUs / 30 min, gets JupyterLab as a Slurm job
  of hers on node1 or node2 and runs notebook 00 (the solved lab): its training jobs are submitted from that node
  as ada, land in her course folder; her page shows the live queue view updating, the plots, the results table
  and no error; ``coursekit doctor`` in her terminal reports
  the site, the partition, the data and her course folder.
- **bob** opens lab 09's participant copy (no solutions) in his JupyterLab, fills its exercise cells with what
  their text asks for and, once the baseline is on the board, runs it all: his entry keeps the rules and counts
  on the claimed board, every claim holds.
- Then the instructor, in a notebook of their own JupyterLab (``!coursekit instructor ...`` cells, as the
  ``instructor`` Unix user with the hub's Python): ``jobs --all``, ``results``, ``room`` show ada's and bob's work
  with the user filled in, ``race verify`` re-runs bob's entry and prints the verified board, ``cancel --course``
  ends a job of each participant, ``race clear`` ends the round. ada and bob use ``coursekit`` in their terminals.

This is also notebook 00's run on the real Slurm in CI (it replaced its nbval run there) and the run of lab 09's
participant copy. The README's hub walk-through is checked against these commands (test_readme_hub.py).
"""

from __future__ import annotations

import concurrent.futures
import csv
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hub_helpers import (
    COURSE_TEMPLATE,
    HUB_URL,
    NODES,
    PARTICIPANT_PYTHON,
    REPO,
    as_user,
    course_of,
    home_of,
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

from coursekit.labs.kit import exercises

pytestmark = [pytest.mark.slurm, pytest.mark.browser]

ADA, BOB, INSTRUCTOR = "ada", "bob", "instructor"
PEOPLE = (INSTRUCTOR, ADA, BOB)
JOB_PREFIX = "ws-"  # the course's job_prefix (slurm/hub.sh: COURSE_TEMPLATE's coursekit.toml)
CANCEL_PREFIX = "wsx"  # the jobs the instructor cancels: other jobs of the course ("ws") are left alone
NOTEBOOK_00 = "00_cluster.ipynb"
RACE_NOTEBOOK = "09_race.ipynb"  # lab 09: CI's run of it is bob's copy here (notebooks/conftest.py RUN_ELSEWHERE)
RACE_COPY = f"notebooks/{RACE_NOTEBOOK}"  # lab 09's participant copy in ~/course (the template's notebooks)
BASELINE_NOTEBOOK = "race_baseline.ipynb"  # lab 09's cells up to the baseline, in the instructor's ~/course
DAY_NOTEBOOK = "instructor_day.ipynb"
RESULTS = "results.csv"  # in the instructor's home (the course template is root's)
SPAWN_TIMEOUT_S = 180  # sbatch, the queue, JupyterLab's start on a busy 2-core machine
OPEN_TIMEOUT_S = 90
DAY_TIMEOUT_S = 480  # everything the three do, from the first Run All
PAGE_TIMEOUT_S = 60
START_TIMEOUT_S = 120
POLL_S = 2.0  # Slurm keeps an ended job 30 s (MinJobAge): every job is seen
BAD_GPUS = "3"  # not one of the form's choices (0, 1, 2, 4)
# lab 09's cells the instructor runs to post the baseline: the setup, the rules and the baseline's cell
BASELINE_CELLS = ("labs.choose_pseudonym()", "race.Rules(", "race.may_post_baseline()")
# what lab 09's exercise text asks for (the cpu profile: batch size and LR help), by a line of each cell's source
RACE_ANSWERS = {"labs.predict(": "my_guess = 50",
                "(mine)": "mine = s.baseline.replace(batch_size=100, lr=0.1)",
                "my_run = ": 'timed_share = my_run["train_time_s"] / my_run["total_time_s"]',
                "ticket.grade(": 'answers = {"timed_share": 100 * timed_share, "reached": 3}'}
# the instructor's day after the runs, one cell each, as the README's hub section writes them
DAY_COMMANDS = ("coursekit instructor jobs --all",
                "coursekit instructor results --out ~/results.csv",
                "coursekit instructor room --lines 0",
                "coursekit instructor race verify --top 3",
                f"coursekit instructor cancel --course --prefix {CANCEL_PREFIX}",
                "coursekit instructor race clear")
TERMINAL_COMMANDS = ("coursekit queue", "coursekit jobs")
DOCTOR = "coursekit doctor"  # a participant's terminal (README: "Terminals")

# no outputs and no execution counts (the stored ones would make ALL_RUN true before anything ran)
FORGET_RUNS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type === 'code') { cell.outputs.clear(); cell.executionCount = null; }
    }
}"""
RUN_ALL = "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }"  # no await
# each code cell's outputs as text (from the model: cells JupyterLab has not drawn count too)
OUTPUT_TEXTS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    const found = [];
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        found.push((cell.toJSON().outputs || []).map(o => [].concat(o.text || (o.data && o.data['text/plain'])
            || o.evalue || '').join('')).join(''));
    }
    return found;
}"""
# notebook 00 as ada sees it in JupyterLab (what only a browser shows): the live queue view, the plots, tables
LIVE_TABLE = ".jp-OutputArea-output .widget-html-content table"
STDERR_OUTPUT = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
MIN_PLOTS = 2  # the first job's loss, the sweep's two panels
PROMPTS = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent.trim())"""
# every text the first live queue table shows, one per change (a MutationObserver: no change is missed); its
# textContent: JupyterLab skips drawing cells out of view (content-visibility), where innerText reads ''
RECORD_LIVE_VIEW = """(selector) => {
    window.__liveViews = [];
    new MutationObserver(() => {
        const table = document.querySelector(selector);
        const views = window.__liveViews;
        if (table && table.textContent !== views[views.length - 1]) views.push(table.textContent);
    }).observe(document, {subtree: true, childList: true, characterData: true, attributes: false});
}"""
# what the notebook's model holds (drawn or not: JupyterLab skips drawing cells out of view)
OUTPUT_KINDS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    let tables = 0, plots = 0;
    for (let i = 0; i < cells.length; i++) {
        for (const o of cells.get(i).toJSON().outputs || []) {
            const data = o.data || {};
            if ([].concat(data['text/html'] || []).join('').includes('<table')) tables++;
            if (data['image/png']) plots++;
        }
    }
    return {tables: tables, plots: plots};
}"""
RESULTS_HEADERS = """() => [...document.querySelectorAll('.jp-RenderedHTMLCommon table th')].map(th => th.textContent)"""
# where a Run All is: the kernel's status, the code cells not run yet, the error outputs
RUN_STATE = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const cells = panel.content.model.cells;
    const waiting = [], errors = [];
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        if (!cell.executionCount) waiting.push(i);
        for (const o of cell.toJSON().outputs || []) {
            if (o.output_type === 'error') errors.push(`cell ${i}: ${o.ename} ${o.evalue}`);
        }
    }
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    return {kernel: kernel ? kernel.status : null, not_run: waiting, errors: errors};
}"""
# fill an exercise cell (its placeholder's two lines replaced by the answer), as typed into it
FILL_CELL = """([index, placeholder, answer]) => {
    const cell = window.jupyterapp.shell.currentWidget.content.model.cells.get(index);
    cell.sharedModel.setSource(cell.sharedModel.getSource().replace(placeholder, answer));
}"""


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


def _wait_for_lab(page: Any, user: str) -> None:
    page.wait_for_url(f"**/user/{user}/lab**", timeout=SPAWN_TIMEOUT_S * MS)
    page.wait_for_function("() => Boolean(window.jupyterapp && window.jupyterapp.shell)", timeout=OPEN_TIMEOUT_S * MS)


def _open(page: Any, user: str, path: str) -> None:
    """Open the notebook and wait until it is the current tab (JupyterLab restores the others first) with its
    kernel idle."""
    page.goto(f"{HUB_URL}/user/{user}/lab/tree/{path}")
    current = f"""() => {{
        const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        return Boolean(panel && panel.context && panel.context.path === {json.dumps(path)}) && ({NOTEBOOK_READY})();
    }}"""
    page.wait_for_function(current, timeout=OPEN_TIMEOUT_S * MS)


def _notebook(cells: list[str]) -> bytes:
    """A notebook of code cells with no outputs."""
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                                  "source": source} for source in cells],
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
                       "nbformat": 4, "nbformat_minor": 5}).encode()


def _baseline_notebook() -> bytes:
    """Lab 09's setup, rules and baseline cells (the solved lab's, outputs left out)."""
    lab = json.loads((REPO / "notebooks" / RACE_NOTEBOOK).read_text())
    sources = ["".join(cell["source"]) for cell in lab["cells"] if cell["cell_type"] == "code"]
    return _notebook([next(s for s in sources if marker in s) for marker in BASELINE_CELLS])


def _follow_jobs(seen: dict[str, dict[str, str]]) -> None:
    """Record ``scontrol show job`` of each of ada's course jobs once it has a node (Slurm forgets a job 30 s
    after its end: MinJobAge)."""
    for job_id in user_job_ids(ADA, JOB_PREFIX):
        if job_id not in seen or seen[job_id].get("AllocNode:Sid") is None:
            info = scontrol_job(job_id)
            if info:
                seen[job_id] = {**info, "submitted_from": submitter_host(info)}


def _submit_sleep(user: str) -> str:
    """A job of the participant's that is still running at the end of the day (the instructor cancels it)."""
    done = as_user(user, ["sbatch", "--parsable", f"--job-name={CANCEL_PREFIX}-{user}-sleep", "--chdir=/tmp",
                          "--output=/dev/null", "--time=5", "--wrap", "sleep 300"])
    return done.stdout.strip().split(";")[0]


def _state(job_id: str) -> str:
    return run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


def _day(chromium: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    found: dict[str, Any] = {"jobs": {}, "waits": {}, "bob_jobs": set()}
    # a fresh round of the race (one a run before left would hold a baseline and entries already)
    as_user(INSTRUCTOR, ["env", f"COURSEKIT_COURSE_DIR={COURSE_TEMPLATE}", str(PARTICIPANT_PYTHON.parent / "coursekit"),
                         "instructor", "race", "clear"])
    begin = time.monotonic()
    with sync_playwright() as api, concurrent.futures.ThreadPoolExecutor(max_workers=2) as side:
        browser = api.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            pages = {user: browser.new_context(viewport={"width": 1400, "height": 1000}).new_page() for user in PEOPLE}
            password = {INSTRUCTOR: passwords()["admin"], ADA: passwords()["user"], BOB: passwords()["user"]}
            for user in PEOPLE:
                _login(pages[user], user, password[user])
            _submit_form(pages[ADA], BAD_GPUS, "30")
            pages[ADA].wait_for_selector(".alert", timeout=PAGE_TIMEOUT_S * MS)
            found["refusal"] = pages[ADA].inner_text(".alert")
            found["jobs_after_refusal"] = server_jobs(ADA)

            start = time.monotonic()
            for user in PEOPLE:  # three spawns at once
                _submit_form(pages[user], "0", "30")
            for user in PEOPLE:
                _wait_for_lab(pages[user], user)
            found["spawn_s"] = time.monotonic() - start
            found["server_jobs"] = {user: server_jobs(user) for user in PEOPLE}
            found["ready"] = {user: bool((server_of(user) or {}).get("ready")) for user in PEOPLE}
            doctor = side.submit(in_server, ADA, DOCTOR.split())  # her terminal, meanwhile

            # the instructor posts the baseline; ada runs notebook 00; bob fills lab 09's exercises meanwhile
            write_as(INSTRUCTOR, course_of(INSTRUCTOR) / BASELINE_NOTEBOOK, _baseline_notebook())
            _open(pages[INSTRUCTOR], INSTRUCTOR, BASELINE_NOTEBOOK)
            pages[INSTRUCTOR].evaluate(RUN_ALL)
            write_as(ADA, course_of(ADA) / NOTEBOOK_00, (REPO / "notebooks" / NOTEBOOK_00).read_bytes())
            _open(pages[ADA], ADA, NOTEBOOK_00)
            found["stored_00"] = "\n".join(pages[ADA].evaluate(OUTPUT_TEXTS))
            found["stored_00_kinds"] = pages[ADA].evaluate(OUTPUT_KINDS)
            pages[ADA].evaluate(FORGET_RUNS)
            pages[ADA].evaluate(RECORD_LIVE_VIEW, LIVE_TABLE)
            pages[ADA].evaluate(RUN_ALL)
            start = time.monotonic()
            _open(pages[BOB], BOB, RACE_COPY)
            found["race_copy_outputs"] = sum(map(len, pages[BOB].evaluate(OUTPUT_TEXTS)))
            sources = pages[BOB].evaluate("""() => { const cells = window.jupyterapp.shell.currentWidget.content
                .model.cells; const s = []; for (let i = 0; i < cells.length; i++) s.push(cells.get(i).sharedModel
                .getSource()); return s; }""")
            placeholder = f"{exercises.PLACEHOLDER_COMMENT}\n{exercises.PLACEHOLDER_RAISE}"
            exercise_cells = [i for i, source in enumerate(sources) if exercises.PLACEHOLDER_RAISE in source]
            found["exercise_cells"] = len(exercise_cells)
            for index in exercise_cells:
                answer = next(a for marker, a in RACE_ANSWERS.items() if marker in sources[index])
                pages[BOB].evaluate(FILL_CELL, [index, placeholder, answer])

            running = {INSTRUCTOR: True, ADA: True, BOB: False}  # bob runs once the baseline is posted
            deadline = time.monotonic() + DAY_TIMEOUT_S
            while any(running.values()) or not found["waits"].get(BOB):
                _follow_jobs(found["jobs"])
                found["bob_jobs"].update(user_job_ids(BOB, JOB_PREFIX))
                for user in [u for u, on in running.items() if on]:
                    if pages[user].evaluate(ALL_RUN):
                        running[user] = False
                        found["waits"][user] = time.monotonic() - start
                        continue
                    state = pages[user].evaluate(RUN_STATE)  # Run All stops at a cell's error: say which
                    assert not (state["errors"] and state["kernel"] == "idle"), f"{user}'s Run All stopped: {state}"
                if not running[INSTRUCTOR] and not found["waits"].get(BOB):
                    pages[BOB].evaluate(RUN_ALL)
                    running[BOB], found["waits"][BOB] = True, -1.0
                assert time.monotonic() < deadline, f"the runs did not finish in {DAY_TIMEOUT_S} s: {running}; " + \
                    str({user: pages[user].evaluate(RUN_STATE) for user, on in running.items() if on})
                time.sleep(POLL_S)
            _follow_jobs(found["jobs"])
            found["bob_jobs"].update(user_job_ids(BOB, JOB_PREFIX))
            for user in PEOPLE:
                found[f"errors_{user}"] = pages[user].evaluate(ERROR_OUTPUTS)
            found["view_00"] = _rendered(pages[ADA])
            found["baseline_texts"] = pages[INSTRUCTOR].evaluate(OUTPUT_TEXTS)
            found["race_texts"] = pages[BOB].evaluate(OUTPUT_TEXTS)

            # the end of the day: a job of each participant still running, the instructor's commands
            found["sleep_jobs"] = {user: _submit_sleep(user) for user in (ADA, BOB)}
            while any(_state(j) not in ("RUNNING", "PENDING") for j in found["sleep_jobs"].values()):
                assert time.monotonic() < deadline, {j: _state(j) for j in found["sleep_jobs"].values()}
                time.sleep(POLL_S / 4)
            admin = pages[INSTRUCTOR].context.new_page()  # the hub's admin page lists the servers
            admin.goto(f"{HUB_URL}/hub/admin")
            admin.wait_for_selector(f"[data-testid='user-row-name'] >> text={ADA}", timeout=PAGE_TIMEOUT_S * MS)
            found["admin_row"] = admin.locator("tr", has=admin.locator(f"text={ADA}")).first.inner_text()
            write_as(INSTRUCTOR, course_of(INSTRUCTOR) / DAY_NOTEBOOK,
                     _notebook([f"!{command}" for command in DAY_COMMANDS]))
            start = time.monotonic()
            _open(pages[INSTRUCTOR], INSTRUCTOR, DAY_NOTEBOOK)
            pages[INSTRUCTOR].evaluate(RUN_ALL)
            # asked each second: playwright's default asks on every animation frame, which keeps the page drawing
            pages[INSTRUCTOR].wait_for_function(ALL_RUN, timeout=DAY_TIMEOUT_S * MS, polling=POLL_S * MS / 2)
            found["day_s"] = time.monotonic() - start
            found["day"] = dict(zip(DAY_COMMANDS, pages[INSTRUCTOR].evaluate(OUTPUT_TEXTS), strict=True))
            found["terminals"] = {(user, command): in_server(user, command.split(), check=False)
                                  for user in (ADA, BOB) for command in TERMINAL_COMMANDS}
            found["doctor"] = doctor.result(timeout=OPEN_TIMEOUT_S).stdout
            found["total_s"] = time.monotonic() - begin
        finally:
            browser.close()
    return found


def _rendered(page: Any) -> dict[str, Any]:
    """What notebook 00's page shows after its Run All: the live view's renderings, plots, tables, prompts."""
    header = page.locator(f"{LIVE_TABLE} th").first
    return {"live_views": page.evaluate("() => window.__liveViews || []"),
            "header": header.text_content() if header.count() else None,
            "header_wraps": header.evaluate("th => getComputedStyle(th).whiteSpace") if header.count() else None,
            "prompts": page.evaluate(PROMPTS), "kinds": page.evaluate(OUTPUT_KINDS),
            "stderr_outputs": page.locator(STDERR_OUTPUT).count(),
            "texts": "\n".join(page.evaluate(OUTPUT_TEXTS)), "results_headers": page.evaluate(RESULTS_HEADERS)}


@pytest.fixture(scope="module")
def day(hub: str, chromium_path: str) -> Any:
    """The day, once: what the three saw (the tests below read it); every server stopped afterwards."""
    for user in PEOPLE:
        stop_server(user)  # the form is shown only to a user without a server
    found: dict[str, Any] = {}
    try:
        found = _in_own_thread(lambda: _day(chromium_path))
        print(f"hub: three spawns {found.get('spawn_s', 0):.1f} s, runs {found.get('waits')}, instructor's "
              f"commands {found.get('day_s', 0):.1f} s, browser part {found.get('total_s', 0):.1f} s")
        yield found
    finally:
        for user in PEOPLE:
            stop_server(user)  # the hub scancels the server jobs
        for job_id in found.get("sleep_jobs", {}).values():
            run(["scancel", job_id], check=False)
    assert all(server_jobs(user) == [] for user in PEOPLE)


def test_each_one_gets_jupyterlab_as_a_slurm_job_of_theirs(day: dict[str, Any]) -> None:
    assert "gpus: 3 is not allowed" in day["refusal"], f"the form's refusal: {day['refusal']!r}"
    assert day["jobs_after_refusal"] == [], "a refused spawn reached sbatch"
    for user, jobs in day["server_jobs"].items():
        assert len(jobs) == 1 and jobs[0]["user"] == user and jobs[0]["node"] in NODES, \
            f"{user}'s JupyterLab is not one Slurm job of theirs on node1/node2: {jobs}"
        assert jobs[0]["state"] == "RUNNING" and day["ready"][user], day["ready"]
    assert "running" in day["admin_row"].lower() or "stop server" in day["admin_row"].lower(), \
        f"the instructor's admin page does not show ada's server: {day['admin_row']!r}"


def test_ada_runs_notebook_00_from_her_server_as_herself(day: dict[str, Any]) -> None:
    assert day[f"errors_{ADA}"] == [], f"notebook 00 shows error outputs: {day[f'errors_{ADA}']}"
    training = day["jobs"]
    assert training, f"notebook 00 sent no job to Slurm (none named {JOB_PREFIX}* of {ADA})"
    node = day["server_jobs"][ADA][0]["node"]
    uid = as_user(ADA, ["id", "-u"]).stdout.strip()
    for job_id, info in training.items():
        assert info.get("UserId", "").startswith(f"{ADA}({uid})"), f"job {job_id}: UserId {info.get('UserId')}"
        assert info["submitted_from"] == node, \
            f"job {job_id} was submitted from {info['submitted_from']!r}, not from ada's node {node}"
        assert info.get("WorkDir", "").startswith(str(course_of(ADA))), f"job {job_id}: {info.get('WorkDir')}"

    registry = course_of(ADA) / "jobs" / "registry.jsonl"
    records = [json.loads(line) for line in as_user(ADA, ["cat", str(registry)]).stdout.splitlines()]
    base_ids = {job_id.split("_")[0] for job_id in training}
    for record in records:
        if record.get("event") == "submitted" and record["job_id"].split("_")[0] in base_ids:
            folder = record["folder"]
            assert folder.startswith(f"{course_of(ADA)}/jobs/"), f"job folder outside her course: {folder}"
            owner = as_user(ADA, ["stat", "-c", "%U", folder]).stdout.strip()
            assert owner == ADA, f"{folder} is owned by {owner}"
    assert base_ids <= {r["job_id"].split("_")[0] for r in records}, "a job missing from ada's registry"
    not_hers = run(["find", str(course_of(ADA)), "!", "-user", ADA]).stdout.split()
    assert not_hers == [], f"files in ada's course folder that are not hers: {not_hers[:5]}"

    for expected in ("site slurm", "partition gpu", "/opt/coursekit-hub/data", str(course_of(ADA))):
        assert expected in day["doctor"], f"`coursekit doctor` in ada's terminal does not say {expected!r}:\n{day['doctor']}"


def test_notebook_00_shows_ada_a_live_queue_plots_and_tables_and_no_error(day: dict[str, Any]) -> None:
    """What only a browser shows: the stored outputs hold no dead widget; Run All runs every cell; the live queue
    view renders as a table whose cells do not wrap, and it updates; the plots appear; the results table
    renders as HTML; no error or stderr output is shown."""
    stored, view = day["stored_00"], day["view_00"]
    renderings, texts = view["live_views"], view["texts"]
    problems = {
        "stored outputs show a dead widget": "HTML(value=" in stored or "coursekit-build-" in stored,
        "the stored queue view is not a static table": day["stored_00_kinds"]["tables"] < 1,
        "the live queue view did not update until the jobs ended":
            len(renderings) < 2 or not any("COMPLETED" in r for r in renderings),
        "the queue view's header is not 'job id' or its cells wrap":
            view["header"] != "job id" or view["header_wraps"] != "nowrap",
        "cells not run by Run All": not view["prompts"] or not all(p.strip("[]:").isdigit() for p in view["prompts"]),
        "a stderr output is shown": view["stderr_outputs"] != 0,
        "the invalid pseudonym's message is not printed": "not a pseudonym: pseudonym 'Ada Lovelace'" not in texts,
        "a claim did not hold": "CLAIM HOLDS" not in texts or "CLAIM DOES NOT HOLD" in texts,
        "the plots did not appear": view["kinds"]["plots"] < MIN_PLOTS,
        "the results table is not HTML": not {"learning rate", "validation accuracy"} <= set(view["results_headers"]),
    }
    failed = [what for what, bad in problems.items() if bad]
    assert failed == [], f"{failed}; what the page showed: " + str({**{k: v for k, v in view.items() if k != "texts"},
                                                                    "stored": day["stored_00_kinds"]})


def test_the_instructor_posts_the_baseline_and_bobs_lab_09_entry_counts(day: dict[str, Any]) -> None:
    posted = "\n".join(day["baseline_texts"])
    assert day[f"errors_{INSTRUCTOR}"] == [] and "baseline/baseline: posted 3 run(s)" in posted, posted
    assert day["race_copy_outputs"] == 0, "bob's copy of lab 09 shows outputs of the solved notebook"
    assert day["exercise_cells"] == len(RACE_ANSWERS)
    assert day[f"errors_{BOB}"] == [], f"lab 09's copy shows error outputs: {day[f'errors_{BOB}']}"
    race = "\n".join(day["race_texts"])
    assert "keeps every rule" in race and "posted 3 run(s)" in race, race[-3000:]
    assert "CLAIM DOES NOT HOLD" not in race and "CLAIM HOLDS" in race, race[-3000:]
    entry = [line for line in race.splitlines() if line.startswith(f"{BOB}/tuned-") and " seeds, " in line]
    assert len(entry) == 1 and entry[0].endswith("3 seeds, 3 reached the target, counts"), entry
    assert f"{INSTRUCTOR} may not post" not in race and "no baseline" not in race


def _said(day: dict[str, Any], command: str) -> str:
    text = day["day"][command]
    assert "Traceback" not in text and "rror:" not in text.replace("0 error", ""), f"{command}:\n{text}"
    return text


def test_the_instructors_commands_show_and_act_on_ada_and_bob(day: dict[str, Any]) -> None:
    ada_jobs = {job_id.split("_")[0] for job_id in day["jobs"]}
    results = home_of(INSTRUCTOR) / RESULTS
    _said(day, "coursekit instructor results --out ~/results.csv")
    rows = list(csv.DictReader(results.open()))
    today = {ADA: ada_jobs, BOB: {job_id.split("_")[0] for job_id in day["bob_jobs"]}}  # their homes may hold older runs
    by_user = {user: [r for r in rows if r["job_id"].split("_")[0] in jobs] for user, jobs in today.items()}
    assert by_user[ADA] and all(r["user"] == r["participant"] == ADA for r in by_user[ADA]), by_user[ADA]
    bob_race = [r for r in by_user[BOB] if r["experiment"] == "race"]
    assert len(bob_race) == 3 and all(r["user"] == r["participant"] == BOB for r in by_user[BOB]), by_user[BOB]
    with tempfile.TemporaryDirectory(prefix="coursekit-root-results-") as scratch:  # root's table, the same runs
        table = Path(scratch) / "results.csv"
        root = run(["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={COURSE_TEMPLATE}",
                    str(PARTICIPANT_PYTHON.parent / "coursekit"), "instructor", "results", "--out", str(table)])
        theirs = {(r["job_id"], r["user"]) for r in rows if r["user"] in (ADA, BOB)}
        with table.open() as lines:
            assert theirs <= {(r["job_id"], r["user"]) for r in csv.DictReader(lines)}, root.stdout

    listed = _said(day, "coursekit instructor jobs --all")
    users = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:-1] if len(line.split()) > 2}
    ours = {job_id: ADA for job_id in day["jobs"]} | {r["job_id"]: BOB for r in bob_race}
    assert {job_id: users.get(job_id) for job_id in ours} == ours, listed  # every job, its user filled in

    room = _said(day, "coursekit instructor room --lines 0")
    people = {line.split()[0]: line.split()[1] for line in room.splitlines()[1:] if line.split()[:1] in ([ADA], [BOB])}
    # each one's row, theirs alone: sacct's week may hold older jobs of other users under the same pseudonym (a
    # room rehearsal's, whose notebooks 00 kept the placeholder 'ada'), which the view rightly lists with them
    assert set(people) == {ADA, BOB}, room
    assert ADA in people[ADA].split(",") and BOB not in people[ADA].split(","), room
    assert BOB in people[BOB].split(",") and ADA not in people[BOB].split(","), room

    verified = _said(day, "coursekit instructor race verify --top 3")
    assert "verified" in verified.lower() and BOB in verified, verified

    cancelled = _said(day, f"coursekit instructor cancel --course --prefix {CANCEL_PREFIX}")
    assert "cancelled 2 job(s)" in cancelled and "denied" not in cancelled.lower(), cancelled
    deadline = time.monotonic() + START_TIMEOUT_S
    while any(_state(j) not in ("CANCELLED", "") for j in day["sleep_jobs"].values()):
        assert time.monotonic() < deadline, {j: _state(j) for j in day["sleep_jobs"].values()}
        time.sleep(POLL_S / 4)

    cleared = _said(day, "coursekit instructor race clear")
    assert "cleared the round" in cleared and f"{BOB}.jsonl" in cleared and f"{INSTRUCTOR}.jsonl" in cleared, cleared
    left = run(["find", "/opt/coursekit-hub/race", "-maxdepth", "1", "-name", "*.jsonl"]).stdout.split()
    assert left == [], f"race clear left runs files in the race folder: {left}"


def test_participants_use_coursekit_in_their_terminals(day: dict[str, Any]) -> None:
    for (user, command), said in day["terminals"].items():
        assert said.returncode == 0 and "Traceback" not in said.stderr, f"{user}: {command}: {said.stderr}"
    assert any(job_id.split("_")[0] in day["terminals"][(ADA, "coursekit jobs")].stdout for job_id in day["jobs"]), \
        day["terminals"][(ADA, "coursekit jobs")].stdout
