"""``coursekit instructor room``: one row per participant (their lab, jobs, last failure and its stderr, extra
columns such as exit tickets), in the terminal, a CSV file or a notebook's HTML table (the jobs: ``room_jobs.py``)."""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coursekit.course import (
    JOBS_SUBDIR,
    course_dir,
)
from coursekit.instructor.common import csv_cell
from coursekit.instructor.course_setup import participant_folders
from coursekit.instructor.jobs import job_prefix
from coursekit.instructor.lab06_teams import team_lines
from coursekit.instructor.room_jobs import (
    PENDING_STATES,
    RUNNING_STATES,
    STDERR_LINES,
    Participant,
    Room,
    gather_room,
    last_stderr,
)
from coursekit.sites import site_jobs_dir

ROOM_FIELDS = ("pseudonym", "user", "lab", "needs_help", "submitted", "pending", "running", "failed",
               "last_failed_job", "last_failed_state", "last_stderr", "last_activity", "idle_min")
ROOM_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
RoomColumn = Callable[["Participant"], dict[str, Any]]
# Extra columns of the room (exit-ticket scores, pooled-sweep completeness, ...): name -> a function of one
# participant giving its cells; their keys are added after ROOM_FIELDS in the terminal, the CSV and the widget.
ROOM_COLUMNS: dict[str, RoomColumn] = {}


def participant_row(person: Participant, stderr_lines: int = STDERR_LINES, now: float | None = None) -> dict[str, Any]:
    """One row of the room (ROOM_FIELDS, then every ROOM_COLUMNS column): integers and strings only."""
    now = time.time() if now is None else now
    states = [j.state for j in person.jobs]
    failed = person.failures
    last = failed[-1] if failed else None
    active = person.last_activity
    row: dict[str, Any] = {
        "pseudonym": person.pseudonym, "user": ",".join(sorted(person.users)), "lab": person.lab,
        "needs_help": "yes" if person.needs_help else "",
        "submitted": len(states), "pending": sum(s in PENDING_STATES for s in states),
        "running": sum(s in RUNNING_STATES for s in states), "failed": len(failed),
        "last_failed_job": last.job_id if last else "", "last_failed_state": last.state if last else "",
        "last_stderr": "\n".join(last_stderr(last, stderr_lines)) if last and stderr_lines else "",
        "last_activity": time.strftime(ROOM_TIME_FORMAT, time.localtime(active)) if active else "",
        "idle_min": max(0, round((now - active) / 60)) if active else "",
    }
    for name, column in ROOM_COLUMNS.items():
        try:
            row.update(column(person))
        except Exception as error:  # noqa: BLE001 - one column's failure must not hide the room
            row[name] = f"? ({error})"
    return row


def exit_ticket_cells(person: Participant) -> dict[str, Any]:
    """The room's exit-ticket column: each lab's latest score ("01 4/4, 02 3/5"), read from the course
    folders of their jobs (``labs.exit_ticket``'s files, attributed to the Unix users owning them)."""
    from coursekit.labs.kit.ticket import room_scores, scores_text

    return {"exit_tickets": scores_text(room_scores(person.course_folders, person.users, person.pseudonym))}


def exercise_cells(person: Participant) -> dict[str, Any]:
    """The room's exercises column: each lab's latest in-notebook exercise score ("10 3/4": lab 10's clinic,
    cases diagnosed right of four), from the same course folders as the exit tickets."""
    from coursekit.labs.kit.exercise_scores import EXERCISES_SUBDIR
    from coursekit.labs.kit.ticket import room_scores, scores_text

    return {"exercises": scores_text(room_scores(person.course_folders, person.users, person.pseudonym,
                                                 kind=EXERCISES_SUBDIR))}


ROOM_COLUMNS["exit_tickets"] = exit_ticket_cells
ROOM_COLUMNS["exercises"] = exercise_cells


