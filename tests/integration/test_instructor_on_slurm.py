"""``coursekit instructor`` against the real local Slurm: setup with the doctor, the room's jobs found by the
course's job prefix (squeue of every user, sacct for finished ones), cancelling them, gathering results."""

from __future__ import annotations

import csv
import secrets
import string
import subprocess
from pathlib import Path

import pytest

import coursekit
from coursekit import cli

END_S = 120
PREFIX_CHARS = string.ascii_lowercase + string.digits
SLEEP = "-c 'import time; time.sleep(300)'"
TINY_RUN = "-m coursekit.train --model mlp --dataset generated --num-samples 200 --image-size 8 --epochs 1 --progress off"


@pytest.fixture(scope="module")
def prefix() -> str:
    """A job prefix no job in Slurm's accounting has used (cancel --course hits every user's jobs with it, and
    the room counts a week of finished jobs: an earlier run's jobs under the same prefix would be counted)."""
    used = subprocess.run(["sacct", "-a", "-n", "-P", "-X", "-S", "now-7days", "-o", "jobname"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.split()
    while True:
        drawn = "k" + "".join(secrets.choice(PREFIX_CHARS) for _ in range(4))
        if not any(name.startswith(drawn + "-") for name in used):
            return drawn


def test_instructor_follows_cancels_and_gathers_the_course_on_slurm(course: Path, prefix: str,
                                                                     capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["instructor", "setup", str(course), "--site", "slurm", "--job-prefix", prefix, "--force"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "coursekit.toml" in out and "slurm" in out.lower()  # the doctor ran on the site
    assert (course / "notebooks" / "00_cluster.ipynb").exists()

    run = coursekit.submit_jobs(TINY_RUN, name=f"{prefix}-bob-mlp", time_max="00:05:00")[0]
    ours = coursekit.submit_jobs(SLEEP, name=f"{prefix}-ada-sleep", time_max="00:10:00")[0]
    other = coursekit.submit_jobs(SLEEP, name=f"zz{prefix}-other", time_max="00:10:00")[0]
    try:
        assert run.wait(END_S) == "COMPLETED"
        assert cli.main(["instructor", "jobs"]) == 0
        out = capsys.readouterr().out
        assert f"{prefix}-ada-sleep" in out and f"zz{prefix}-other" not in out and ours.job_id in out

        assert cli.main(["instructor", "cancel", "--course"]) == 0
        assert ours.job_id in capsys.readouterr().out
        assert ours.wait(END_S) == "CANCELLED"
        assert other.state in ("PENDING", "RUNNING")  # another course's job is left alone

        assert cli.main(["instructor", "jobs", "--all"]) == 0
        out = capsys.readouterr().out
        assert f"{ours.job_id}" in out and "CANCELLED" in out and f"{prefix}-bob-mlp" in out
    finally:
        other.cancel()
        ours.cancel()

    assert cli.main(["instructor", "results", "--out", str(course / "results.csv")]) == 0
    rows = list(csv.DictReader(open(course / "results.csv")))
    assert [(r["participant"], r["experiment"], r["status"], r["job_id"]) for r in rows] == [
        ("bob", "mlp", "completed", run.job_id)]


def test_instructor_room_shows_the_failed_job_and_its_stderr_asking_slurm_once(course: Path, prefix: str,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture) -> None:
    from coursekit import slurm_cli
    from coursekit.labs import lab_settings

    assert cli.main(["instructor", "setup", str(course), "--site", "slurm", "--job-prefix", prefix, "--force",
                     "--no-doctor"]) == 0
    lab_settings("01", "cpu")  # the notebook's `profile.settings("01")`: its jobs record lab 01
    bad = coursekit.submit_jobs("-c 'import sys; print(\"planted room failure\", file=sys.stderr); sys.exit(3)'",
                                name=f"{prefix}-ada-gd", time_max="00:05:00")[0]
    lab_settings("02", "cpu")
    good = coursekit.submit_jobs("-c 'print(1)'", name=f"{prefix}-bob-bs", time_max="00:05:00")[0]
    assert bad.wait(END_S) == "FAILED" and good.wait(END_S) == "COMPLETED"
    asked: list[str] = []
    real_run = slurm_cli.run

    def counted(command: list[str], timeout: float = slurm_cli.COMMAND_TIMEOUT_S) -> str:
        asked.append(" ".join(command))
        return real_run(command, timeout)

    monkeypatch.setattr(slurm_cli, "run", counted)
    capsys.readouterr()
    assert cli.main(["instructor", "room", "--csv", str(course / "room.csv")]) == 0
    out = capsys.readouterr().out
    room = [a for a in asked if " -S now " not in a + " "]  # accounting_enabled's ping is cached, not the room's
    assert [a.split()[0] for a in room] == ["squeue", "sacct"], asked  # one batched query for the room
    rows = list(csv.DictReader(open(course / "room.csv")))
    assert [(r["pseudonym"], r["lab"], r["needs_help"], r["failed"], r["last_failed_job"]) for r in rows] == [
        ("ada", "01", "yes", "1", bad.job_id), ("bob", "02", "", "0", "")]
    assert "planted room failure" in rows[0]["last_stderr"] and "    | planted room failure" in out
