"""Job states from squeue, sacct or the disk (Slurm faked), waiting that always ends, logs, metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from submitit.core.utils import cloudpickle_dump

from coursekit import slurm_cli
from coursekit.jobs import handle, local_process, registry, watcher
from coursekit.jobs.handle import Job, JobFailedError, tail_lines
from coursekit.jobs.local_process import process_start_time
from coursekit.metrics import MetricsWriter
from coursekit.slurm_cli import SlurmError


class FakeSlurmState:
    """What squeue and sacct answer; ``None`` in squeue_rows = the controller is down."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.squeue_rows: list[dict[str, str]] | None = []
        self.sacct_rows: list[dict[str, str]] = []
        self.accounting = True
        self.calls = 0
        monkeypatch.setattr(slurm_cli, "squeue", self.squeue)
        monkeypatch.setattr(slurm_cli, "sacct", lambda ids: self.sacct_rows)
        monkeypatch.setattr(slurm_cli, "accounting_enabled", lambda: self.accounting)

    def squeue(self, job_ids: list[str]) -> list[dict[str, str]]:
        self.calls += 1
        if self.squeue_rows is None:
            raise SlurmError("Unable to contact slurm controller (connect failure)", ["squeue"], 1)
        return self.squeue_rows


@pytest.fixture()
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setattr(handle, "POLL_START_S", 0.01)
    monkeypatch.setattr(handle, "POLL_MAX_S", 0.02)
    monkeypatch.setattr(watcher, "_watcher", watcher.StateWatcher(min_delay_s=0.0, max_delay_s=0.01))
    return tmp_path


@pytest.fixture()
def slurm(monkeypatch: pytest.MonkeyPatch) -> FakeSlurmState:
    return FakeSlurmState(monkeypatch)


def make_job(course: Path, job_id: str = "42", **kwargs: object) -> Job:
    folder = course / "jobs" / "demo" / job_id
    folder.mkdir(parents=True, exist_ok=True)
    return Job(job_id, "demo", folder, **kwargs)


def write_result(job: Job, outcome: str, value: object) -> None:
    cloudpickle_dump((outcome, value), job.paths.result_pickle)


def test_live_state_from_squeue(course: Path, slurm: FakeSlurmState) -> None:
    slurm.squeue_rows = [{"job_id": "42", "state": "RUNNING", "elapsed": "1:05", "node_list": "vm"}]
    job = make_job(course)
    assert (job.state, job.elapsed, job.node) == ("RUNNING", 65.0, "vm")
    assert not job.done()


def test_finished_state_from_sacct_is_cached_and_registered(course: Path, slurm: FakeSlurmState) -> None:
    slurm.sacct_rows = [{"job_id": "42", "state": "OUT_OF_MEMORY", "elapsed": "00:01:00", "node_list": "vm"}]
    job = make_job(course)
    assert job.state == "OUT_OF_MEMORY"
    calls = slurm.calls
    assert job.state == "OUT_OF_MEMORY" and slurm.calls == calls  # final: Slurm is not asked again
    assert registry.read_records()[-1]["state"] == "OUT_OF_MEMORY"


@pytest.mark.parametrize("log, outcome, state", [
    ("", ("success", 3), "COMPLETED"),
    ("", ("error", "Traceback ... ValueError"), "FAILED"),
    ("slurmstepd: error: *** JOB 42 ON vm CANCELLED AT 2026-11-26T10:00:00 DUE TO TIME LIMIT ***", None, "TIMEOUT"),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.0.", ("error", "killed"), "OUT_OF_MEMORY"),
    ("slurmstepd: error: *** JOB 42 ON vm CANCELLED AT 2026-11-26T10:00:00 ***", ("error", "x"), "CANCELLED"),
    ("*** JOB 42 ON vm CANCELLED AT 2026-11-26T10:00:00 DUE TO NODE FAILURE ***", None, "NODE_FAIL"),
    ("", None, "VANISHED"),
])
def test_without_accounting_the_disk_tells(course: Path, slurm: FakeSlurmState, log: str,
                                           outcome: tuple | None, state: str) -> None:
    slurm.accounting = False
    job = make_job(course)
    job.stderr.write_text(log + "\n")
    if outcome is not None:
        write_result(job, *outcome)
    assert job.state == state


def test_a_vanished_job_is_never_waited_for_forever(course: Path, slurm: FakeSlurmState) -> None:
    slurm.squeue_rows = [{"job_id": "42", "state": "RUNNING"}]
    job = make_job(course)
    assert job.state == "RUNNING"
    slurm.squeue_rows, slurm.accounting = [], False  # gone from the queue, no accounting, nothing on disk
    start = time.monotonic()
    assert job.wait(timeout=60) == "VANISHED"
    assert time.monotonic() - start < 30  # told at the first polls, far from the timeout (a busy machine too)
    with pytest.raises(JobFailedError, match="ended VANISHED without a result"):
        job.result()


