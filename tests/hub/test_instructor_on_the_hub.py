"""The instructor's commands on the workshop hub, run as the ``instructor`` Unix user (not root), over two real
participants: ada and bob each run a sweep (one job per run) and a race entry (one job making two runs, lab 09's
cpu way) from their own ``~/course``; ``coursekit instructor results``, ``jobs --all`` and ``room`` show both, with
the Unix user filled in; ``cancel --course`` cancels both participants' jobs (the instructor coordinates the
course's Slurm account: slurm/cluster.sh account); a failure is one sentence. The participants' ``coursekit``
console script runs for every user.

No browser and no hub server: the jobs are submitted as the users (runuser) with the kit's API, as their
notebooks do. Marked ``slurm``; needs slurm/hub.sh install and start (the users, the course template, the
account). The users' homes are put back afterwards (conftest.py: ``homes_kept``)."""

from __future__ import annotations

import csv
import json
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hub_helpers import COURSE_TEMPLATE, PARTICIPANT_PYTHON, REPO, as_user, course_of, run

pytestmark = pytest.mark.slurm

ADA, BOB, INSTRUCTOR = "ada", "bob", "instructor"
PARTICIPANTS = (ADA, BOB)
COURSEKIT = PARTICIPANT_PYTHON.parent / "coursekit"  # the console script every user runs from a terminal
SWEEP_RUNS, RACE_RUNS = 1, 2
RUNS_TIMEOUT_S = 420
CANCEL_PREFIX = "wsx"  # the cancel test's own course prefix: other jobs of the hub's course ("ws") are left alone
START_TIMEOUT_S = 120
POLL_S = 0.5
# as a participant, from ~/course (the hub's spawn copies the template there): a sweep and a one-job race entry
RUNS_AS = """
import json, os, sys
os.umask(0o027)
from coursekit import labs
from coursekit.train.config import TrainConfig
me = sys.argv[1]
c = TrainConfig(model="mlp", dataset="generated", num_samples=400, num_classes=4, image_size=8, batch_size=50,
                epochs=1, progress="off", device="cpu")
bs = labs.run_sweep([c], name=labs.job_name(me, "bs"), timeout_s=300)
race = labs.run_sweep([c.replace(seed=s) for s in range(2)], name=labs.job_name(me, "race"), one_job=True,
                      timeout_s=300)
print(json.dumps({"bs": sorted({str(j) for j in bs.column("job_id")}), "race": sorted({str(j) for j in race.column("job_id")})}))
"""


def as_instructor(command: list[str], **kwargs) -> object:
    """``coursekit`` (this checkout's) as the instructor, on the hub's course (its template, as a workshop's
    instructor would point at it)."""
    env = ["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={COURSE_TEMPLATE}"]
    return as_user(INSTRUCTOR, [*env, str(COURSEKIT), *command], **kwargs)


def test_the_coursekit_console_script_runs_for_every_user(hub: str) -> None:
    for user in (ADA, BOB, INSTRUCTOR):
        said = as_user(user, [str(COURSEKIT), "--help"], check=False)
        assert said.returncode == 0 and "usage: coursekit" in said.stdout, f"{user}: {said.stderr.strip()}"
    queue = as_user(ADA, [str(COURSEKIT), "queue"], check=False)  # the README's "from a terminal"
    assert queue.returncode == 0 and "Traceback" not in queue.stderr, queue.stderr


@pytest.fixture(scope="module")
def participants_runs(hub: str) -> Iterator[dict[str, dict[str, list[str]]]]:
    """ada's and bob's job ids (``bs``: a sweep of one job, ``race``: one job of two runs), both at once."""

    def runs_of(user: str) -> dict[str, list[str]]:
        course = course_of(user)
        as_user(user, ["sh", "-c", 'umask 027; [ -d "$1" ] || cp -r "$2" "$1"', "sh", str(course), str(COURSE_TEMPLATE)])
        env = ["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={course}", "COURSEKIT_PROFILE=cpu"]
        done = as_user(user, [*env, str(PARTICIPANT_PYTHON), "-c", RUNS_AS, user], timeout_s=RUNS_TIMEOUT_S)
        return json.loads(done.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(len(PARTICIPANTS)) as both:
        yield dict(zip(PARTICIPANTS, both.map(runs_of, PARTICIPANTS), strict=True))


def test_results_jobs_and_room_cover_ada_and_bob_as_the_instructor(participants_runs: dict) -> None:
    ours = {job_id: user for user, jobs in participants_runs.items() for ids in jobs.values() for job_id in ids}
    out = Path(tempfile.mkdtemp(prefix="coursekit-results-", dir="/tmp"))
    out.chmod(0o1777)
    try:
        said = as_instructor(["instructor", "results", "--out", str(out / "results.csv")])
        rows = [r for r in csv.DictReader(open(out / "results.csv")) if r["job_id"] in ours]
        counts = sorted((r["participant"], r["user"], r["experiment"]) for r in rows)
        want = sorted((user, user, experiment) for user in PARTICIPANTS
                      for experiment, n in (("bs", SWEEP_RUNS), ("race", RACE_RUNS)) for _ in range(n))
        assert counts == want, f"{said.stdout}\n{counts}"
        root = run(["env", f"PYTHONPATH={REPO}", f"COURSEKIT_COURSE_DIR={COURSE_TEMPLATE}", str(COURSEKIT),
                    "instructor", "results", "--out", str(out / "root.csv")])  # root gets the same table
        assert sorted((r["participant"], r["experiment"]) for r in csv.DictReader(open(out / "root.csv"))
                      if r["job_id"] in ours) == [(p, e) for p, _, e in want], root.stdout
    finally:
        run(["rm", "-rf", str(out)])

    failed = as_instructor(["instructor", "results"], check=False)  # the template is root's: not writable
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and "--out" in failed.stderr, failed.stderr

    listed = as_instructor(["instructor", "jobs", "--all"]).stdout
    users = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:-1] if line.split()}
    assert {job_id: users.get(job_id) for job_id in ours} == ours, listed  # every job, its user filled in

    room = as_instructor(["instructor", "room", "--lines", "0"]).stdout
    people = {line.split()[0]: line.split()[1] for line in room.splitlines()[1:] if line.split()[:1] in ([ADA], [BOB])}
    assert people == {ADA: ADA, BOB: BOB}, room


def _submit_sleep(user: str) -> str:
    done = as_user(user, ["sbatch", "--parsable", f"--job-name={CANCEL_PREFIX}-{user}-sleep", "--chdir=/tmp",
                          "--output=/dev/null", "--time=5", "--wrap", "sleep 300"])
    return done.stdout.strip().split(";")[0]


def _state(job_id: str) -> str:
    return run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


def test_the_instructor_cancels_ada_and_bobs_course_jobs(hub: str) -> None:
    jobs = {user: _submit_sleep(user) for user in PARTICIPANTS}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(_state(j) not in ("RUNNING", "PENDING") for j in jobs.values()):
            assert time.monotonic() < deadline, {j: _state(j) for j in jobs.values()}
            time.sleep(POLL_S)
        said = as_instructor(["instructor", "cancel", "--course", "--prefix", CANCEL_PREFIX], check=False)
        assert said.returncode == 0 and "denied" not in said.stderr.lower(), said.stderr
        assert f"cancelled {len(jobs)} job(s)" in said.stdout, said.stdout
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(_state(j) not in ("CANCELLED", "") for j in jobs.values()):
            assert time.monotonic() < deadline, {j: _state(j) for j in jobs.values()}
            time.sleep(POLL_S)
    finally:
        for user, job_id in jobs.items():
            as_user(user, ["scancel", job_id], check=False)
