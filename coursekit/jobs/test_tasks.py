"""What runs inside a job, for real through submitit's local executor: the command's own exit code and
last lines, cancel said plainly, the time-limit signal noted (not fatal), elapsed time, reaped processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from coursekit.jobs.local_process import STOP_GRACE_S, process_start_time
from coursekit.jobs.submit import submit_function, submit_jobs
from coursekit.sites import SITE_ENV

END_S = 60
REAP_S = 60.0


@pytest.fixture(autouse=True)
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv(SITE_ENV, "local")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


def test_a_failing_command_ends_with_its_own_code_and_lines() -> None:
    code = "-c 'import sys; print(\"step 1\"); print(\"RuntimeError: the data is missing\", file=sys.stderr); sys.exit(3)'"
    (job,) = submit_jobs(code, name="fails")
    assert job.wait(END_S) == "FAILED"
    err = job.tail(2, "err").splitlines()
    assert err[0] == "RuntimeError: the data is missing"
    assert err[1].startswith("coursekit: the command exited with code 3")
    assert "Traceback" not in job.tail(50, "err") and "submitit" not in job.tail(50, "err")
    assert job.tail(1) == "step 1"
    assert job.exit_code == 3


def test_tail_shows_the_jobs_last_lines_not_submitits() -> None:
    (job,) = submit_jobs("-c 'print(\"a\"); print(\"b\"); print(\"c\")'", name="ok")
    assert job.wait(END_S) == "COMPLETED"
    assert job.tail(3) == "a\nb\nc"
    assert "Exiting after successful completion" in job.tail(3, raw=True)
    assert job.exit_code == 0


def test_a_cancelled_local_job_says_so_plainly() -> None:
    (job,) = submit_jobs("-c 'import time; print(\"working\", flush=True); time.sleep(60)'", name="stop")
    deadline = time.monotonic() + END_S
    while "working" not in job.tail(1) and time.monotonic() < deadline:
        time.sleep(0.1)
    job.cancel()
    assert job.wait(END_S) == "CANCELLED"
    assert job.tail(1, "err") == "coursekit: the job was cancelled"
    assert "Traceback" not in job.tail(50, "err")


def test_a_job_submitted_with_sigint_ignored_is_still_cancelled_plainly() -> None:
    """A notebook server started in the background by a shell without job control (``nohup jupyter lab &``)
    runs with SIGINT ignored, and so would every job it starts: the task restores it, so cancel still ends
    the job through its usual path (found when CI ran in such a shell: every local cancel failed)."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        (job,) = submit_jobs("-c 'import time; print(\"working\", flush=True); time.sleep(60)'", name="stop")
    finally:
        signal.signal(signal.SIGINT, before)
    deadline = time.monotonic() + END_S
    while "working" not in job.tail(1) and time.monotonic() < deadline:
        time.sleep(0.1)
    cancelled = time.time()
    job.cancel()
    assert job.wait(END_S) == "CANCELLED"
    assert job.tail(1, "err") == "coursekit: the job was cancelled"  # the task's own end, not SIGTERM's
    # when the task wrote that line (not when wait(), polling ever less often, saw the end): before the SIGTERM
    assert job.stderr.stat().st_mtime - cancelled < STOP_GRACE_S


def note_the_signal_and_go_on() -> int:
    os.kill(os.getpid(), signal.SIGUSR2)  # as Slurm does when the signal delay is longer than the job
    time.sleep(0.2)
    return 7


def test_the_time_limit_signal_is_noted_not_fatal() -> None:
    job = submit_function(note_the_signal_and_go_on, name="short", time_max="00:02:00")
    assert job.result(END_S) == 7
    assert "time limit is near" in job.tail(5, "err")


def test_elapsed_of_a_finished_local_job_is_its_run_time() -> None:
    (job,) = submit_jobs("-c 'import time; time.sleep(1.5)'", name="sleeps")
    assert job.wait(END_S) == "COMPLETED"
    assert job.stderr.stat().st_size == 0  # nothing written: its mtime is the start
    assert job.elapsed is not None and job.elapsed >= 1.4


