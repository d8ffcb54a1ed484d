"""Predict, then run: a prediction typed in the box or given in code is stored per user and lab; the reveal
sets it beside the measurement, says when none was made, and never raises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coursekit.course import user_name
from coursekit.jobs import registry
from coursekit.labs.kit import predict as pr

ME = user_name(os.geteuid())


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_PSEUDONYM", "ada")
    monkeypatch.setattr(registry, "_current_lab", "02")  # as after profile.settings("02")
    return tmp_path


def test_a_prediction_in_code_is_stored_then_revealed_beside_the_measurement(course: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    pr.predict("speedup", "How many times more images/s?", unit="×", value=4)
    assert capsys.readouterr().out == "Prediction: How many times more images/s?\n    yours: 4 × (saved)\n"
    pr.reveal("speedup", 12.0)
    out = capsys.readouterr().out.splitlines()
    assert out == ["Prediction vs measurement: How many times more images/s?",
                   "    measured: 12 ×; your prediction: 4 ×, too low, off by ×3 (measured / predicted = 3)"]
    stored = json.loads((course / "predictions" / "02" / f"{ME}.json").read_text())
    assert stored["pseudonym"] == "ada"
    assert {k: stored["predictions"]["speedup"][k] for k in ("value", "unit", "measured")} == {
        "value": 4.0, "unit": "×", "measured": 12.0}


def test_reveal_says_when_no_prediction_was_made_and_never_raises(course: Path, capsys: pytest.CaptureFixture) -> None:
    pr.reveal("wait", 0.5, "%")
    assert capsys.readouterr().out == "No prediction was made for 'wait'.\n    measured: 0.5 %\n"
    pr.predict("wait", "Share of a step waiting?", unit="%", value=10)
    pr.reveal("wait", None)
    assert "measured: none (the measurement is missing); your prediction: 10 %" in capsys.readouterr().out
    pr.reveal("wait", 1.0, lab="nine")
    assert capsys.readouterr().out.startswith("Could not compare the prediction 'wait'")


def test_a_prediction_that_cannot_be_saved_is_said_not_raised(course: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    def refuse(path: Path, record: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(pr, "save_own_record", refuse)
    pr.predict("speedup", "How many times?", value=4)
    assert "yours: 4 (not saved: [Errno 13] Permission denied)" in capsys.readouterr().out


def test_the_comparison_in_words() -> None:
    assert pr.compare(10, 12).startswith("close")
    assert pr.compare(30, 10).startswith("too high, off by ×3")
    assert pr.compare(2, 2) == "exactly right"
    assert pr.compare(-1, 2) == "too low by 3"


def test_the_box_saves_what_is_typed(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: list[object] = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    pr.predict("fit", "Largest batch that fits?", lab="03")
    (box, _, status) = shown[0].children[1].children  # type: ignore[attr-defined]
    box.value = 512.0  # typed, then Enter
    assert pr.prediction("fit", lab="03")["value"] == 512.0 and status.value == "saved: 512"
    pr.predict("fit", "Largest batch that fits?", lab="03")  # the notebook run again: the box shows it
    assert shown[1].children[1].children[0].value == 512.0  # type: ignore[attr-defined]


def test_bad_input_is_named(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="value="):
        pr.predict("speedup", "How many times?", value="four")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key="):
        pr.predict("speed up", "How many times?", value=4)
    with pytest.raises(ValueError, match="question="):
        pr.predict("speedup", "", value=4)
    monkeypatch.setattr(registry, "_current_lab", None)
    with pytest.raises(ValueError, match="lab=None"):
        pr.predict("speedup", "How many times?", value=4)