def test_wait_times_out(course: Path, slurm: FakeSlurmState) -> None:
    slurm.squeue_rows = [{"job_id": "42", "state": "PENDING"}]
    with pytest.raises(TimeoutError, match="still PENDING"):
        make_job(course).wait(timeout=0.05)


def test_controller_down_unknown_then_error(course: Path, slurm: FakeSlurmState, monkeypatch: pytest.MonkeyPatch) -> None:
    slurm.squeue_rows, slurm.accounting = None, False
    monkeypatch.setattr(handle, "CONTROLLER_DOWN_GRACE_S", 0.05)
    job = make_job(course)
    assert job.state == "UNKNOWN"
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        job.wait(timeout=10)


def test_result_raises_the_remote_exception(course: Path, slurm: FakeSlurmState) -> None:
    slurm.sacct_rows = [{"job_id": "42", "state": "FAILED"}]
    job = make_job(course)
    write_result(job, "error", "Traceback (most recent call last):\nZeroDivisionError: division by zero")
    with pytest.raises(JobFailedError, match="ZeroDivisionError"):
        job.result()
    ok = make_job(course, "43")
    slurm.sacct_rows = [{"job_id": "43", "state": "COMPLETED"}]
    write_result(ok, "success", {"acc": 0.9})
    assert ok.result() == {"acc": 0.9}


def test_reattach_after_restart_uses_the_registry(course: Path, slurm: FakeSlurmState) -> None:
    first = make_job(course, "50", command="t.py", n_gpu=2)
    registry.append(first.record())
    slurm.sacct_rows = [{"job_id": "50", "state": "COMPLETED"}]
    assert first.state == "COMPLETED"
    slurm.sacct_rows = []
    again = handle.get_job(50)  # a new kernel: only the registry
    assert (again.job_id, again.command, again.n_gpu, again.state) == ("50", "t.py", 2, "COMPLETED")
    assert [j.job_id for j in handle.list_jobs(name="demo")] == ["50"]
    assert handle.list_jobs(name="other") == []
    with pytest.raises(KeyError, match="job '999'"):
        handle.get_job("999")


def test_a_job_missing_from_the_registry_is_found_in_its_folder(course: Path, slurm: FakeSlurmState) -> None:
    job = make_job(course, "61_2")
    (job.folder / "61_2_submitted.pkl").write_bytes(b"")
    found = handle.get_job("61_2")
    assert found.folder == job.folder and found.scheduler == "slurm"


def test_concurrent_writers_never_interleave(course: Path) -> None:
    writers, per_writer = 4, 150
    code = ("import sys; from coursekit.jobs import registry\n"
            "for i in range(int(sys.argv[2])):\n"
            "    registry.append({'event': 'submitted', 'job_id': f'{sys.argv[1]}_{i}', 'name': 'x' * 300})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w), str(per_writer)], env=dict(os.environ))
             for w in range(writers)]
    assert all(p.wait(60) == 0 for p in procs)
    lines = registry.registry_path().read_text().splitlines()
    assert len(lines) == writers * per_writer
    assert len(registry.read_records()) == writers * per_writer


def test_tail_and_metrics(course: Path, slurm: FakeSlurmState) -> None:
    job = make_job(course)
    job.stdout.write_text("".join(f"line {i}\n" for i in range(20000)))
    assert job.tail(3) == "line 19997\nline 19998\nline 19999"
    assert tail_lines(job.folder / "missing.out", 5) == []
    with pytest.raises(ValueError, match="stream="):
        job.tail(2, "both")
    with MetricsWriter(job.run_dir) as writer:
        writer.write("step", step=1, loss=2.5)
    assert [r["loss"] for r in job.metrics()] == [2.5]


