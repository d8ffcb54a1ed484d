"""Predict, then run: the participant writes down a number before a measurement with a surprising answer,
and the lab sets it next to what was measured afterwards.

``labs.predict("speedup", "How many times more images/s ...?", unit="×")`` shows the question and a
number box; what is typed there is saved at once. ``value=`` gives the prediction from code instead (a
participant's ``my_guess = 5``, or the solved notebook's, so that it runs on its own). After the
measurement ``labs.reveal("speedup", measured)`` prints the prediction beside the measurement and by how
many times they differ, or that no prediction was made; it never raises (a lab must go on).

Predictions live in the course folder, one file per Unix user and lab
(``<course>/predictions/<lab>/<user>.json``, the storage of ``labs.kit.ticket``), each with the
measurement once revealed: the instructor can compare the room's guesses with what it measured.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coursekit.labs.kit.ticket import (
    as_number,
    check_key,
    check_lab,
    own_record_path,
    read_own_record,
    read_records,
    save_own_record,
)

PREDICTIONS_SUBDIR = "predictions"  # <course>/predictions/<lab>/<user>.json
CLOSE_FACTOR = 1.5  # within this factor of the measurement: a good guess
BOX_WIDTH = "12em"


def _lab(lab: str | None) -> str:
    """``lab``, else the lab this notebook works on (set when it asked for its settings)."""
    if lab is None:
        from coursekit.jobs.registry import current_lab

        lab = current_lab()
        if lab is None:
            raise ValueError("lab=None and this notebook has not asked for a lab's settings yet: give lab='02' "
                             "(or run the first cell of the lab first)")
    return check_lab(lab)


def _path(lab: str, course: Path | None) -> Path:
    return own_record_path(PREDICTIONS_SUBDIR, lab, course)


def _unit(unit: str) -> str:
    return f" {unit}" if unit else ""


def save_prediction(key: str, question: str, value: float, unit: str = "", lab: str | None = None,
                    course: Path | None = None) -> Path:
    """Store this user's prediction ``key`` of ``lab`` (replacing an earlier one); returns the file."""
    from coursekit.labs.kit.participant import choose_pseudonym

    lab = _lab(lab)
    path = _path(lab, course)
    record = read_own_record(path)
    predictions = record.get("predictions") if isinstance(record.get("predictions"), dict) else {}
    predictions[key] = {"question": question, "unit": unit, "value": value, "predicted_at": time.time()}
    try:
        pseudonym = choose_pseudonym()
    except ValueError:
        pseudonym = ""
    save_own_record(path, {"lab": lab, "pseudonym": pseudonym, "predictions": predictions})
    return path


def prediction(key: str, lab: str | None = None, course: Path | None = None) -> dict[str, Any] | None:
    """This user's stored prediction ``key`` of ``lab`` ({"value", "question", "unit", ...}), None if none."""
    found = read_own_record(_path(_lab(lab), course)).get("predictions")
    entry = found.get(key) if isinstance(found, dict) else None
    return entry if isinstance(entry, dict) and as_number(entry.get("value")) is not None else None


def predict(key: str, question: str, unit: str = "", value: float | None = None, *, lab: str | None = None,
            course: Path | None = None) -> None:
    """Ask ``question`` before a measurement. ``value``: the prediction, saved now; None: a number box
    (ipywidgets) whose value is saved each time it is changed (press Enter), showing an earlier one."""
    check_key(key)
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question={question!r}: write the question as a sentence")
    if not isinstance(unit, str):
        raise ValueError(f"unit={unit!r}: give the unit as text, e.g. 's' or '%'")
    lab = _lab(lab)
    if value is not None:
        number = as_number(value)
        if number is None or isinstance(value, str):
            raise ValueError(f"value={value!r}: give your prediction as a number, e.g. value=5")
        try:
            save_prediction(key, question, number, unit, lab, course)
            saved = "saved"
        except OSError as error:  # the lab goes on: the comparison below then says no prediction was made
            saved = f"not saved: {error}"
        print(f"Prediction: {question}\n    yours: {number:g}{_unit(unit)} ({saved})")
        return
    try:
        import ipywidgets as widgets
        from IPython.display import display
    except ImportError:
        print(f"Prediction: {question}\n    write it as labs.predict({key!r}, ..., value=<your number>)")
        return
    earlier = prediction(key, lab, course)
    box = widgets.FloatText(value=float(earlier["value"]) if earlier else 0.0, description="your guess",
                            layout=widgets.Layout(width=BOX_WIDTH))
    status = widgets.Label(f"saved: {earlier['value']:g}{_unit(unit)}" if earlier
                           else f"type a number{_unit(unit)} and press Enter")

    def on_change(change: dict[str, Any]) -> None:
        try:
            save_prediction(key, question, float(change["new"]), unit, lab, course)
            status.value = f"saved: {change['new']:g}{_unit(unit)}"
        except (OSError, ValueError) as error:
            status.value = f"not saved: {error}"

    box.observe(on_change, names="value")
    display(widgets.VBox([widgets.HTML(f"<b>Prediction:</b> {_escape(question)}"),
                          widgets.HBox([box, widgets.Label(unit), status])]))


