"""Two participants of the workshop hub (slurm/hub.sh: ada and bob, real Unix users) and the instructor:
bob cannot cancel ada's job, read its log, or write into her course folder (registry, job folders); the
instructor reads all of it; what the hub's first spawn copies into a course folder belongs to its participant.

No browser and no hub server: the jobs are submitted with sbatch as the users (runuser), the way the servers
do. Marked ``slurm`` (the Slurm group), they need slurm/hub.sh install (the users and their homes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_helpers import as_user, course_of, home_of, run

pytestmark = pytest.mark.slurm

ADA, BOB, INSTRUCTOR = "ada", "bob", "instructor"
JOB_NAME = "ws-ada-perm"
START_TIMEOUT_S = 120
POLL_S = 0.5


def _job_state(job_id: str) -> str:
    return run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout.strip()


@pytest.fixture
def ada_job(hub: str) -> Iterator[tuple[str, Path]]:
    """A running job of ada's (sleep), its log in her course folder: (job id, log path); cancelled at the end."""
    course = course_of(ADA)
    as_user(ADA, ["mkdir", "-p", str(course / "jobs")])
    done = as_user(ADA, ["sbatch", "--parsable", f"--job-name={JOB_NAME}", f"--chdir={course}", "--time=5",
                         f"--output={course}/jobs/{JOB_NAME}-%j.out", "--wrap", "echo secret-of-ada; sleep 300"])
    job_id = done.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _job_state(job_id) != "RUNNING":
            assert time.monotonic() < deadline, f"ada's job {job_id} not running after {START_TIMEOUT_S} s"
            time.sleep(POLL_S)
        log = course / "jobs" / f"{JOB_NAME}-{job_id}.out"
        while "secret-of-ada" not in run(["cat", str(log)], check=False).stdout:
            assert time.monotonic() < deadline, f"ada's job {job_id} wrote nothing to {log}"
            time.sleep(POLL_S)
        yield job_id, log
    finally:
        as_user(ADA, ["scancel", job_id], check=False)


def test_bob_cannot_cancel_adas_job(ada_job: tuple[str, Path]) -> None:
    job_id, _ = ada_job
    refused = as_user(BOB, ["scancel", job_id], check=False)
    assert "denied" in (refused.stderr + refused.stdout).lower(), f"scancel as bob: {refused.stderr!r}"
    time.sleep(2 * POLL_S)  # a cancel would show at once (KillWait 5 s: CANCELLED/COMPLETING first)
    assert _job_state(job_id) == "RUNNING", "bob's scancel ended ada's job"


def test_bob_cannot_read_or_write_adas_course_and_the_instructor_reads_it(ada_job: tuple[str, Path]) -> None:
    _, log = ada_job
    course = course_of(ADA)
    assert as_user(BOB, ["cat", str(log)], check=False).returncode != 0, "bob read ada's job log"
    assert as_user(BOB, ["ls", str(course)], check=False).returncode != 0, "bob listed ada's course folder"
    forged = '{"event": "submitted", "job_id": "1", "name": "ws-ada-forged"}\n'
    wrote = as_user(BOB, ["sh", "-c", 'printf %s "$1" >> "$2"', "sh", forged, str(course / "jobs" / "registry.jsonl")],
                    check=False)
    assert wrote.returncode != 0, "bob appended to ada's job registry"
    made = as_user(BOB, ["mkdir", str(course / "jobs" / "ws-ada-forged")], check=False)
    assert made.returncode != 0, "bob made a job folder in ada's course"
    assert "secret-of-ada" in as_user(INSTRUCTOR, ["cat", str(log)]).stdout, "the instructor cannot read ada's log"
    assert as_user(INSTRUCTOR, ["sh", "-c", 'printf x >> "$1"', "sh", str(log)], check=False).returncode != 0, \
        "the instructor could write into ada's files (read-only is enough)"


def test_homes_keep_participants_apart() -> None:
    for user in (ADA, BOB):
        mode = run(["stat", "-c", "%a %U %G", str(home_of(user))]).stdout.split()
        assert mode == ["2750", user, INSTRUCTOR], f"{user}'s home: {mode} (want 2750 {user} {INSTRUCTOR})"
    assert as_user(ADA, ["ls", str(home_of(BOB))], check=False).returncode != 0, "ada listed bob's home"

