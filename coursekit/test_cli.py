"""The ``coursekit`` command: doctor, queue, jobs, logs, cancel, sites (and, marker ``slurm``, against the
real local cluster)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coursekit import cli, doctor
from coursekit.jobs import registry
from coursekit.jobs.handle import Job, get_job
from coursekit.labs.lab09_race.leaderboard import own_runs_path

COMMAND_TIMEOUT_S = 120


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    return tmp_path


def add_local_job(course: Path, job_id: str, name: str = "demo", tasks: int = 1, out: str = "", err: str = "") -> Job:
    folder = course / "jobs" / name / job_id
    folder.mkdir(parents=True)
    for task in range(tasks):
        (folder / f"{job_id}_{task}_log.out").write_text(out or f"task {task} line 1\ntask {task} line 2\n")
        (folder / f"{job_id}_{task}_log.err").write_text(err)
    job = Job(job_id, name, folder, site="local", scheduler="local", submitted_at=time.time())
    registry.append(job.record())
    return job


# ------------------------------------------------------------------------------------------ doctor


def test_doctor_local_site_is_all_well_without_slurm(course: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(course))  # no Slurm command reachable: not needed for the local site
    assert cli.main(["doctor", "--site", "local"]) == 0
    out = capsys.readouterr().out
    assert "✓ Python" in out and "Slurm not needed" in out and out.splitlines()[-1].startswith("all is well")
    assert "Fashion-MNIST (lab 09's small race on a CPU) -> " in out  # what it is: test_doctor_data.py


def test_doctor_lists_staged_data_and_fails_on_a_leaderboard_nobody_can_write(
        course: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    batches = course / "data" / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    (batches / "test_batch").write_bytes(b"")
    (batches / "data_batch_1").write_bytes(b"")
    board = course / "shared-race"
    board.mkdir(mode=0o1777)
    board.chmod(0o1777)
    (course / "coursekit.toml").write_text(f'leaderboard = "{board}/leaderboard.jsonl"\n')
    assert cli.main(["doctor", "--site", "local"]) == 0
    out = capsys.readouterr().out
    assert f"-> CIFAR-10: the course's data folder {batches} (real data)" in out
    (course / "data" / "fashion-mnist").mkdir()
    (course / "data" / "fashion-mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    fashion = doctor.check_data()[1]  # one file of four: the labs pass over it, the doctor says so
    assert fashion.status == "warn" and f"Fashion-MNIST in {course / 'data' / 'fashion-mnist'} is incomplete" in \
        fashion.detail
    assert f"✓ lab 09's leaderboard {board}/leaderboard.jsonl" in out
    (course / "coursekit.toml").write_text('leaderboard = "/proc/no-such-folder/leaderboard.jsonl"\n')
    assert cli.main(["doctor", "--site", "local"]) == 1
    out = capsys.readouterr().out
    assert "✗ lab 09's leaderboard /proc/no-such-folder/leaderboard.jsonl" in out and "not writable" in out


def test_doctor_checks_the_users_own_leaderboard_file(course: Path) -> None:
    """Lab 09 posts to <race folder>/<user>.jsonl: a shared folder must be sticky, the file the user's own."""
    board = course / "race-open"
    board.mkdir()
    board.chmod(0o777)  # shared but not sticky: anyone may delete another's runs file
    (course / "coursekit.toml").write_text(f'leaderboard = "{board}/leaderboard.jsonl"\n')
    check = doctor.check_leaderboard()
    assert check.status == "warn" and "not sticky" in check.detail and "chmod 1777" in check.fix
    board.chmod(0o1777)
    check = doctor.check_leaderboard()
    assert check.status == "ok" and own_runs_path(board / "leaderboard.jsonl").name in check.detail
    if os.geteuid() == 0:  # another user made "my" file first: ignored by the board, posts go to a spare name
        squatted = own_runs_path(board / "leaderboard.jsonl")
        squatted.touch()
        os.chown(squatted, 60402, 60402)
        check = doctor.check_leaderboard()
        assert check.status == "warn" and "was taken by uid60402" in check.detail and str(squatted) in check.fix
        assert f".{os.geteuid()}.<token>.jsonl instead" in check.detail



def test_doctor_without_lab_09s_module_warns_and_goes_on(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "coursekit.labs.lab09_race.leaderboard", None)  # as where torch is broken
    check = doctor.check_leaderboard()
    assert check.status == "warn" and check.detail.startswith("not checked:")

