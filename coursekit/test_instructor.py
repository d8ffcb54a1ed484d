"""``coursekit instructor``: every command's --help, and each command on the local site (the same commands
against the CI Slurm: tests/integration/test_instructor_on_slurm.py)."""

from __future__ import annotations

import csv
import getpass
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import coursekit
from coursekit import cli, instructor
from coursekit.labs.kit import datasets
from coursekit.metrics import MetricsWriter

END_S = 60


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "course"
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(folder))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    monkeypatch.delenv("COURSEKIT_DATA_DIR", raising=False)
    return folder


@pytest.mark.parametrize("argv", [[], ["setup"], ["data"], ["jobs"], ["cancel"], ["results"], ["room"]])
def test_every_command_has_help(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["instructor", *argv, "--help"])
    assert done.value.code == 0
    assert "usage: coursekit instructor" in capsys.readouterr().out


def test_setup_writes_the_course_and_notebooks_without_solutions(course: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "dl9", "--account", "abc",
                     "--data-dir", str(course.parent / "shared"), "--no-doctor"]) == 0
    text = (course / "coursekit.toml").read_text()
    assert 'job_prefix = "dl9"' in text and 'account = "abc"' in text and 'site = "local"' in text
    copies = sorted(p.name for p in (course / "notebooks").glob("*.ipynb"))
    assert "09_race.ipynb" in copies and "00_cluster.ipynb" in copies
    assert not any("### BEGIN SOLUTION" in (course / "notebooks" / name).read_text() for name in copies)
    from coursekit.labs.kit.exercises import BEGIN, kit_scripts

    scripts = [course / "notebooks" / name for name in kit_scripts()]  # lab06_data_parallel/train_ddp.py ..., from the package
    assert scripts and all(p.is_file() and not p.is_symlink() and BEGIN not in p.read_text() for p in scripts)
    from coursekit.labs.kit.participant import job_name
    from coursekit.labs.kit.profiles import data_dir
    from coursekit.labs.lab09_race import leaderboard_path

    assert job_name("ada", "bs") == "dl9-ada-bs" and data_dir() == str(course.parent / "shared")
    assert leaderboard_path() == course / "race" / "leaderboard.jsonl" and leaderboard_path().parent.is_dir()
    from coursekit.labs.kit import (
        pool,  # the room's pools: shared, named with an absolute path for the copies
    )

    assert f'pools = "{course / "pools"}"' in text and pool.pool_folder("x") == course / "pools" / "x"
    assert (course / "pools").stat().st_mode & 0o7777 == pool.SHARED_FOLDER_MODE
    race = leaderboard_path().parent  # lab 09's race folder: shared, and the instructor's (who clears rounds)
    assert race.stat().st_mode & 0o7777 == pool.SHARED_FOLDER_MODE and race.stat().st_uid == os.geteuid()
    assert f'instructor = "{getpass.getuser()}"' in text  # the baseline is this user's only
    assert cli.main(["instructor", "race", "clear"]) == 0 and "cleared the round: 0 file(s)" in capsys.readouterr().out
    assert cli.main(["instructor", "setup", str(course / "other"), "--instructor", "no-such-user-here",
                     "--no-doctor"]) == 1
    assert "--instructor no-such-user-here: no such Unix user" in capsys.readouterr().err
    assert cli.main(["instructor", "setup", str(course), "--no-doctor"]) == 1
    assert "--force" in capsys.readouterr().err
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "bad-prefix", "--force", "--no-doctor"]) == 1


def test_setup_runs_the_doctor(course: Path, capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["instructor", "setup", str(course)])
    out = capsys.readouterr().out
    assert code in (0, 1) and "site" in out.lower() and "python" in out.lower()