def _escape(text: str) -> str:
    from html import escape

    return escape(text)


def is_close(predicted: float, measured: float) -> bool:
    """Within ``CLOSE_FACTOR`` of the measurement (both positive), or exactly it."""
    if predicted == measured:
        return True
    return predicted > 0 and measured > 0 and max(predicted, measured) / min(predicted, measured) <= CLOSE_FACTOR


def compare(predicted: float, measured: float) -> str:
    """In words: how far the prediction was from the measurement ("too low: the measurement is 3.2× it")."""
    if predicted == measured:
        return "exactly right"
    if predicted > 0 and measured > 0:
        factor = max(predicted, measured) / min(predicted, measured)
        side = "too high" if predicted > measured else "too low"
        verdict = "close" if factor <= CLOSE_FACTOR else f"{side}, off by ×{factor:.3g}"
        return f"{verdict} (measured / predicted = {measured / predicted:.3g})"
    return f"{'too high' if predicted > measured else 'too low'} by {abs(measured - predicted):.3g}"


def reveal(key: str, measured: Any, unit: str | None = None, *, lab: str | None = None,
           course: Path | None = None) -> None:
    """Print the prediction ``key`` beside ``measured`` (and store the measurement with it); "no
    prediction was made" when there is none. Never raises."""
    try:
        lab = _lab(lab)
        entry = prediction(key, lab, course)
        number = as_number(measured)
        unit = unit if isinstance(unit, str) else (entry or {}).get("unit", "")
        shown = "none (the measurement is missing)" if number is None else f"{number:.4g}{_unit(unit)}"
        if entry is None:
            text = f"No prediction was made for {key!r}.\n    measured: {shown}"
        else:
            guess = float(entry["value"])
            head = f"Prediction vs measurement: {entry.get('question', key)}"
            said = "" if number is None else f", {compare(guess, number)}"
            text = f"{head}\n    measured: {shown}; your prediction: {guess:g}{_unit(unit)}{said}"
            if number is not None and math.isfinite(number):
                _store_measurement(key, number, lab, course)
    except Exception as error:  # noqa: BLE001 - a comparison must never stop a lab
        text = f"Could not compare the prediction {key!r} with the measurement ({error})."
    print(text)


def _store_measurement(key: str, measured: float, lab: str, course: Path | None) -> None:
    path = _path(lab, course)
    record = read_own_record(path)
    entry = record.get("predictions", {}).get(key)
    if isinstance(entry, dict):
        entry["measured"] = measured
        entry["measured_at"] = time.time()
        try:
            save_own_record(path, record)
        except OSError:
            pass  # the comparison was shown; storing it is a bonus for the instructor


# ------------------------------------------------------------------------------------------ the instructor


def room_predictions(course_folders: Iterable[Path], problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The room's predictions per lab and question, from every participant's course folder: how many were
    made, their median, the median of what was measured after them, how many were close. A record that
    cannot be read, or is not a prediction record, is appended to ``problems`` and skipped."""
    problems = [] if problems is None else problems
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for course in sorted({Path(c) for c in course_folders}):
        for record in read_records(course, PREDICTIONS_SUBDIR, problems):
            entries = record.get("predictions")
            if not isinstance(entries, dict):
                problems.append(f"{course}/{PREDICTIONS_SUBDIR}/{record['lab']}: {record['user']}'s record holds "
                                "no predictions")
                continue
            for key, entry in entries.items():
                guess = as_number(entry.get("value")) if isinstance(entry, dict) else None
                if guess is None:
                    continue
                group = groups.setdefault((record["lab"], str(key)), {
                    "lab": record["lab"], "key": str(key), "question": str(entry.get("question", key)),
                    "unit": str(entry.get("unit", "")), "guesses": [], "measured": [], "close": 0})
                group["guesses"].append(guess)
                measured = as_number(entry.get("measured"))
                if measured is not None:
                    group["measured"].append(measured)
                    group["close"] += is_close(guess, measured)
    return [groups[k] for k in sorted(groups)]


def prediction_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """One line per question: ``lab 05 wait_no_workers: 12 predictions, median 40 %; measured median 89 %
    (11 runs); 3 close``."""
    lines = []
    for row in rows:
        unit = _unit(row["unit"])
        text = (f"lab {row['lab']} {row['key']}: {len(row['guesses'])} prediction(s), median "
                f"{statistics.median(row['guesses']):.3g}{unit}")
        if row["measured"]:
            text += (f"; measured median {statistics.median(row['measured']):.3g}{unit} ({len(row['measured'])} "
                     f"revealed), {row['close']} within ×{CLOSE_FACTOR:g}")
        else:
            text += "; nothing measured yet"
        lines.append(text)
    return lines