def test_finished_local_processes_are_reaped() -> None:
    (job,) = submit_jobs("-c 'print(1)'", name="reaped")
    pid = job.pid
    assert pid is not None
    deadline = time.monotonic() + END_S
    while process_start_time(pid) is not None and time.monotonic() < deadline:  # never polled by the test
        time.sleep(0.2)
    deadline = time.monotonic() + REAP_S  # the reaper polls every second: wait for the reaping, not a clock
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists(), "the job's process stays <defunct> under this process"


PLAIN_DDP_SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")  # env:// - no coursekit inside the script
total = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(total)
print(os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], int(total.item()), flush=True)
dist.destroy_process_group()
"""


def test_a_plain_script_finds_torchs_env_variables_under_srun(tmp_path: Path) -> None:
    script = tmp_path / "plain_ddp.py"
    script.write_text(PLAIN_DDP_SCRIPT)
    (job,) = submit_jobs(str(script), n_gpu=2, name="plainddp", launcher="srun")
    assert job.wait(END_S) == "COMPLETED", job.tail(20, "err")
    assert sorted(job.tail(1, rank=r) for r in (0, 1)) == ["0 0 2 3", "1 1 2 3"]


RANK_ONE_FAILS = """
import os, sys, datetime, torch, torch.distributed as dist
if os.environ["RANK"] == "1":  # before joining: rank 0 would wait for it at the rendezvous for 10 minutes
    sys.exit("rank 1 fails on purpose")
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
dist.all_reduce(torch.ones(1))
"""
PROMPT_FAILURE_S = 120  # from rank 1's failure to the job's end (the rendezvous would wait 600 s)
STARTUP_S = 300  # two ranks importing torch on a busy 2-core machine: not part of the promptness


def test_a_rank_that_fails_ends_a_local_job_promptly(tmp_path: Path) -> None:
    script = tmp_path / "rank_one_fails.py"
    script.write_text(RANK_ONE_FAILS)
    started = time.monotonic()
    (job,) = submit_jobs(str(script), n_gpu=2, name="rankfails", launcher="srun")
    while "rank 1 fails on purpose" not in job.tail(5, "err", rank=1) and time.monotonic() - started < STARTUP_S:
        time.sleep(0.2)  # the clock starts when rank 1 has failed, however long starting the ranks took
    failed = time.monotonic()
    state = job.wait(PROMPT_FAILURE_S * 4)
    assert state == "FAILED"
    assert time.monotonic() - failed < PROMPT_FAILURE_S, "rank 0 waited for the rank that had failed"
    assert "rank 1 fails on purpose" in job.tail(5, "err", rank=1)


def visible_devices() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def test_local_jobs_use_the_gpus_their_submitter_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook server given GPUs 2,3 (CUDA_VISIBLE_DEVICES): its local jobs must run there. submitit numbers
    a local job's GPUs from 0, which put every notebook's jobs of a 4xH100 dry run on GPU 0."""
    from coursekit.jobs.tasks import SUBMITTER_GPUS_ENV, job_gpus

    assert job_gpus({SUBMITTER_GPUS_ENV: "2,3", "CUDA_VISIBLE_DEVICES": "1"}) == "3"
    assert job_gpus({SUBMITTER_GPUS_ENV: "GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES": "0,1"}) == "GPU-a,GPU-b"
    assert job_gpus({"CUDA_VISIBLE_DEVICES": "0"}) is None  # submitted without a list: submitit's numbering stands
    assert job_gpus({SUBMITTER_GPUS_ENV: "2", "CUDA_VISIBLE_DEVICES": "5"}) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the local site sees 2 GPUs
    one, two = submit_jobs("-c 'import os; print(os.environ[\"CUDA_VISIBLE_DEVICES\"])'", n_gpu=[1, 2], name="gpus")
    assert [one.wait(END_S), two.wait(END_S)] == ["COMPLETED", "COMPLETED"]
    assert (one.tail(1), two.tail(1)) == ("2", "2,3")
    function_job = submit_function(visible_devices, n_gpu=1, name="fgpus")
    assert function_job.result(timeout=END_S) == "2"
