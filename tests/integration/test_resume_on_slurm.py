"""Lab 10's resumable script on the real two-node Slurm: submitted with ``requeue=True``, signalled, requeued, resumed;
its final state equals an uninterrupted run's (``resume.compare_runs`` and both claims)."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

from test_slurm_jobs import END_S, REBUMP_AFTER_S, REQUEUE_END_S, REQUEUE_RESTART_S, REQUEUE_TIME_MIN

from coursekit import slurm_cli
from coursekit.jobs.watcher import watcher
from coursekit.labs.lab10_resilience import resume, resume_check

STEPS = 40  # 4 epochs of 10 steps
CHECKPOINT_EVERY = 10
STEP_TIME_S = 0.2  # the signalled job's pace: 8 s of steps, so that the signal finds it training
FIRST_STEPS = 3  # the test signals the job once it has logged this many steps (mid-epoch, between checkpoints)


def test_the_resumable_script_is_signalled_requeued_and_resumes_exactly(course: Path) -> None:
    """As test_slurm_jobs' requeue test: the test sends USR2 itself (``scancel --signal=USR2``, every process of the
    job's step: submitit's task requeues the job, the script saves at the end of its step) and shortens each hold
    Slurm puts on the requeued job."""
    runs = resume.start_resume_runs(resume_check.SOLUTION, steps=STEPS, checkpoint_every=CHECKPOINT_EVERY,
                                    time_max=REQUEUE_TIME_MIN, step_time=STEP_TIME_S, name="resume")
    job = runs.interrupted
    deadline = time.monotonic() + REQUEUE_END_S
    while len(resume_check.step_records(resume_check.read_steps(runs.interrupted_out))) < FIRST_STEPS:
        assert time.monotonic() < deadline, f"job {job.job_id} never trained ({job.state}): {job.tail(20, 'err')}"
        time.sleep(0.2)
    resume.signal_job(job)
    seen, last_bump = set(), -math.inf
    while (row := slurm_cli.row_for(slurm_cli.squeue([job.job_id]), job.job_id)) is not None:
        assert time.monotonic() < deadline, f"job {job.job_id} still {row['state']} (seen {seen})"
        seen.add(row["state"])
        held = row["state"] == "PENDING" and row.get("reason") == "BeginTime"
        if held and time.monotonic() - last_bump > REBUMP_AFTER_S:  # Slurm holds a requeued job 120 s: less
            subprocess.run(["scontrol", "update", f"JobId={job.job_id}", f"StartTime=now+{REQUEUE_RESTART_S}"],
                           check=True, capture_output=True, timeout=30)
            last_bump = time.monotonic()
        time.sleep(0.3)
    watcher().poke(job.job_id)  # it left the queue: the handle asks accounting now
    states = resume.follow_runs(runs, END_S)
    assert states == {"interrupted": "COMPLETED", "reference": "COMPLETED"}, (seen, job.tail(30, "err"))
    comparison = resume.compare_runs(runs)
    assert comparison.stop_signals[:1] in (["SIGUSR2"], ["SIGTERM"]), comparison.stop_signals  # Slurm: USR2 first
    assert comparison.resumed_at and comparison.resumed_at[0] >= FIRST_STEPS, comparison.resumed_at
    holds = [claim.holds for claim in resume.check_resume_claims(comparison)]  # each raises when it fails
    assert holds == [True, True]
    assert comparison.worst == 0.0, str(comparison)  # on a CPU: the same bits
