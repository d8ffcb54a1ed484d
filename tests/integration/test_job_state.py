"""Job state and logs on the real local Slurm: the command's own exit code and last lines, cancel said
plainly, per-rank logs, one log per job in search_log, UNKNOWN when squeue cannot answer, and one
watcher asking Slurm for every job at a bounded rate (calls counted by a squeue/sacct shim)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

import coursekit
from coursekit import slurm_cli
from coursekit.jobs import watcher
from coursekit.jobs.handle import Job
from coursekit.labs.kit.experiments import wait_all

END_S = 90
HELD_JOBS = 8
WATCH_S = 12.0
MAX_CALLS_IN_WATCH = 6  # asked at 0, 1, 2, 4, 8 s: five rounds (one squeue each) for any number of jobs
ERROR_LINE = "RuntimeError: the data is missing"


def rank_0_fails_after_both_started(barrier: Path) -> str:
    """A 2-task command: each rank prints its rank and waits until both have (a file per rank in
    ``barrier``: an event, not a clock); then rank 0 writes an error line and exits 3 while rank 1 sleeps
    until srun --kill-on-bad-exit stops it. Which rank ends first is fixed, so its lines are too."""
    barrier.mkdir()
    return ("-c 'import os, sys, time, pathlib; rank = os.environ[\"SLURM_PROCID\"]; print(\"rank\", rank, flush=True); "
            f"folder = pathlib.Path(\"{barrier}\"); (folder / rank).touch(); "
            "[time.sleep(0.1) for _ in range(900) if len(list(folder.iterdir())) < 2]; "
            f"rank == \"0\" and sys.exit(print(\"{ERROR_LINE}\", file=sys.stderr) or 3); time.sleep(120)'")


def ended_in_accounting(job_id: str) -> dict[str, str] | None:
    """The job's sacct row once slurmdbd has recorded its end (a moment after squeue says it ended; on a
    busy machine, seconds): waits for that event, up to END_S."""
    deadline = time.monotonic() + END_S
    while True:
        row = slurm_cli.row_for(slurm_cli.sacct([job_id]), job_id)
        ended = row is not None and row["state"] not in slurm_cli.ACTIVE_STATES and row["end_time"] != "Unknown"
        if ended or time.monotonic() > deadline:
            return row
        time.sleep(0.5)


@pytest.fixture(autouse=True)
def fresh_watcher() -> None:
    watcher.reset()


def shim(folder: Path, command: str, body: str) -> Path:
    """A ``command`` earlier on PATH than Slurm's own, running ``body`` (bash)."""
    folder.mkdir(exist_ok=True)
    path = folder / command
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)
    return folder


def test_one_tasks_failing_command_gives_slurm_its_own_exit_code(course: Path) -> None:
    (job,) = coursekit.submit_jobs(f"-c 'import sys; print(\"{ERROR_LINE}\", file=sys.stderr); sys.exit(3)'",
                                   n_gpu=1, name="fails1")
    assert job.wait(END_S) == "FAILED"
    row = ended_in_accounting(job.job_id)
    assert row is not None and row["exit_code"] == "3:0", row  # the command's code, not srun's 1
    assert job.exit_code == 3


def test_a_failing_rank_gives_the_job_its_exit_code_and_last_lines(course: Path) -> None:
    (job,) = coursekit.submit_jobs(rank_0_fails_after_both_started(course / "barrier"), n_gpu=2, name="fails")
    assert job.wait(END_S) == "FAILED"
    assert job.exit_code == 3  # sacct says 15: srun --kill-on-bad-exit stopped rank 1 with SIGTERM
    last = job.tail(2, "err").splitlines()
    assert last[0] == ERROR_LINE, job.tail(20, "err", raw=True)
    assert last[1].startswith("coursekit: the command exited with code 3"), job.tail(20, "err", raw=True)
    assert "Traceback" not in job.tail(30, "err") and "srun:" not in job.tail(30, "err")
    assert "stopped by SIGTERM" in job.tail(1, "err", rank=1), job.tail(20, "err", rank=1, raw=True)
    assert job.tail(1, rank=1) == "rank 1" and job.tail(1, rank=0) == "rank 0"
    assert [p["out"].is_file() for p in job.log_paths()] == [True, True]
    found = coursekit.search_log(contains=job.job_id, with_err=True)
    assert [Path(p).name for p in found["stdout"]] == [f"{job.job_id}_0_log.out"]  # one log per job
    assert len(coursekit.search_log(contains=job.job_id, all_tasks=True)) == 2


def test_the_last_lines_of_a_job_are_its_own(course: Path) -> None:
    (job,) = coursekit.submit_jobs("-c 'print(\"a\"); print(\"b\"); print(\"c\")'", name="ok")
    assert job.wait(END_S) == "COMPLETED"
    assert job.tail(3) == "a\nb\nc"
    assert job.exit_code == 0


def test_a_cancelled_job_says_so(course: Path) -> None:
    (job,) = coursekit.submit_jobs("-c 'import time; print(\"working\", flush=True); time.sleep(300)'", name="stop")
    deadline = time.monotonic() + END_S
    while "working" not in job.tail(1) and time.monotonic() < deadline:
        time.sleep(0.2)
    job.cancel()
    assert job.wait(END_S) == "CANCELLED"
    assert "cancelled" in job.tail(1, "err").lower() and "cancelled" in job.tail(1).lower()
    assert "Traceback" not in job.tail(30, "err")


def test_squeue_unanswered_is_unknown_with_why_not_accounting(course: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (job,) = coursekit.submit_jobs("-c 'import time; time.sleep(300)'", name="live")
    try:
        deadline = time.monotonic() + END_S
        while job.state != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert job.state == "RUNNING"
        down = shim(tmp_path / "bin", "squeue",
                    'echo "squeue: error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
        monkeypatch.setenv("PATH", f"{down}:{Path(shutil.which('sacct') or 'sacct').parent}")
        watcher.reset()
        again = coursekit.get_job(job.job_id)  # sacct still answers (it knows the job)
        assert again.state == "UNKNOWN"
        assert "Unable to contact slurm controller" in again.state_reason
    finally:
        monkeypatch.undo()
        job.cancel()
    assert job.wait(END_S) == "CANCELLED"


def test_one_watcher_asks_for_every_job_at_a_bounded_rate(course: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls.log"
    held = []
    for _ in range(HELD_JOBS):  # held: PENDING without taking the cluster's GPUs
        done = subprocess.run(["sbatch", "--hold", "--parsable", "-o", "/dev/null", "--wrap", "sleep 1"],
                              capture_output=True, text=True, check=True)
        held.append(done.stdout.strip().split(";")[0])
    try:
        bin_dir = tmp_path / "bin"
        for command in ("squeue", "sacct"):
            real = shutil.which(command)
            shim(bin_dir, command, f'echo "{command}" >> "{calls}"\nexec "{real}" "$@"')
        monkeypatch.setenv("PATH", f"{bin_dir}:{Path(shutil.which('sbatch') or 'sbatch').parent}")
        jobs = [Job(job_id, "held", course / "jobs" / "held" / job_id) for job_id in held]
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="still running"):
            wait_all(jobs, timeout_s=WATCH_S)
        assert all(repr(job).endswith("state='PENDING')") for job in jobs)
        counted = calls.read_text().split() if calls.exists() else []
        assert time.monotonic() - start >= WATCH_S
        assert 1 <= len(counted) <= MAX_CALLS_IN_WATCH, counted  # not one per job per second
        assert all(job.state_reason for job in jobs)  # Slurm's reason (JobHeldUser)
    finally:
        subprocess.run(["scancel", *held], capture_output=True, check=False)