def test_data_jpeg_writes_lab05s_tree_once_where_lab05_reads_it(course: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    assert cli.main(["instructor", "data", "jpeg", "--dir", str(shared), "--profile", "cpu", "--workers", "1"]) == 0
    trees = list(shared.glob("jpeg-*"))
    assert len(trees) == 1 and (trees[0] / ".complete").exists() and list(trees[0].glob("train/*/*.jpg"))
    assert cli.main(["instructor", "setup", str(course), "--data-dir", str(shared), "--no-doctor"]) == 0
    from coursekit.labs import lab_settings
    from coursekit.labs.lab05_data_loading import prepare_jpeg_tree

    s = lab_settings("05", "cpu")
    assert prepare_jpeg_tree(s.jpeg_classes, s.jpeg_images_per_class, s.jpeg_size) == trees[0]


def test_data_cifar10_without_internet_says_where_to_run_it(course: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    def offline(folder: Path) -> Path:
        raise RuntimeError("no route to host")

    monkeypatch.setattr(datasets, "stage_cifar10", offline)
    assert cli.main(["instructor", "data", "cifar10", "--dir", str(tmp_path / "c")]) == 1
    assert "login node with internet" in capsys.readouterr().err
    assert instructor.verify_cifar10(tmp_path / "c")  # nothing there: every batch reported


def test_jobs_cancel_and_results_on_the_local_site(course: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "ck", "--no-doctor"]) == 0
    ours = coursekit.submit_jobs("-c 'import time; time.sleep(120)'", name="ck-ada-sleep", time_max="00:05:00")[0]
    other = coursekit.submit_jobs("-c 'import time; time.sleep(120)'", name="other-x", time_max="00:05:00")[0]
    try:
        capsys.readouterr()
        assert cli.main(["instructor", "jobs"]) == 0
        out = capsys.readouterr().out
        assert "ck-ada-sleep" in out and "other-x" not in out
        (line,) = [line.split() for line in out.splitlines() if "ck-ada-sleep" in line]
        assert line[2] == getpass.getuser() and re.fullmatch(r"\d+:\d\d:\d\d", line[4]), line  # user, elapsed
        assert cli.main(["instructor", "cancel", "--course"]) == 0
        assert ours.job_id in capsys.readouterr().out
        assert ours.wait(END_S) == "CANCELLED" and not other.done()
        assert cli.main(["instructor", "jobs"]) == 0
        assert "ck-ada-sleep" not in capsys.readouterr().out
        assert cli.main(["instructor", "jobs", "--all"]) == 0
        assert "CANCELLED" in capsys.readouterr().out
    finally:
        other.cancel()
    for name, job_id, acc in (("ck-ada-bs", "11", 0.5), ("ck-bob-bs", "12", 0.75), ("x-eve-bs", "13", 0.9)):
        writer = MetricsWriter(course / "jobs" / name / job_id)
        writer.write("summary", status="completed", val_acc=acc, config={"model": "mlp", "batch_size": 64},
                     total_time_s=1.0 / 3)
        writer.close()
    assert cli.main(["instructor", "results", "--out", str(course / "r.csv")]) == 0
    rows = list(csv.DictReader(open(course / "r.csv")))
    assert [(r["participant"], r["experiment"], r["val_acc"]) for r in rows] == [("ada", "bs", "0.5"),
                                                                                  ("bob", "bs", "0.75")]
    assert {r["total_time_s"] for r in rows} == {"0.3333"}  # rounded, not 0.3333333333333333
    assert "2 participant(s)" in capsys.readouterr().out


def test_jobs_without_a_prefix_say_how_to_set_one(course: Path, capsys: pytest.CaptureFixture) -> None:
    course.mkdir(parents=True)
    assert cli.main(["instructor", "jobs"]) == 1
    said = capsys.readouterr().err
    assert "job_prefix" in said and "Run this from the course folder" in said and "--prefix" in said


def test_slurm_branch_reads_every_users_jobs_by_prefix_and_cancels_only_the_active_ones(
        course: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The Slurm path with Slurm's answers faked (the real cluster: tests/integration/test_instructor_on_slurm.py)."""
    from coursekit import slurm_cli

    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    active = [{"job_id": "7", "name": "ck-ada-bs", "user": "u1", "state": "RUNNING", "elapsed": "1:00", "node_list": "n1"},
              {"job_id": "8", "name": "zz-x", "user": "u2", "state": "PENDING", "elapsed": "0:00", "node_list": ""},
              {"job_id": "9", "name": "ck-bob-lr", "user": "u2", "state": "PENDING", "elapsed": "0:00", "node_list": ""}]
    sacct = "5|ck-eve-amp|COMPLETED|0:0|00:01:00|n2|t|t|t|gpu|u3\n6|zz-y|FAILED|1:0|00:00:10|n2|t|t|t|gpu|u4\n"
    cancelled: list[list[str]] = []
    monkeypatch.setattr(slurm_cli, "squeue", lambda all_states=True: active)
    monkeypatch.setattr(slurm_cli, "accounting_enabled", lambda: True)
    monkeypatch.setattr(slurm_cli, "run", lambda command: sacct)
    monkeypatch.setattr(slurm_cli, "scancel", lambda ids: cancelled.append(list(ids)))
    assert [r["job_id"] for r in instructor.course_jobs("ck", finished=False)] == ["7", "9"]
    finished = instructor.course_jobs("ck", finished=True)
    assert [(r["job_id"], r["user"]) for r in finished] == [("5", "u3"), ("7", "u1"), ("9", "u2")]  # sacct's User
    assert cli.main(["instructor", "cancel", "--course", "--prefix", "ck"]) == 0
    assert cancelled == [["7", "9"]] and "cancelled 2 job(s)" in capsys.readouterr().out


def test_results_and_room_read_every_participants_own_course_and_each_run_of_a_one_job_sweep(
        course: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A hub's layout: the instructor's course (the template) names the participants' copies (``participants``, a
    glob); results finds their runs there, single-run jobs and each run of a job that made several (run000...)."""
    homes = tmp_path / "home"
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "ck", "--no-doctor",
                     "--participants", f"{homes}/*/course"]) == 0
    assert f'participants = "{homes}/*/course"' in (course / "coursekit.toml").read_text()
    runs = {"ada": [("ck-ada-bs", "11", None), ("ck-ada-race", "12", "run000"), ("ck-ada-race", "12", "run001")],
            "bob": [("ck-bob-race", "21", "run000"), ("ck-bob-race", "21", "run001"), ("ck-bob-race", "21", "run002"),
                    ("ck-bob-lr", "22_0", None)]}
    for user, jobs in runs.items():
        mine = homes / user / "course"
        (mine / "jobs").mkdir(parents=True)
        (mine / "coursekit.toml").write_text((course / "coursekit.toml").read_text())
        for name, job_id, run in jobs:
            writer = MetricsWriter(mine / "jobs" / name / job_id / (run or ""))
            writer.write("summary", status="completed", val_acc=0.5, config={"model": "mlp"})
            writer.close()
    (homes / "eve").mkdir()  # a home without a course: not a participant's folder
    capsys.readouterr()
    assert cli.main(["instructor", "results", "--out", str(tmp_path / "r.csv")]) == 0
    assert "7 run(s) of 2 participant(s) (ada, bob)" in capsys.readouterr().out
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert sorted((r["participant"], r["experiment"], r["job_id"]) for r in rows) == sorted(
        (user, name.split("-")[2], job_id) for user, jobs in runs.items() for name, job_id, _ in jobs)
    assert {r["user"] for r in rows} == {getpass.getuser()}  # the owner of each run's folder
    assert {Path(r["run_dir"]).name for r in rows if r["experiment"] == "race"} == {"run000", "run001", "run002"}
    room = instructor.room_table()
    assert sorted(r["pseudonym"] for r in room) == ["ada", "bob"]


def test_course_toml_keeps_paths_with_quotes_and_backslashes() -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    text = instructor.course_toml("local", 'ab"c', 'C:\\data "shared"', "/race/board.jsonl", "dl9", None)
    parsed = tomllib.loads(text)
    assert parsed["data_dir"] == 'C:\\data "shared"' and parsed["site_defaults"]["account"] == 'ab"c'


def test_data_fashion_mnist_stages_debians_files_verified_where_the_engine_and_doctor_find_them(
        course: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from coursekit.doctor import check_data
    from coursekit.train.data import fashion_mnist

    shared = tmp_path / "shared"
    assert cli.main(["instructor", "data", "fashion-mnist", "--dir", str(shared)]) == 0  # fails without the package
    out = capsys.readouterr().out
    folder = shared / fashion_mnist.FOLDER
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{name}.gz" for name in fashion_mnist.FILES)
    assert f"Fashion-MNIST in {folder}: copied 4 of its 4 files" in out and "MD5s verified" in out
    assert "{" not in out and len(out.strip().splitlines()) == 1  # one plain line, no raw dict
    assert fashion_mnist.data_folder(shared) == folder and fashion_mnist.verify_folder(folder) == []
    broken = folder / "t10k-labels-idx1-ubyte.gz"
    broken.write_bytes(b"not gzip")
    assert cli.main(["instructor", "data", "fashion-mnist", "--dir", str(shared)]) == 0  # replaces only that file
    assert "copied 1 of its 4 files" in capsys.readouterr().out and fashion_mnist.verify_folder(folder) == []
    assert cli.main(["instructor", "data", "fashion-mnist", "--dir", str(shared)]) == 0
    assert "already staged" in capsys.readouterr().out
    assert cli.main(["instructor", "setup", str(course), "--data-dir", str(shared), "--no-doctor"]) == 0
    fashion = check_data()[1]  # lab 09's cpu race reads the staged copy, and the doctor says so
    assert fashion.status == "ok" and f"Fashion-MNIST: the course's data folder {folder} (real data)" in fashion.title
    code = cli.main(["instructor", "data", "fashion-mnist", "--dir", str(tmp_path / "x"),
                     "--source", str(tmp_path / "no-package")])
    assert code == 1 and "apt-get install -y dataset-fashion-mnist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ the environment
# A failure caused by the environment ends in one sentence on stderr (the problem, what to do) and exit
# status 1, never a traceback. The tests run as root: a path under a regular file stands for a folder that
# cannot be written (NotADirectoryError), and a raised PermissionError for a folder that cannot be read.


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    """A regular file: ``afile / "x"`` can be neither read nor written (a folder is needed there)."""
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


def one_sentence(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_results_out_that_cannot_be_written_says_so_and_suggests_out(course: Path, afile: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "ck", "--no-doctor"]) == 0
    capsys.readouterr()
    assert cli.main(["instructor", "results", "--out", str(afile / "results.csv")]) == 1
    said = one_sentence(capsys.readouterr().err)
    assert said.startswith("coursekit instructor results: error: cannot write the results table to")
    assert str(afile / "results.csv") in said and "--out" in said
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(afile / "course"))  # the default place cannot be written either
    assert cli.main(["instructor", "results", "--prefix", "ck"]) == 1
    said = one_sentence(capsys.readouterr().err)
    assert "the default place" in said and "--out" in said
    assert cli.main(["instructor", "results", "--jobs-dir", str(course / "nowhere"), "--out", str(course / "r.csv")]) == 1
    assert "no such folder" in one_sentence(capsys.readouterr().err)


def test_the_command_prints_no_traceback(tmp_path: Path, afile: Path) -> None:
    """The real process: its whole stderr is the one sentence."""
    root = Path(coursekit.__file__).resolve().parents[1]
    env = {**os.environ, "COURSEKIT_COURSE_DIR": str(tmp_path / "course"), "COURSEKIT_SITE": "local",
           "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)}
    done = subprocess.run([sys.executable, "-m", "coursekit", "instructor", "results", "--prefix", "ck", "--out",
                           str(afile / "results.csv")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--out" in one_sentence(done.stderr), done.stderr


def test_setup_data_and_room_say_which_path_cannot_be_used(course: Path, afile: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["instructor", "setup", str(afile / "course"), "--no-doctor"]) == 1
    said = one_sentence(capsys.readouterr().err)
    assert said.startswith("coursekit instructor setup: error:") and "COURSE_DIR" in said and str(afile) in said
    assert cli.main(["instructor", "data", "jpeg", "--dir", str(afile / "d"), "--profile", "cpu", "--workers", "1"]) == 1
    said = one_sentence(capsys.readouterr().err)
    assert said.startswith("coursekit instructor data: error:") and "--dir" in said
    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "ck", "--no-doctor"]) == 0
    capsys.readouterr()
    assert cli.main(["instructor", "room", "--csv", str(afile / "room.csv")]) == 1
    done = capsys.readouterr()
    assert "participant(s) of course prefix 'ck'" in done.out  # the room is shown all the same
    said = [line for line in done.err.splitlines() if "error:" in line]
    assert len(said) == 1 and "--csv" in said[0] and "Traceback" not in done.err


def test_an_unreadable_participant_folder_is_a_warning_or_one_sentence(course: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture) -> None:
    from coursekit import metrics

    assert cli.main(["instructor", "setup", str(course), "--job-prefix", "ck", "--no-doctor"]) == 0
    for name, job_id in (("ck-ada-bs", "11"), ("ck-bob-bs", "12")):
        writer = MetricsWriter(course / "jobs" / name / job_id)
        writer.write("summary", status="completed", val_acc=0.5, config={"model": "mlp"})
        writer.close()
    read = metrics.read_metrics

    def unreadable_bob(run_dir: Path) -> list:
        if "ck-bob-bs" in str(run_dir):
            raise PermissionError(13, "Permission denied", str(run_dir))
        return read(run_dir)

    monkeypatch.setattr(metrics, "read_metrics", unreadable_bob)
    capsys.readouterr()
    assert cli.main(["instructor", "results", "--out", str(course / "r.csv")]) == 0  # ada's run, bob's said
    done = capsys.readouterr()
    assert "1 run(s) of 1 participant(s) (ada)" in done.out
    assert "ck-bob-bs" in done.err and "Permission denied" in done.err and "Traceback" not in done.err

    def denied(prefix: str, finished: bool, notes: list | None = None) -> list:
        raise PermissionError(13, "Permission denied", "/home/ada/dl-course/jobs")

    monkeypatch.setattr(instructor.commands, "course_jobs", denied)  # where `instructor jobs` looks it up
    assert cli.main(["instructor", "jobs"]) == 1
    said = one_sentence(capsys.readouterr().err)
    assert said.startswith("coursekit instructor jobs: error: /home/ada/dl-course/jobs: Permission denied;")


def test_without_slurm_commands_or_accounting_the_instructor_is_told(course: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    from coursekit import slurm_cli

    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    monkeypatch.setenv("PATH", str(tmp_path))  # no squeue, sacct, scancel here
    for argv in (["jobs", "--prefix", "ck"], ["cancel", "--course", "--prefix", "ck"]):
        assert cli.main(["instructor", *argv]) == 1
        said = one_sentence(capsys.readouterr().err)
        assert "squeue is not installed or not on PATH" in said and "login node" in said
    monkeypatch.setattr(slurm_cli, "squeue", lambda all_states=True: [
        {"job_id": "7", "name": "ck-ada-bs", "user": "u1", "state": "RUNNING", "elapsed": "1:00", "node_list": "n1"}])
    monkeypatch.setattr(slurm_cli, "accounting_enabled", lambda: False)  # sacct does not answer
    assert cli.main(["instructor", "jobs", "--all", "--prefix", "ck"]) == 0
    done = capsys.readouterr()
    assert "ck-ada-bs" in done.out and "accounting" in one_sentence(done.err)
