"""Exit tickets: grading at the edges of each tolerance, unanswered and unmeasured questions, bad input named,
and the answers stored per Unix user in the course folder (never over another user's file)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from coursekit.course import user_name
from coursekit.labs.kit import ticket as tk

ME = user_name(os.geteuid())


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_PSEUDONYM", "ada")
    return tmp_path


def lab02() -> tk.ExitTicket:
    return tk.exit_ticket("02", {
        "fastest": tk.Question("Which batch size gave the most images per second?", 256),
        "speedup": tk.Question("How many times more images/s than B = 4?", 10.0, unit="×", rel_tol=0.1),
        "bytes": tk.Question("Bytes per parameter with SGD and momentum?", 12, unit="B", abs_tol=0.5),
        "slower": tk.Question("Whose epoch took longer?", "B = 1", choices=("full batch", "B = 1")),
    }, quiet=True)


@pytest.mark.parametrize(("key", "answer", "status"), [
    ("fastest", 256, tk.RIGHT), ("fastest", "256", tk.RIGHT), ("fastest", 255, tk.WRONG),
    ("speedup", 11.0, tk.RIGHT), ("speedup", 9.0, tk.RIGHT), ("speedup", 11.01, tk.WRONG), ("speedup", 8.99, tk.WRONG),
    ("speedup", "ten", tk.WRONG), ("speedup", True, tk.WRONG), ("speedup", float("nan"), tk.WRONG),
    ("bytes", 12.5, tk.RIGHT), ("bytes", 11.5, tk.RIGHT), ("bytes", 12.51, tk.WRONG),
    ("slower", "b = 1", tk.RIGHT), ("slower", " B  =  1 ", tk.RIGHT), ("slower", "full batch", tk.WRONG),
    ("slower", "both", tk.WRONG),
    ("speedup", None, tk.NOT_ANSWERED), ("slower", "", tk.NOT_ANSWERED), ("bytes", ..., tk.NOT_ANSWERED),
])
def test_answers_are_graded_at_the_edges_of_their_tolerance(key: str, answer: object, status: str) -> None:
    assert lab02().questions[key].grade(answer) == status


def test_grade_prints_each_verdict_stores_the_score_and_counts_the_unanswered(course: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    graded = lab02().grade({"fastest": 256, "speedup": 20, "slower": "B = 1"})  # "bytes" left out
    assert (graded.score, graded.total, graded.saved, str(graded)) == (2, 4, True, "2/4")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Exit ticket, lab 02: 2/4 right"
    assert out[1].split()[:2] == ["RIGHT", "fastest:"] and out[3].split()[:2] == ["WRONG", "speedup:"]
    assert out[5].startswith("  NOT ANSWERED  bytes:") and out[6].strip().startswith("measured: 12 B; your answer: none")
    assert out[-1].startswith("Score: 2/4.")
    path = course / "tickets" / "02" / f"{ME}.json"
    record = json.loads(path.read_text())
    assert (record["score"], record["total"], record["pseudonym"]) == (2, 4, "ada")
    assert record["questions"]["speedup"] == {"question": "How many times more images/s than B = 4?", "answer": 20,
                                              "measured": 10.0, "unit": "×", "status": tk.WRONG}
    assert stat.S_IMODE(path.stat().st_mode) == tk.RECORD_FILE_MODE  # the instructor reads it
    lab02().grade({"fastest": 256}, quiet=True)  # graded again: the latest counts, no stray temporary file
    assert json.loads(path.read_text())["score"] == 1 and os.listdir(path.parent) == [path.name]


def test_a_question_whose_measurement_is_missing_is_shown_and_not_counted(course: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    ticket = tk.exit_ticket("05", {"wait": tk.Question("Share waiting for data?", float("nan"), unit="%"),
                                     "steps": tk.Question("Profiled steps?", None),
                                     "best": tk.Question("Fastest loader?", "workers=2", choices=("workers=0", "workers=2"))})
    assert "wait: Share waiting for data? (%)" in capsys.readouterr().out  # the questions, not their answers
    graded = ticket.grade(ticket.blank() | {"wait": 30, "best": "workers=2"})
    assert (graded.score, graded.total) == (1, 1)
    assert "measured: not measured in this run; your answer: 30 %" in capsys.readouterr().out


def test_a_transfer_question_shows_its_answer_as_computed_not_measured(course: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    ticket = tk.exit_ticket("10", {"starts": tk.Question("Starts?", 3),
                                   "redone": tk.Question("Steps computed twice?", 190, computed=True),
                                   "cost": tk.Question("Milliseconds for 1 GB?", None, unit="ms", computed=True)})
    capsys.readouterr()
    ticket.grade({"starts": 3, "redone": 190})
    out = capsys.readouterr().out
    assert "      measured: 3; your answer: 3" in out and "      computed: 190; your answer: 190" in out
    assert "measured: 190" not in out
    assert "computed: not computed in this run (a number it needs was not measured); your answer: none" in out


def test_bad_input_gets_an_error_naming_what_to_change(course: Path) -> None:
    ticket = lab02()
    with pytest.raises(ValueError, match=r"no question is called 'fastset'.*'fastest', 'speedup'"):
        ticket.grade({"fastset": 256})
    with pytest.raises(ValueError, match="answers="):
        ticket.grade([256, 10])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lab="):
        tk.exit_ticket("2", {"a": tk.Question("q?", 1)})
    with pytest.raises(ValueError, match=r"questions\['a'\] is a tuple"):
        tk.exit_ticket("02", {"a": ("q?", 1)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="question key="):
        tk.exit_ticket("02", {"a b": tk.Question("q?", 1)})
    with pytest.raises(ValueError, match="questions="):
        tk.exit_ticket("02", {})
    with pytest.raises(ValueError, match="rel_tol="):
        tk.Question("q?", 1.0, rel_tol=-0.1)
    with pytest.raises(ValueError, match="is not one of choices"):
        tk.Question("q?", "maybe", choices=("yes", "no"))
    with pytest.raises(ValueError, match="expected="):
        tk.Question("q?", "fast")
    with pytest.raises(ValueError, match="text="):
        tk.Question("", 1)


def test_another_users_file_is_never_replaced_and_a_failed_save_is_said(course: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture) -> None:
    lab02().grade({"fastest": 256}, quiet=True)
    path = course / "tickets" / "02" / f"{ME}.json"
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # someone else, whose file name is taken
    monkeypatch.setattr(tk, "user_name", lambda uid: ME)
    with pytest.raises(PermissionError, match="not to you"):
        tk.save_own_record(path, {"score": 4})
    graded = lab02().grade({"fastest": 256})
    assert not graded.saved and "could not be saved" in capsys.readouterr().out
    assert json.loads(path.read_text())["score"] == 1


def test_the_room_reads_each_users_latest_score_per_lab(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lab02().grade({"fastest": 256, "bytes": 12}, quiet=True)
    tk.exit_ticket("01", {"a": tk.Question("q?", 1)}, quiet=True).grade({"a": 1}, quiet=True)
    (course / "tickets" / "03").mkdir()
    (course / "tickets" / "03" / "bob.json").write_text("{not json")
    problems: list[str] = []
    scores = tk.room_scores({course}, {ME}, "zed", problems)
    assert scores == {"01": (1, 1), "02": (2, 4)} and tk.scores_text(scores) == "01 1/1, 02 2/4"
    assert len(problems) == 1 and "bob.json: cannot read it" in problems[0]
    assert tk.room_scores({course}, {"someone"}, "ada") == {}  # another user's files are not theirs
    assert tk.room_scores({course}, set(), "ada") == {"01": (1, 1), "02": (2, 4)}  # users unknown: the pseudonym
    assert tk.room_scores({course / "nowhere"}, {ME}, "ada") == {}


def test_a_job_id_and_other_large_numbers_show_without_an_exponent(course: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    ticket = tk.exit_ticket("00", {"job": tk.Question("Your first job's id?", 12694),
                                   "rate": tk.Question("Images/s?", 13243.4, rel_tol=0.1),
                                   "share": tk.Question("Share?", 0.123456)})
    capsys.readouterr()
    ticket.grade({"job": 12694, "rate": 13000.0, "share": 0.1235})
    out = capsys.readouterr().out
    assert "measured: 12694; your answer: 12694" in out and "e+04" not in out
    assert "measured: 13243; your answer: 13000" in out and "measured: 0.1235" in out
