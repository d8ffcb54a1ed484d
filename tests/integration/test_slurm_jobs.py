"""coursekit's jobs on the real local Slurm: tiny ``python -c`` jobs, followed to their end."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import slurm_helpers
from slurm_helpers import cluster
from submitit.core.utils import JobPaths

import coursekit
from coursekit import slurm_cli
from coursekit.jobs import handle
from coursekit.jobs.handle import JobFailedError
from coursekit.jobs.watcher import watcher
from coursekit.labs.lab10_resilience import resume, resume_check
from coursekit.slurm_cli import SlurmError

# jobs cannot import the test files: send their functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(slurm_helpers)

END_S = 90  # no tiny job here needs longer
# Slurm signals a 1-minute job 15 to ~45 s in, then requeues it; it may also signal at once (CI 2026-11-26: the
# first start was requeued 0.5 s in, before Python ran, and held 120 s): each hold is shortened, one more start
REQUEUE_END_S = 210
REQUEUE_TIME_MIN = 10  # never reached: the test sends the pre-timeout signal itself (see the test)
REQUEUE_RESTART_S = 5  # a requeued job may start again this long after the requeue (Slurm: 120 s)
REBUMP_AFTER_S = 3 * REQUEUE_RESTART_S  # a job still held this long after its hold was shortened: a new hold
RESUME_STEPS, RESUME_EVERY = 40, 10  # lab 10's resumable script: 4 epochs of 10 steps, a checkpoint each epoch
RESUME_STEP_TIME_S = 0.2  # its pace in the signalled job: 8 s of steps, so that the signal finds it training
RESUME_FIRST_STEPS = 3  # signalled once it logged this many steps (mid-epoch, between two checkpoints)
SHOW_ENV = ("-c 'import json, os; print(json.dumps({k: os.environ.get(k) for k in "
            "(\"CUDA_VISIBLE_DEVICES\", \"SLURM_PROCID\", \"SLURM_LOCALID\", \"COURSEKIT_RUN_ROOT\", \"TAG\")}))'")


def task_outputs(job: coursekit.Job) -> list[dict]:
    """The JSON line each task of a SHOW_ENV job printed, in task order."""
    found = []
    for task in range(job.num_tasks):
        text = JobPaths(job.folder, job_id=job.job_id, task_id=task).stdout.read_text()
        found.append(json.loads(next(line for line in text.splitlines() if line.startswith("{"))))
    return found


def test_a_single_job_runs_and_leaves_its_log_and_metrics(course: Path) -> None:
    code = ("-c 'from coursekit.metrics import MetricsWriter, default_run_dir; "
            "w = MetricsWriter(default_run_dir()); w.write(\"step\", step=1, loss=0.25); w.close(); "
            "print(\"hello from\", default_run_dir())'")
    job = coursekit.submit_jobs(code, name="single")[0]
    assert job.state in ("PENDING", "RUNNING", "COMPLETING", "COMPLETED")
    assert job.wait(END_S) == "COMPLETED"
    assert f"hello from {course / 'jobs' / 'single' / job.job_id}" in job.stdout.read_text()
    assert [r["loss"] for r in job.metrics()] == [0.25]
    assert job.submission_script.exists() and "#SBATCH --job-name=single" in job.submission_script.read_text()
    assert job.node == socket.gethostname() or job.node  # the node Slurm reports
    assert job.elapsed is not None


def test_a_sweep_of_two_commands_by_three_gpu_counts(course: Path, slurm_cluster: dict) -> None:
    counts = [1, 2, slurm_cluster["gpus_per_node"]]
    jobs = coursekit.submit_jobs([SHOW_ENV, SHOW_ENV], n_gpu=counts, name="sweep", env={"TAG": "sw"},
                                 gpu_binding="task")
    assert [j.n_gpu for j in jobs] == [c for c in counts for _ in range(2)]  # GPU counts outer (idr_pytools)
    arrays = [j.job_id.split("_")[0] for j in jobs[0::2]]
    assert [j.job_id.split("_")[0] for j in jobs[1::2]] == arrays and len(set(arrays)) == 3  # one array per count
    for job in jobs:
        assert job.wait(END_S) == "COMPLETED", job.tail(20, "err")
        outputs = task_outputs(job)
        assert [int(o["SLURM_PROCID"]) for o in outputs] == list(range(job.n_gpu))  # one task per GPU
        devices = [o["CUDA_VISIBLE_DEVICES"] for o in outputs]
        assert all(d is not None and len(d.split(",")) == 1 for d in devices), devices  # each its own GPU
        assert len(set(devices)) == job.n_gpu, devices
        assert {o["COURSEKIT_RUN_ROOT"] for o in outputs} == {str(course / "jobs" / "sweep")}
        assert {o["TAG"] for o in outputs} == {"sw"}
        assert job.submission_script.exists()


def test_torchrun_launcher_starts_one_process_per_gpu(course: Path) -> None:
    # torchrun's two processes share the task's stdout: each writes its line in one call (print() writes each
    # word, each space and the newline apart, unbuffered, and two lines came out as "rankrank 0  12  22  21 ")
    show = ("-c 'import os; os.write(1, \" \".join([\"rank\"] + [os.environ[v] for v in "
            "(\"RANK\", \"LOCAL_WORLD_SIZE\", \"WORLD_SIZE\", \"SLURM_NTASKS\")]).encode() + b\"\\n\")'")
    job = coursekit.submit_jobs(show, n_gpu=2, launcher="torchrun", name="ddp")[0]
    assert job.wait(END_S) == "COMPLETED", job.tail(20, "err")
    ranks = sorted(line for line in job.stdout.read_text().splitlines() if line.startswith("rank"))
    assert ranks == ["rank 0 2 2 1", "rank 1 2 2 1"]  # one Slurm task, torchrun's two processes


def _where_am_i(offset: int) -> tuple[int, str | None]:
    import os

    return int(os.environ["SLURM_PROCID"]) + offset, os.environ.get("CUDA_VISIBLE_DEVICES")


def test_a_function_job_brings_back_its_result(course: Path) -> None:
    job = coursekit.submit_function(_where_am_i, 100, n_gpu=2, name="fn", gpu_binding="task")
    values = job.results(timeout=END_S)
    assert [v[0] for v in values] == [100, 101]
    assert len({v[1] for v in values}) == 2  # "task" binding: each task sees its own GPU
    assert job.result() == values[0]


def test_node_binding_shows_every_task_the_nodes_gpus(course: Path) -> None:
    values = coursekit.submit_function(_where_am_i, 0, n_gpu=2, name="fnnode").results(timeout=END_S)
    assert [v[0] for v in values] == [0, 1]
    assert len({v[1] for v in values}) == 1 and len(values[0][1].split(",")) == 2  # the default for 2 GPUs


def test_a_failing_job_is_failed_with_a_readable_stderr(course: Path) -> None:
    job = coursekit.submit_jobs("-c 'import sys; print(\"about to fail\", file=sys.stderr); sys.exit(3)'",
                                name="fails")[0]
    assert job.wait(END_S) == "FAILED"
    assert "about to fail" in job.stderr.read_text()
    assert "exited with code 3" in job.tail(10, "err")
    with pytest.raises(JobFailedError, match="exited with code 3"):
        job.result()


def _boom() -> None:
    raise ZeroDivisionError("raised in the job")


def test_a_failing_function_raises_its_exception_here(course: Path) -> None:
    job = coursekit.submit_function(_boom, name="boom")
    with pytest.raises(JobFailedError, match="ZeroDivisionError: raised in the job"):
        job.result(timeout=END_S)
    assert job.state == "FAILED"


def _wait_for(job: coursekit.Job, state: str, timeout: float = END_S) -> None:
    deadline = time.monotonic() + timeout
    while job.state != state:
        assert time.monotonic() < deadline, f"job {job.job_id} never reached {state} (now {job.state})"
        time.sleep(0.2)


def test_cancel_ends_the_job_promptly(course: Path) -> None:
    job = coursekit.submit_jobs("-c 'import time; time.sleep(600)'", name="cancel")[0]
    _wait_for(job, "RUNNING")
    start = time.monotonic()
    job.cancel()
    assert job.wait(30) == "CANCELLED"
    assert time.monotonic() - start < 15
    with pytest.raises(JobFailedError):
        job.result()


def test_the_pre_timeout_signal_requeues_checkpointable_jobs_which_resume(course: Path) -> None:
    """Slurm's pre-timeout signal (USR2, what ``--signal`` asks for: tests/golden check the directive) makes
    submitit checkpoint the job and requeue it; Slurm runs it again and it resumes. Two jobs at once (one wait for
    both): a checkpointable function (submitit's ``checkpoint``) and lab 10's resumable script as a command
    (``requeue=True``: the script saves at the end of its step), whose final state must equal an uninterrupted
    run's (``resume.compare_runs`` and both of lab 10's claims). The test sends USR2 itself once each job runs:
    Slurm's own timer sends it up to a minute early or ~30 s late, which made a 1- or 2-minute limit fail either
    way on a loaded machine (the signal before Python had its handler, or the time limit during the requeue)."""
    state_file = course / "runs.txt"
    counted = coursekit.submit_function(slurm_helpers.CountRuns(), str(state_file), time_max=REQUEUE_TIME_MIN,
                                        name="requeue")
    runs = resume.start_resume_runs(resume_check.SOLUTION, steps=RESUME_STEPS, checkpoint_every=RESUME_EVERY,
                                    time_max=REQUEUE_TIME_MIN, step_time=RESUME_STEP_TIME_S, name="resume")
    jobs = {"function": counted, "script": runs.interrupted}
    started = {"function": state_file.exists,  # written inside the function: submitit's handlers are installed
               "script": lambda: len(resume_check.step_records(resume_check.read_steps(runs.interrupted_out)))
               >= RESUME_FIRST_STEPS}
    deadline = time.monotonic() + REQUEUE_END_S
    waiting = dict(jobs)
    while waiting:
        for what, job in list(waiting.items()):
            if started[what]():
                resume.signal_job(job)  # scancel --signal=USR2: every process of the job's step
                del waiting[what]
        assert time.monotonic() < deadline, f"never started: {({w: j.state for w, j in waiting.items()})}"
        time.sleep(0.2)
    seen: dict[str, set[str]] = {what: set() for what in jobs}
    last_bump = dict.fromkeys(jobs, -math.inf)
    # the test asks squeue itself: the handle's watcher slows down for old jobs (30 s), as a room needs. It stops
    # once each job has been held by its requeue and has ended again, or has left the queue: not waiting for the
    # ended rows to leave squeue (MinJobAge, 30 s) took 30 s off the test
    while rows := {what: row for what, job in jobs.items()
                   if (row := slurm_cli.row_for(slurm_cli.squeue([j.job_id for j in jobs.values()]), job.job_id))}:
        assert time.monotonic() < deadline, f"still queued: {({w: r['state'] for w, r in rows.items()})} (seen {seen})"
        if all(slurm_cli.is_terminal(row["state"]) and last_bump[what] > -math.inf for what, row in rows.items()):
            break
        for what, row in rows.items():
            seen[what].add(row["state"])
            held = row["state"] == "PENDING" and row.get("reason") == "BeginTime"
            if held and time.monotonic() - last_bump[what] > REBUMP_AFTER_S:  # each requeue's hold, once
                # Slurm holds a requeued job for AuthInfo's cred_expire (120 s): start it sooner, but not at
                # once (slurmd refuses a new credential issued in the second the old one was revoked)
                subprocess.run(["scontrol", "update", f"JobId={jobs[what].job_id}",
                                f"StartTime=now+{REQUEUE_RESTART_S}"], check=True, capture_output=True, timeout=30)
                last_bump[what] = time.monotonic()
        time.sleep(0.3)
    for job in jobs.values():
        watcher().poke(job.job_id)  # it ended: the handle asks again now, not after its slowed-down delay

    assert counted.wait(END_S) == "COMPLETED", f"states seen {seen}; stderr:\n{counted.tail(30, 'err')}"
    log = counted.stdout.read_text()
    assert "Calling checkpoint method" in log, log  # submitit checkpointed on the signal
    # and requeued it: nothing else requeues a job here (10 minutes' limit, no node fails), so Slurm ran it again,
    # once. submitit's own "Requeued job" line is not always there: Slurm signals the job's processes (SIGTERM) as
    # soon as it takes the requeue, and with proctrack/linuxproc that reaches submitit's `scontrol requeue` child,
    # which can die before it returns (seen once on an idle machine: the job requeued and resumed all the same)
    assert log.count("Starting with JobEnvironment") == 2, log
    assert counted.result() == 2  # the last start resumed from the state an earlier start left

    states = resume.follow_runs(runs, END_S)
    assert states == {"interrupted": "COMPLETED", "reference": "COMPLETED"}, (seen, runs.interrupted.tail(30, "err"))
    comparison = resume.compare_runs(runs)
    assert comparison.stop_signals[:1] in (["SIGUSR2"], ["SIGTERM"]), comparison.stop_signals  # Slurm: USR2 first
    assert comparison.resumed_at and comparison.resumed_at[0] >= RESUME_FIRST_STEPS, comparison.resumed_at
    assert [claim.holds for claim in resume.check_resume_claims(comparison)] == [True, True]  # each raises if not
    assert comparison.worst == 0.0, str(comparison)  # on a CPU: the same bits


def test_the_queue_with_several_jobs(course: Path) -> None:
    jobs = coursekit.submit_jobs([f"-c 'import time; time.sleep({s})'" for s in (30, 31, 32)], name="queue3")
    try:
        rows = slurm_cli.squeue(name="queue3")
        assert sorted(r["job_id"] for r in rows) == sorted(j.job_id for j in jobs)
        assert {r["state"] for r in rows} <= {"PENDING", "RUNNING", "CONFIGURING"}
        listed = coursekit.list_jobs(name="queue3")  # what a restarted kernel sees
        assert [j.job_id for j in listed] == [j.job_id for j in jobs]
        assert all(j.state in ("PENDING", "RUNNING", "CONFIGURING") for j in listed)
    finally:
        slurm_cli.scancel([j.job_id for j in jobs])
    assert {j.wait(30) for j in jobs} == {"CANCELLED"}


def test_accounting_keeps_final_states_after_the_queue_forgets(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, bad, stopped = coursekit.submit_jobs(
        ["-c 'print(1)'", "-c 'import sys; sys.exit(2)'", "-c 'import time; time.sleep(600)'"], name="acct")
    _wait_for(stopped, "RUNNING")
    stopped.cancel()
    assert (ok.wait(END_S), bad.wait(END_S), stopped.wait(END_S)) == ("COMPLETED", "FAILED", "CANCELLED")
    deadline = time.monotonic() + END_S
    while True:  # slurmdbd records a job's end a moment after it ends
        rows = {r["job_id"]: r["state"] for r in slurm_cli.sacct([ok.job_id, bad.job_id, stopped.job_id])}
        if len(rows) == 3 and not set(rows.values()) & slurm_cli.ACTIVE_STATES or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rows == {ok.job_id: "COMPLETED", bad.job_id: "FAILED", stopped.job_id: "CANCELLED"}
    monkeypatch.setattr(slurm_cli, "squeue", lambda *a, **k: [])  # as once MinJobAge has passed
    fresh = [handle.get_job(j.job_id) for j in (ok, bad, stopped)]
    for job in fresh:
        job._final = None  # forget the registry's record: ask sacct
    assert [j.state for j in fresh] == ["COMPLETED", "FAILED", "CANCELLED"]


def _submit_from_inside(course_dir: str) -> str:
    import os

    import coursekit

    assert os.environ.get("SLURM_JOB_ID")  # we are a Slurm job, with SLURM_* everywhere
    return coursekit.gpu_jobs_submitter("-c 'print(\"child job\")'", name="child", site="slurm")[0]


def test_submitting_from_inside_a_slurm_job(course: Path) -> None:
    parent = coursekit.submit_function(_submit_from_inside, str(course), name="parent")
    child_id = parent.result(timeout=END_S)
    child = handle.get_job(child_id)
    assert child.wait(END_S) == "COMPLETED", child.tail(10, "err")
    assert "child job" in child.stdout.read_text()


def test_controller_down_gives_slurms_message_then_works_again(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = coursekit.submit_jobs("-c 'print(1)'", name="before")[0]
    assert before.wait(END_S) == "COMPLETED"
    running = coursekit.submit_jobs("-c 'import time; time.sleep(600)'", name="during")[0]
    _wait_for(running, "RUNNING")
    down = "(?i)unable to contact slurm controller|connection refused|connect failure"
    cluster("stop-controller")
    try:
        with pytest.raises(SlurmError, match=down):  # the generic site asks sinfo first
            coursekit.gpu_jobs_submitter("-c 'print(2)'", name="refused")
        (course / "coursekit.toml").write_text('site = "slurm"\n[site_defaults]\ngpus_per_node = 2\ncpus_per_gpu = 1\n')
        with pytest.raises(SlurmError, match=down) as caught:  # a known node shape: sbatch itself refuses
            coursekit.gpu_jobs_submitter("-c 'print(2)'", name="refused")
        assert caught.value.command[:1] == ["sbatch"]
        assert not list((course / "jobs" / "refused").iterdir())  # nothing left of a job never sent
        with monkeypatch.context() as patch:  # as where slurmdbd is down too: nothing but the controller knows
            patch.setattr(slurm_cli, "accounting_enabled", lambda: False)
            assert running.state == "UNKNOWN" and running.last_error is not None
    finally:
        cluster("start-controller")
        running.cancel()
    assert running.wait(END_S) == "CANCELLED"
    after = coursekit.submit_jobs("-c 'print(3)'", name="after")[0]
    assert after.wait(END_S) == "COMPLETED"
