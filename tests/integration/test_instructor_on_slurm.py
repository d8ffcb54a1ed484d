"""``coursekit instructor`` against the real local Slurm: setup with the doctor, the room's jobs found by the
course's job prefix (squeue of every user, sacct for finished ones), cancelling them, gathering results."""

from __future__ import annotations

import csv
import secrets
from pathlib import Path

import pytest

import coursekit
from coursekit import cli

END_S = 120
PREFIX = f"k{secrets.randbelow(10_000):04d}"  # own prefix: cancel --course hits every user's jobs with it
SLEEP = "-c 'import time; time.sleep(300)'"
TINY_RUN = "-m coursekit.train --model mlp --dataset generated --num-samples 200 --image-size 8 --epochs 1 --progress off"


def test_instructor_follows_cancels_and_gathers_the_course_on_slurm(course: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["instructor", "setup", str(course), "--site", "slurm", "--job-prefix", PREFIX, "--force"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "coursekit.toml" in out and "slurm" in out.lower()  # the doctor ran on the site
    assert (course / "notebooks" / "00_cluster_from_the_notebook.ipynb").exists()

    run = coursekit.submit_jobs(TINY_RUN, name=f"{PREFIX}-bob-mlp", time_max="00:05:00")[0]
    ours = coursekit.submit_jobs(SLEEP, name=f"{PREFIX}-ada-sleep", time_max="00:10:00")[0]
    other = coursekit.submit_jobs(SLEEP, name=f"zz{PREFIX}-other", time_max="00:10:00")[0]
    try:
        assert run.wait(END_S) == "COMPLETED"
        assert cli.main(["instructor", "jobs"]) == 0
        out = capsys.readouterr().out
        assert f"{PREFIX}-ada-sleep" in out and f"zz{PREFIX}-other" not in out and ours.job_id in out

        assert cli.main(["instructor", "cancel", "--course"]) == 0
        assert ours.job_id in capsys.readouterr().out
        assert ours.wait(END_S) == "CANCELLED"
        assert other.state in ("PENDING", "RUNNING")  # another course's job is left alone

        assert cli.main(["instructor", "jobs", "--all"]) == 0
        out = capsys.readouterr().out
        assert f"{ours.job_id}" in out and "CANCELLED" in out and f"{PREFIX}-bob-mlp" in out
    finally:
        other.cancel()
        ours.cancel()

    assert cli.main(["instructor", "results", "--out", str(course / "results.csv")]) == 0
    rows = list(csv.DictReader(open(course / "results.csv")))
    assert [(r["participant"], r["experiment"], r["status"], r["job_id"]) for r in rows] == [
        ("bob", "mlp", "completed", run.job_id)]
