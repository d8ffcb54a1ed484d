"""``coursekit instructor room``: planted course folders (two participants, a failed job with a known stderr,
a malformed registry line, a foreign entry, a stray folder, an unreadable course), the Slurm path with
Slurm's answers faked (one batched query for the room), and the lab each submission records. The real
cluster: tests/integration/test_instructor_on_slurm.py."""

from __future__ import annotations

import csv
import json
import os
import re
import time
from pathlib import Path

import pytest

import coursekit
from coursekit import cli, instructor, slurm_cli
from coursekit.instructor import team_lines
from coursekit.jobs import registry
from coursekit.jobs.local_process import process_start_time
from coursekit.labs.kit import pool
from coursekit.labs.lab06_data_parallel import team

PLANTED_ERROR = ["Traceback (most recent call last):", '  File "amp.py", line 12, in <module>',
                 "RuntimeError: planted: GradScaler not stepped"]
END_S = 60
TEAM_BATCHES, TEAM_GPUS, TEAM_BOB_UID = [32, 64, 128, 256], [1, 2, 4, 8], 60421  # lab 06's sweep, a teammate
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "course"
    folder.mkdir()
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(folder))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    return folder


def write_registry(path: Path, lines: list[dict | str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))


def submitted(job_id: str, name: str, folder: Path, at: float, lab: str | None = None, **more: object) -> dict:
    return {"event": "submitted", "job_id": job_id, "name": name, "folder": str(folder), "scheduler": "local",
            "site": "local", "submitted_at": at, **({"lab": lab} if lab else {}), **more}