def test_local_job_with_a_dead_pid(course: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job = make_job(course, str(dead.pid), scheduler="local", site="local", pid=dead.pid, pid_start="123")
    assert job.state == "VANISHED"  # not alive, nothing left on disk
    again = make_job(course, str(dead.pid + 1), scheduler="local", site="local", pid=dead.pid + 1, pid_start="1")
    write_result(again, "success", 1)
    assert again.state == "COMPLETED"


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_local_job_reattached_by_pid(course: Path, sigint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancel ends the process; one that ignores SIGINT (started in the background by a shell without job
    control) ends by the SIGTERM that follows (after a grace shortened here)."""
    monkeypatch.setattr(local_process, "STOP_GRACE_S", 0.5)
    handler = signal.SIG_IGN if sigint == "ignored" else signal.SIG_DFL  # default even where pytest inherited SIG_IGN
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                               preexec_fn=lambda: signal.signal(signal.SIGINT, handler))
    try:
        job = make_job(course, str(sleeper.pid), scheduler="local", site="local", pid=sleeper.pid,
                       pid_start=process_start_time(sleeper.pid))
        assert job.state == "RUNNING"
        job.cancel()
        sleeper.wait(10)
        assert job.wait(timeout=10) == "CANCELLED"
        impostor = make_job(course, "x", scheduler="local", site="local", pid=os.getpid(), pid_start="0")
        assert impostor.state == "VANISHED"  # same pid, different start time: not our job
    finally:
        sleeper.kill()


def test_an_array_task_cancelled_before_it_was_split_off(course: Path, slurm: FakeSlurmState) -> None:
    # Slurm lists never-started tasks of a cancelled array under the array's own id
    slurm.squeue_rows = [{"job_id": "77", "state": "CANCELLED"}, {"job_id": "77_0", "state": "COMPLETED"}]
    assert make_job(course, "77_2").state == "CANCELLED"
    assert make_job(course, "77_0").state == "COMPLETED"


def test_a_reattached_finished_job_still_tells_its_node_and_elapsed(course: Path, slurm: FakeSlurmState) -> None:
    slurm.sacct_rows = [{"job_id": "42", "state": "COMPLETED", "elapsed": "00:02:03", "node_list": "gpu7"}]
    job = make_job(course, final_state="COMPLETED")
    assert (job.state, job.elapsed, job.node) == ("COMPLETED", 123.0, "gpu7")



def test_the_final_state_is_known_without_asking_and_only_once_it_cannot_change(course: Path,
                                                                                slurm: FakeSlurmState) -> None:
    assert make_job(course, final_state="COMPLETED").final_state == "COMPLETED"
    assert make_job(course, final_state="PREEMPTED").final_state is None  # a requeue may still run it
    running = make_job(course, "43")
    assert running.final_state is None
    slurm.squeue_rows = [{"job_id": "43", "state": "FAILED"}]
    assert (running.state, running.final_state) == ("FAILED", "FAILED")

CANCELLED_ERR = """srun: got SIGCONT
srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
slurmstepd-node1: error: *** JOB 42 ON node1 CANCELLED AT 2026-11-26T05:35:06 ***
srun: forcing job termination
submitit WARNING (2026-11-26 05:35:06,413) - Bypassing signal SIGTERM
coursekit: the command was stopped by SIGTERM: train.py
srun: error: node1: task 0: Exited with exit code 143
srun: launch/slurm: _step_signal: Terminating StepId=41.0
"""


def test_tail_leaves_submitit_and_srun_out_and_says_cancelled(course: Path, slurm: FakeSlurmState) -> None:
    slurm.sacct_rows = [{"job_id": "42", "state": "CANCELLED"}]
    job = make_job(course)
    job.stderr.write_text(CANCELLED_ERR)
    assert job.tail(3, "err").splitlines() == [
        "slurmstepd-node1: error: *** JOB 42 ON node1 CANCELLED AT 2026-11-26T05:35:06 ***",
        "coursekit: the command was stopped by SIGTERM: train.py", "coursekit: job 42 was cancelled (CANCELLED)"]
    assert job.tail(1, "err", raw=True) == "srun: launch/slurm: _step_signal: Terminating StepId=41.0"
    job.stdout.write_text("epoch 1\nsubmitit INFO (2026-11-26 05:35:03,749) - Job completed successfully\n")
    assert job.tail(2) == "epoch 1\ncoursekit: job 42 was cancelled (CANCELLED)"


def test_tail_of_any_rank_and_every_log_path(course: Path, slurm: FakeSlurmState) -> None:
    slurm.squeue_rows = [{"job_id": "42", "state": "RUNNING"}]
    job = make_job(course, num_tasks=2, n_gpu=2)
    for rank in (0, 1):
        (job.folder / f"42_{rank}_log.out").write_text(f"hello from rank {rank}\n")
    assert job.tail(1, rank=1) == "hello from rank 1"
    assert [(p["rank"], p["out"].name, p["err"].name) for p in job.log_paths()] == [
        (0, "42_0_log.out", "42_0_log.err"), (1, "42_1_log.out", "42_1_log.err")]
    with pytest.raises(ValueError, match=r"rank=2: job 42 has 2 task log\(s\), use rank=0..1"):
        job.tail(rank=2)
    torchrun = make_job(course, "43", num_tasks=1, n_gpu=4)  # one task, torchrun's 4 processes inside
    with pytest.raises(ValueError, match="torchrun runs 4 processes in each task"):
        torchrun.tail(rank=1)