def test_doctor_unknown_site_fails_with_a_fix(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--site", "no-such-site"]) == 1
    out = capsys.readouterr().out
    assert "✗ site profile" in out and "fix: choose one of" in out and "1 problem(s)" in out


def test_doctor_slurm_site_without_slurm_commands_stops_early(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.shutil, "which", lambda command: None)
    checks = doctor.run_checks("slurm")
    assert checks[-1].title == "Slurm commands on PATH" and checks[-1].status == "fail"
    assert "sbatch" in checks[-1].detail and "slurm/cluster.sh" in checks[-1].fix


class FakeSite:
    def __init__(self, partition: str | None) -> None:
        self.partition, self.partitions = partition, {}


SINFO_ROWS = [
    {"name": "gpu", "default": True, "gpus_per_node": 4, "cpus": 16, "available": "up"},
    {"name": "cpu", "default": False, "gpus_per_node": 0, "cpus": 64, "available": "up"},
    {"name": "old", "default": False, "gpus_per_node": 2, "cpus": 8, "available": "down"},
]


@pytest.mark.parametrize(("partition", "status", "words"), [
    (None, "ok", "partition gpu: 4 GPU(s), 16 CPUs"),
    ("gpu", "ok", "partition gpu"),
    ("cpu", "warn", "no GRES gpu"),
    ("old", "fail", "not up"),
    ("nope", "fail", "sinfo lists ['cpu', 'gpu', 'old']"),
])
def test_doctor_partition_check_reads_sinfo(monkeypatch: pytest.MonkeyPatch, partition: str | None, status: str,
                                            words: str) -> None:
    from coursekit import slurm_cli

    monkeypatch.setattr(slurm_cli, "sinfo_partitions", lambda: SINFO_ROWS)
    check = doctor.check_partition(FakeSite(partition))
    assert check.status == status and words in f"{check.title} {check.detail}"


def test_doctor_report_falls_back_to_ascii_symbols() -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    checks = [doctor.Check("ok", "fine"), doctor.Check("fail", "broken", "why", "do this")]
    assert doctor.report(checks, stream) is False
    stream.seek(0)
    text = stream.read()
    assert "OK fine" in text and "XX broken  (why)" in text and "fix: do this" in text


# ------------------------------------------------------------------------------------------ logs


def test_logs_prints_the_end_of_a_job_log(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_local_job(course, "4321", tasks=2, out="a\nb\nc\nd\n", err="oops\n")
    assert cli.main(["logs", "4321", "-n", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "c\nd\n" and "4321_0_log.out" in captured.err
    assert cli.main(["logs", "4321", "--err"]) == 0
    assert capsys.readouterr().out == "oops\n"
    assert cli.main(["logs", "4321", "--task", "1", "-n", "1"]) == 0
    assert capsys.readouterr().out == "d\n"


def test_logs_missing_task_or_job_exit_1(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_local_job(course, "77")
    assert cli.main(["logs", "77", "--task", "3"]) == 1
    assert "no out log for task 3" in capsys.readouterr().err
    assert cli.main(["logs", "78"]) == 1
    assert "job '78' is not in" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["logs", "12a"], ["logs", "12", "-n", "0"], ["queue", "--interval", "-1"],
                                  ["cancel", "x"], ["nothing"], []])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2 and "usage: coursekit" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ queue, jobs, cancel


def test_queue_and_jobs_print_tables(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = add_local_job(course, "1001", name="bs64")
    add_local_job(course, "1002", name="bs128")
    (first.folder / ".coursekit_cancelled").write_text("")
    assert cli.main(["queue", "--name", "bs64"]) == 0
    out = capsys.readouterr().out
    assert "1001" in out and "CANCELLED" in out and "1002" not in out
    assert cli.main(["jobs"]) == 0
    out = capsys.readouterr().out
    assert "1001" in out and "1002" in out and "job id" in out


def test_cancel_by_name_cancels_only_active_jobs(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coursekit.jobs.local_process import process_start_time

    ended = add_local_job(course, "2001", name="sweep")
    (ended.folder / ".coursekit_cancelled").write_text("")
    # SIGINT as default (a pytest started as a background job of a script inherits it ignored): cancel's SIGINT
    # ends it, not the SIGTERM that follows after local_process.STOP_GRACE_S
    process = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        folder = course / "jobs" / "sweep" / str(process.pid)
        folder.mkdir(parents=True)
        registry.append(Job(str(process.pid), "sweep", folder, site="local", scheduler="local", pid=process.pid,
                            pid_start=process_start_time(process.pid)).record())
        assert cli.main(["cancel", "--name", "sweep"]) == 0
        assert process.wait(timeout=10) != 0, "the running job was interrupted"
    finally:
        process.kill()
    out = capsys.readouterr().out
    assert f"cancelled {process.pid} (sweep)" in out and "2001" not in out
    assert cli.main(["cancel", "--name", "sweep"]) == 0
    assert "no running or pending job called 'sweep'" in capsys.readouterr().out


def test_cancel_needs_ids_or_name_not_both(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cancel"]) == 2
    assert cli.main(["cancel", "12", "--name", "x"]) == 2
    assert cli.main(["cancel", "404"]) == 1
    assert "job '404' is not in" in capsys.readouterr().err


def test_sites_lists_every_profile_and_marks_the_chosen_one(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coursekit.sites import site_names

    assert cli.main(["sites"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in site_names():
        assert any(line.split()[:2] in (["*", name], [name, "slurm"], [name, "local"]) for line in lines), name
    assert any(line.split()[:2] == ["*", "local"] for line in lines)


def test_python_dash_m_coursekit_runs_the_cli(course: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "coursekit", "sites"], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0 and "jean-zay" in done.stdout, done.stderr


# ------------------------------------------------------------------------------------------ real Slurm


@pytest.mark.slurm
def test_doctor_all_well_on_the_local_slurm(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    done = subprocess.run([sys.executable, "-m", "coursekit", "doctor"], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    for words in ("Slurm controller answers", "Slurm accounting on", "partition gpu: 4 GPU(s)", "all is well"):
        assert words in done.stdout


@pytest.mark.slurm
def test_cancel_a_real_slurm_job(course: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from coursekit.jobs.submit import gpu_jobs_submitter

    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    monkeypatch.chdir(course)
    (course / "wait.py").write_text("import time\ntime.sleep(300)\n")
    [job_id] = gpu_jobs_submitter("wait.py", n_gpu=1, name="to-cancel", time_max="00:10:00")
    assert cli.main(["cancel", job_id]) == 0
    assert f"cancelled {job_id}" in capsys.readouterr().out
    assert get_job(job_id).wait(timeout=60) == "CANCELLED"