@pytest.fixture
def room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """ada (course folder): a job of lab 02 completed, then one of lab 04 failed with a known stderr, a
    malformed line and another course's job in her registry; bob (jobs folder): a running job of lab 01 (this
    test's own process), a stray folder; eve: a course folder the instructor cannot read."""
    now = time.time()
    ada = tmp_path / "ada" / "dl-course"
    ada_jobs = ada / "jobs"
    failed = ada_jobs / "ck-ada-amp" / "102"
    failed.mkdir(parents=True)
    (failed / "102_0_log.err").write_text(
        "submitit INFO (2026-11-27 06:00:00,000) - Starting with JobEnvironment\n"
        + "\n".join(["early line", *PLANTED_ERROR]) + "\n"
        + "submitit ERROR (2026-11-27 06:00:01,000) - Submitted job triggered an exception\n")
    (failed / "102_0_log.out").write_text("step 1\n")
    write_registry(ada_jobs / "registry.jsonl", [
        submitted("101", "ck-ada-bs", ada_jobs / "ck-ada-bs" / "101", now - 600, "02"),
        "{this is not json",
        {"event": "state", "job_id": "101", "scheduler": "local", "state": "COMPLETED"},
        submitted("102", "ck-ada-amp", failed, now - 300, "04"),
        {"event": "state", "job_id": "102", "scheduler": "local", "state": "FAILED"},
        submitted("103", "zz-ada-other", ada_jobs / "zz-ada-other" / "103", now - 200),
    ])
    bob_jobs = tmp_path / "bob" / "dl-course" / "jobs"
    pid = os.getpid()
    write_registry(bob_jobs / "registry.jsonl", [
        submitted(str(pid), "ck-bob-gd", bob_jobs / "ck-bob-gd" / str(pid), now - 60, "01", pid=pid,
                  pid_start=process_start_time(pid))])
    (bob_jobs / "ck-bob-gd" / "not-a-job").mkdir(parents=True)
    eve = tmp_path / "eve" / "dl-course"
    (eve / "jobs").mkdir(parents=True)
    write_registry(eve / "jobs" / "registry.jsonl", [submitted("7", "ck-eve-bs", eve / "jobs" / "x" / "7", now)])
    (eve / "jobs").chmod(0)
    if os.geteuid() == 0:  # root reads any folder: make eve's refuse as it does for an instructor
        real_scandir = os.scandir

        def refuse(path: object = ".") -> object:
            if Path(os.fspath(path)) == eve / "jobs":  # type: ignore[arg-type]
                raise PermissionError(13, "Permission denied", os.fspath(path))  # type: ignore[arg-type]
            return real_scandir(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", refuse)
    yield {"ada": ada, "bob": bob_jobs, "eve": eve}
    (eve / "jobs").chmod(0o755)


def test_room_puts_the_failed_participant_first_with_her_stderr(course: Path, room: dict[str, Path]) -> None:
    notes: list[str] = []
    rows = instructor.room_table([room["ada"], room["bob"], room["eve"]], "ck", warnings=notes)
    assert [r["pseudonym"] for r in rows] == ["ada", "bob"]  # eve unreadable, zz-* another course's
    ada, bob = rows
    assert (ada["lab"], ada["needs_help"], ada["submitted"], ada["failed"], ada["running"]) == ("04", "yes", 2, 1, 0)
    assert (ada["last_failed_job"], ada["last_failed_state"]) == ("102", "FAILED")
    assert ada["last_stderr"].splitlines() == ["early line", *PLANTED_ERROR][-instructor.STDERR_LINES:]
    assert "submitit" not in ada["last_stderr"]
    assert ada["user"] == room["ada"].owner() and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", ada["last_activity"])
    assert (bob["lab"], bob["needs_help"], bob["running"], bob["failed"], bob["last_stderr"]) == ("01", "", 1, 0, "")
    assert isinstance(bob["idle_min"], int) and 0 <= bob["idle_min"] <= 2
    said = "\n".join(notes)
    assert len(notes) == 4, notes  # each problem once
    assert f"{room['ada'] / 'jobs' / 'registry.jsonl'}: 1 malformed record(s) skipped (line 2" in said
    assert "1 job(s) not named ck-<pseudonym>-<experiment> (another course's) skipped" in said
    assert f"{room['eve'] / 'jobs'}: cannot read it" in said and "ck-bob-gd/not-a-job" in said
    assert instructor.room_table([room["ada"]], "ck", stderr_lines=1)[0]["last_stderr"] == PLANTED_ERROR[-1]


def test_room_command_prints_warns_once_and_exports_csv(course: Path, room: dict[str, Path],
                                                        capsys: pytest.CaptureFixture) -> None:
    out_csv = course / "room.csv"
    argv = ["instructor", "room", "--prefix", "ck", "--jobs-dir", str(room["ada"]), str(room["bob"]),
            str(room["eve"]), "--csv", str(out_csv)]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split()[:3] == ["pseudonym", "user", "lab"] and lines[1].startswith("ada")
    assert f"    | {PLANTED_ERROR[-1]}" in lines and "2 participant(s) of course prefix 'ck', 1 needing help" in captured.out
    assert captured.err.count("warning: ") == 4 and captured.err.count("cannot read it") == 1
    assert "Traceback" not in captured.err.replace(PLANTED_ERROR[0], "")
    rows = list(csv.DictReader(open(out_csv, encoding="utf-8")))
    assert [(r["pseudonym"], r["lab"], r["failed"], r["last_failed_job"]) for r in rows] == [
        ("ada", "04", "1", "102"), ("bob", "01", "0", "")]
    assert rows[0]["last_stderr"].splitlines()[-1] == PLANTED_ERROR[-1]
    assert not any(re.search(r"\d\.\d{5,}", cell) for r in rows for cell in r.values())  # no raw floats


def test_room_rejects_bad_input_naming_the_parameter(course: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ValueError, match="roots="):
        instructor.room_table("/home/ada", "ck")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stderr_lines="):
        instructor.room_table([course], "ck", stderr_lines=-1)
    with pytest.raises(ValueError, match="prefix"):
        instructor.room_table([course], "Bad-Prefix")
    with pytest.raises(SystemExit):
        cli.main(["instructor", "room", "--prefix", "ck", "--lines", "-2"])
    assert "--lines" in capsys.readouterr().err
    assert cli.main(["instructor", "room"]) == 1  # no course prefix anywhere
    assert "job_prefix" in capsys.readouterr().err


def test_room_extra_columns_come_after_the_fixed_ones(course: Path, room: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit tickets and pooled sweeps (issue 26) will be columns of this kind."""
    monkeypatch.setitem(instructor.ROOM_COLUMNS, "ticket_02", lambda p: {"ticket_02": len(p.course_folders)})
    monkeypatch.setitem(instructor.ROOM_COLUMNS, "broken", lambda p: 1 / 0)
    rows = instructor.room_table([room["ada"]], "ck")
    assert instructor.room_fields(rows)[-2:] == ["ticket_02", "broken"]
    assert rows[0]["ticket_02"] == 1 and rows[0]["broken"].startswith("? (")


def test_room_shows_each_participants_exit_ticket_scores(course: Path, room: dict[str, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: the scores ada's notebooks stored in her course folder; bob has none yet."""
    from coursekit import labs

    monkeypatch.setenv("COURSEKIT_PSEUDONYM", "ada")
    for lab, right in (("01", 4), ("02", 3)):
        ticket = labs.exit_ticket(lab, {f"q{i}": labs.Question(f"question {i}?", i) for i in range(4)}, quiet=True)
        ticket.grade({f"q{i}": i for i in range(right)}, course=room["ada"], quiet=True)
    rows = instructor.room_table([room["ada"], room["bob"]], "ck")
    assert {r["pseudonym"]: r["exit_tickets"] for r in rows} == {"ada": "01 4/4, 02 3/4", "bob": ""}
    assert "exit_tickets" in instructor.room_fields(rows)


def test_room_shows_each_participants_exercise_scores(course: Path, room: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Lab 10's clinic saves the diagnoses through ``save_exercise_score`` (lab10_resilience/test_clinic.py):
    the room's exercises column shows ada's latest score, bob's none."""
    from coursekit.labs.kit.exercise_scores import save_exercise_score

    monkeypatch.setenv("COURSEKIT_PSEUDONYM", "ada")
    assert save_exercise_score("10", 1, 4, {"A": {"solved": True}}, course=room["ada"]) is None
    assert save_exercise_score("10", 3, 4, {"A": {"solved": True}}, course=room["ada"]) is None  # the latest
    rows = instructor.room_table([room["ada"], room["bob"]], "ck")
    assert {r["pseudonym"]: r["exercises"] for r in rows} == {"ada": "10 3/4", "bob": ""}


def test_room_sets_the_rooms_predictions_beside_what_it_measured(course: Path, room: dict[str, Path],
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """Issue 26: ada and bob predicted lab 05's data-wait share, ada revealed her measurement; a record that
    is not a prediction record is named in the warnings, never raised."""
    from coursekit.labs.kit import predict

    question = "With workers=0, what percentage of each step will be spent waiting for data?"
    monkeypatch.setenv("COURSEKIT_PSEUDONYM", "ada")
    predict.save_prediction("wait", question, 70, "%", lab="05", course=room["ada"])
    predict.reveal("wait", 89.0, lab="05", course=room["ada"])
    bob_course = room["bob"].parent
    predict.save_prediction("wait", question, 20, "%", lab="05", course=bob_course)
    (bob_course / "predictions" / "04").mkdir(parents=True)
    (bob_course / "predictions" / "04" / "x.json").write_text('{"predictions": [1, 2]}')
    notes: list[str] = []
    guesses: list[str] = []
    instructor.room_table([room["ada"], room["bob"]], "ck", warnings=notes, predictions=guesses)
    assert guesses == ["lab 05 wait: 2 prediction(s), median 45 %; measured median 89 % (1 revealed), "
                       "1 within ×1.5"]
    assert any("predictions/04" in n and "holds no predictions" in n for n in notes), notes
    assert cli.main(["instructor", "room", "--prefix", "ck", "--jobs-dir", str(room["ada"]), str(room["bob"])]) == 0
    assert f"  {guesses[0]}" in capsys.readouterr().out


def test_room_on_slurm_asks_once_for_the_whole_room(course: Path, room: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Slurm's answers faked: one squeue and one sacct for any number of jobs; a job whose folder cannot be
    read still shows, with Slurm's user; Slurm's state wins over the registry's."""
    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    calls: list[list[str]] = []
    squeue_rows = [{"job_id": "7", "name": "ck-eve-bs", "user": "eve", "state": "PENDING", "submit_time": "",
                    "elapsed": "0:00", "node_list": ""}]
    sacct = "102|ck-ada-amp|OUT_OF_MEMORY|0:125|00:01:00|n1|2026-11-27T06:00:00|x|2026-11-27T06:01:00|gpu|ada\n"  # User last: course_jobs asks for it

    def fake_squeue(all_states: bool = True) -> list[dict[str, str]]:
        calls.append(["squeue"])
        return squeue_rows

    def fake_run(command: list[str]) -> str:
        calls.append(list(command))
        return sacct

    monkeypatch.setattr(slurm_cli, "squeue", fake_squeue)
    monkeypatch.setattr(slurm_cli, "run", fake_run)
    monkeypatch.setattr(slurm_cli, "accounting_enabled", lambda: True)
    rows = instructor.room_table([room["ada"], room["bob"], room["eve"]], "ck")
    assert [c[0] for c in calls] == ["squeue", "sacct"]
    by_name = {r["pseudonym"]: r for r in rows}
    assert by_name["ada"]["last_failed_state"] == "OUT_OF_MEMORY" and by_name["ada"]["needs_help"] == "yes"
    assert (by_name["eve"]["user"], by_name["eve"]["pending"], by_name["eve"]["lab"]) == ("eve", 1, "")

    def down(all_states: bool = True) -> list[dict[str, str]]:
        raise slurm_cli.SlurmError("Unable to contact slurm controller", ["squeue"])

    monkeypatch.setattr(slurm_cli, "squeue", down)
    notes: list[str] = []
    rows = instructor.room_table([room["ada"]], "ck", warnings=notes)
    assert rows[0]["last_failed_state"] == "FAILED" and any("Slurm did not answer" in n for n in notes)


def test_a_submission_records_the_lab_its_notebook_is_at(course: Path) -> None:
    from coursekit.labs import lab_settings

    lab_settings("03", "cpu")  # what each notebook's `profile.settings("03")` calls
    job = coursekit.submit_jobs("-c 'print(1)'", name="ck-ada-peak", time_max="00:05:00")[0]
    assert job.wait(END_S) == "COMPLETED"
    (record,) = registry.merged_records()
    assert record["lab"] == "03" and registry.current_lab() == "03"
    old = {k: v for k, v in record.items() if k != "lab"}  # a record of an older kit: no lab, still read
    assert coursekit.jobs.Job.from_record(old).lab is None
    with pytest.raises(ValueError, match="lab="):
        registry.set_current_lab("3")
    rows = instructor.room_table(None, "ck")
    assert [(r["pseudonym"], r["lab"], r["submitted"], r["failed"]) for r in rows] == [("ada", "03", 1, 0)]


def team_rows(batches: list[int]) -> list[dict]:
    return [{"n_gpu": n, "batch_size": b, "images_per_s_median": 100.0 * n, "state": "COMPLETED"}
            for b in batches for n in TEAM_GPUS]


@as_root
def test_the_instructor_sees_each_teams_parts_and_what_they_pooled(course: Path) -> None:
    team.take_part(None, "solo", TEAM_BATCHES, TEAM_GPUS, 4)  # alone: no team to show
    mine = team.take_part("red", "ada", TEAM_BATCHES, TEAM_GPUS, 4)
    team.post_part(mine, "ada", team_rows([32]))
    folder = pool.pool_folder(team.pool_name("red"))
    (folder / team.PART_CLAIM.format(2)).write_text("bob\n")
    os.chown(folder / team.PART_CLAIM.format(2), TEAM_BOB_UID, TEAM_BOB_UID)
    me = pool.user_name(os.geteuid())
    assert team.team_progress() == [
        {"team": "red", "part": 1, "holder": me, "pseudonym": "ada", "cells": 4},
        {"team": "red", "part": 2, "holder": "", "pseudonym": "", "cells": 0},
        {"team": "red", "part": 3, "holder": "uid60421", "pseudonym": "", "cells": 0}]
    assert team_lines() == ["lab 06 team red: part 1 ada (4 runs), part 2 nobody yet, part 3 uid60421 (0 runs)"]