def room_table(roots: list[str | os.PathLike] | None = None, prefix: str | None = None, *,
               stderr_lines: int = STDERR_LINES, warnings: list[str] | None = None,
               predictions: list[str] | None = None) -> list[dict[str, Any]]:
    """The room, one row per participant, those needing help first (``coursekit instructor room``; a
    notebook widget shows it with ``show_room``). ``roots``: participants' jobs or course folders (default
    this course's); ``prefix``: the course's job prefix (default its coursekit.toml's); what could not be read
    is appended to ``warnings`` (when a list is given), never raised; the room's predictions against what it
    measured, one line per question, to ``predictions`` (when a list is given)."""
    if roots is not None and (isinstance(roots, (str, os.PathLike)) or not all(
            isinstance(r, (str, os.PathLike)) for r in roots)):
        raise ValueError(f"roots={roots!r}: give a list of folders, e.g. ['/home/ada/dl-course/jobs']")
    default = [course_dir() / JOBS_SUBDIR, site_jobs_dir()]  # the registry's folder, the site's job folders
    default = [p for p in default if p.is_dir()] or default[:1]
    default += participant_folders()  # each participant's own course folder (a hub's ~/course)
    room = gather_room([Path(r) for r in roots] if roots else default, job_prefix(prefix), stderr_lines=stderr_lines)
    if warnings is not None:
        warnings += room.warnings
    if predictions is not None:
        predictions += room_prediction_lines(room, warnings)
    return [participant_row(p, room.stderr_lines) for p in room.participants]


def room_prediction_lines(room: Room, warnings: list[str] | None = None) -> list[str]:
    """The room's guesses beside its measurements (``labs.predict``'s files in every participant's course
    folder), one line per question; what cannot be read goes to ``warnings``."""
    from coursekit.labs.kit.predict import prediction_lines, room_predictions

    folders = {folder for person in room.participants for folder in person.course_folders}
    try:
        return prediction_lines(room_predictions(folders, warnings))
    except Exception as error:  # noqa: BLE001 - the predictions must not hide the room
        return [f"predictions could not be read ({error})"]


def room_fields(rows: list[dict[str, Any]]) -> list[str]:
    """ROOM_FIELDS, then the extra columns the rows hold."""
    return [*ROOM_FIELDS, *dict.fromkeys(k for r in rows for k in r if k not in ROOM_FIELDS)]


def write_room(rows: list[dict[str, Any]], out: Path) -> None:
    """The room as CSV (floats rounded as in the results table)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=room_fields(rows))
        writer.writeheader()
        writer.writerows({key: csv_cell(value) for key, value in row.items()} for row in rows)


def print_room(rows: list[dict[str, Any]], prefix: str, predictions: list[str] | None = None) -> None:
    """The room in the terminal: one line per participant, a failed job's last stderr lines under it."""
    shown = [f for f in room_fields(rows) if f != "last_stderr"]
    table = [tuple(shown)] + [tuple(str(csv_cell(r.get(f, ""))) for f in shown) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(shown))]
    for i, line in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
        if i and rows[i - 1].get("last_stderr"):
            for text in str(rows[i - 1]["last_stderr"]).splitlines():
                print(f"    | {text}")
    helped = sum(1 for r in rows if r["needs_help"])
    print(f"{len(rows)} participant(s) of course prefix {prefix!r}, {helped} needing help")
    for line in team_lines():
        print(line)
    if predictions:
        print("predictions (the room's guesses, then what it measured):")
        for line in predictions:
            print(f"  {line}")


def show_room(roots: list[str | os.PathLike] | None = None, prefix: str | None = None,
              stderr_lines: int = STDERR_LINES) -> Any:
    """The room as an HTML table for a notebook (those needing help first, highlighted); returns it."""
    from html import escape

    from IPython.display import HTML

    notes: list[str] = []
    guesses: list[str] = []
    rows = room_table(roots, prefix, stderr_lines=stderr_lines, warnings=notes, predictions=guesses)
    fields = room_fields(rows)
    head = "".join(f"<th>{escape(f)}</th>" for f in fields)
    body = "".join(
        "<tr" + (' style="background:#fde2e2"' if r["needs_help"] else "") + ">"
        + "".join(f"<td><pre style='margin:0'>{escape(str(r.get(f, '')))}</pre></td>" if f == "last_stderr"
                  else f"<td>{escape(str(csv_cell(r.get(f, ''))))}</td>" for f in fields) + "</tr>" for r in rows)
    notes_html = "".join(f"<p>&#9888; {escape(n)}</p>" for n in notes)
    teams_html = "".join(f"<p>{escape(line)}</p>" for line in team_lines())
    guesses_html = ("<p>Predictions (the room's guesses, then what it measured):</p><ul>"
                    + "".join(f"<li>{escape(line)}</li>" for line in guesses) + "</ul>") if guesses else ""
    return HTML(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{teams_html}{guesses_html}"
                f"{notes_html}")
