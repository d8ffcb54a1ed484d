"""Exit tickets: each lab ends with a few questions on what this participant just measured, graded at once.

A question's expected answer is read from the participant's own results in the notebook (the batch size
that was fastest, a measured ratio, the share of a step spent waiting), never a fact to memorise; a number
is right within its tolerance, a choice when it names the measured one::

    ticket = labs.exit_ticket("02", {
        "fastest": labs.Question("Which batch size gave the most images per second?", fastest["batch_size"]),
        "speedup": labs.Question("How many times more images/s than the smallest batch?", ratio, rel_tol=0.1),
    })
    answers = {"fastest": 256, "speedup": 7}      # the participant's exercise
    ticket.grade(answers)                         # question, answer, measured, right or not; "Score: 1/2"

``grade`` stores the answers and the score in the course folder, one file per Unix user and lab
(``<course>/tickets/<lab>/<user>.json``, written whole or not at all, readable by the instructor), where
``coursekit instructor room`` reads the scores (``room_scores``). A question left at ``None`` counts as
not answered; a question whose measurement is missing (a failed job) is shown and not counted.

The storage helpers here (``own_record_path``, ``save_own_record``, ``read_records``) serve the
predictions too (``labs.kit.predict``): same course folder, same rule that each user writes only their
own file and the instructor attributes a file to its owner, never to a name inside it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coursekit.course import course_dir, user_name
from coursekit.labs.kit import pool

TICKETS_SUBDIR = "tickets"  # <course>/tickets/<lab>/<user>.json
RECORD_SUFFIX = ".json"
RECORD_FILE_MODE = 0o644  # the owner writes, the instructor reads
LAB_PATTERN = re.compile(r"\d\d")  # "00" ... "09"
KEY_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RELATIVE_SLACK = 1e-9  # a tolerance's edge counts as inside despite rounding (0.1 + 0.2 != 0.3)
RIGHT, WRONG, NOT_ANSWERED, NOT_MEASURED = "RIGHT", "WRONG", "NOT ANSWERED", "NOT MEASURED"
STATUS_WIDTH = len(NOT_ANSWERED)


# ------------------------------------------------------------------------------------------ storage


def check_lab(lab: Any) -> str:
    """A lab number as the notebooks write it ("00" ... "09")."""
    if not isinstance(lab, str) or not LAB_PATTERN.fullmatch(lab):
        raise ValueError(f"lab={lab!r}: use the lab's two-digit number as a string, e.g. '02'")
    return lab


def check_key(key: Any, what: str = "key") -> str:
    """A question's or a prediction's name: letters, digits and underscores, as a Python name."""
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
        raise ValueError(f"{what}={key!r}: use a short name of letters, digits and underscores, e.g. 'speedup'")
    return key


def own_record_path(kind: str, lab: str, course: Path | None = None) -> Path:
    """This Unix user's file of ``kind`` ("tickets", "predictions") for ``lab`` in the course folder."""
    return Path(course or course_dir()) / kind / check_lab(lab) / f"{user_name(os.geteuid())}{RECORD_SUFFIX}"


def _make_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents); the ones created here let every user of a shared course add a
    file of their own (sticky: nobody can replace another's), shared from the moment they appear."""
    missing = []
    for parent in (folder, *folder.parents):
        if parent.is_dir():
            break
        missing.append(parent)
    for made in reversed(missing):
        pool.make_shared_folder(made)


def save_own_record(path: Path, record: Mapping[str, Any]) -> None:
    """Write ``record`` as JSON to ``path``, this user's own file: a temporary file renamed over it, so that
    a reader sees the old record or the new one, never half of one. Refuses another user's file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and (info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode)):
        raise PermissionError(f"{path} belongs to {user_name(info.st_uid)}, not to you ({user_name(os.geteuid())}), "
                              "or is not a plain file: ask the instructor to remove it")
    _make_folder(path.parent)
    fd, scratch = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), RECORD_FILE_MODE)
            json.dump(record, handle, indent=1, sort_keys=True, default=str)
        os.replace(scratch, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
        raise


def read_own_record(path: Path) -> dict[str, Any]:
    """This user's record at ``path`` ({} when there is none or it cannot be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_records(course: Path, kind: str, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every user's records of ``kind`` in ``course`` (``<course>/<kind>/<lab>/<user>.json``), each with
    ``lab`` from its folder and ``user`` from the file's owner (never from a field inside it). What cannot
    be read is appended to ``problems`` and skipped."""
    problems = [] if problems is None else problems
    records = []
    for path in sorted(Path(course, kind).glob(f"*/*{RECORD_SUFFIX}")):
        lab = path.parent.name
        if not LAB_PATTERN.fullmatch(lab):
            continue
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode):
                problems.append(f"{path}: not a plain file")
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            problems.append(f"{path}: cannot read it ({error})")
            continue
        if not isinstance(data, dict):
            problems.append(f"{path}: not a record")
            continue
        records.append({**data, "lab": lab, "user": user_name(info.st_uid)})
    return records


# ------------------------------------------------------------------------------------------ questions


def as_number(value: Any) -> float | None:
    """``value`` as a finite float (a number, or a string of one), None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip().replace(",", "."))
        except ValueError:
            return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _blank(answer: Any) -> bool:
    return answer is None or answer is Ellipsis or (isinstance(answer, str) and not answer.strip())


def _stored(answer: Any, question: Question) -> Any:
    """An answer as it is shown and saved: None, a float (numpy's too), or text."""
    if _blank(answer):
        return None
    number = None if question.choices else as_number(answer)
    if number is not None:
        return int(number) if isinstance(answer, int) and not isinstance(answer, bool) else number
    return answer if isinstance(answer, str) else str(answer)


def _show(value: Any, unit: str = "") -> str:
    """A number as a participant reads it: whole numbers and those of 1,000 or more without an exponent (a job id
    12694 is not "1.269e+04"), others to 4 significant digits."""
    if isinstance(value, float) and math.isfinite(value) and (value.is_integer() or abs(value) >= 1000):
        text = f"{value:.0f}"
    else:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".rstrip()


@dataclass(frozen=True)
class Question:
    """One question of an exit ticket.

    ``expected``: what this participant measured (a number, or one of ``choices``); None when the
    measurement is missing in this run (the question is shown, not counted). A number is right when
    ``|answer - expected| <= max(rel_tol * |expected|, abs_tol)`` (both 0: exactly); a choice when it names
    ``expected`` (case and spaces aside). ``computed``: a transfer question, whose answer is computed with the
    lab's idea (from given numbers, or from measured ones), not read in a cell: its answer shows as "computed"."""

    text: str
    expected: Any
    unit: str = ""
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    choices: tuple[str, ...] = ()
    computed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError(f"text={self.text!r}: write the question as a sentence")
        for name in ("rel_tol", "abs_tol"):
            tolerance = getattr(self, name)
            if as_number(tolerance) is None or isinstance(tolerance, str) or tolerance < 0:
                raise ValueError(f"{name}={tolerance!r}: give a number, 0 or more (0.1 for 10 %)")
        if isinstance(self.choices, str) or not all(isinstance(c, str) and c.strip() for c in self.choices):
            raise ValueError(f"choices={self.choices!r}: give a tuple of strings, e.g. ('full batch', 'B = 1')")
        object.__setattr__(self, "choices", tuple(self.choices))
        if self.expected is None:
            return
        if self.choices:
            if _choice(self.expected, self.choices) is None:
                raise ValueError(f"expected={self.expected!r} is not one of choices={self.choices!r}")
        elif as_number(self.expected) is None and not (isinstance(self.expected, float) and math.isnan(self.expected)):
            raise ValueError(f"expected={self.expected!r}: give the measured number (or choices=... for a choice)")

    @property
    def measured(self) -> Any:
        """The expected answer, None when it was not measured (a NaN counts as not measured)."""
        if self.expected is None or self.choices:
            return self.expected
        return as_number(self.expected)

    def grade(self, answer: Any) -> str:
        """RIGHT, WRONG, NOT ANSWERED or NOT MEASURED."""
        if _blank(answer):
            return NOT_ANSWERED
        if self.measured is None:
            return NOT_MEASURED
        if self.choices:
            return RIGHT if _choice(answer, self.choices) == _choice(self.expected, self.choices) else WRONG
        number = as_number(answer)
        if number is None:
            return WRONG
        measured = float(self.measured)
        allowed = max(self.rel_tol * abs(measured), self.abs_tol)
        return RIGHT if abs(number - measured) <= allowed + RELATIVE_SLACK * max(abs(measured), 1.0) else WRONG

    def tolerance_text(self) -> str:
        """When an answer is right, in words: "right within 10 % of it", "right if exact", "choices: ..."."""
        if self.choices:
            return "choices: " + ", ".join(self.choices)
        parts = [f"within {100 * self.rel_tol:g} % of it"] if self.rel_tol else []
        parts += [f"within ± {_show(float(self.abs_tol), self.unit)}"] if self.abs_tol else []
        return "right " + (" or ".join(parts) or "if exact")


def _choice(value: Any, choices: tuple[str, ...]) -> str | None:
    """The choice ``value`` names (case and spaces aside; a number names "256"), None when none."""
    wanted = " ".join(str(value).split()).casefold()
    return next((c for c in choices if " ".join(c.split()).casefold() == wanted), None)


@dataclass(frozen=True, repr=False)
class Graded:
    """What ``ExitTicket.grade`` found: one row per question, the score, and whether it was saved."""

    lab: str
    rows: list[dict[str, Any]]
    score: int
    total: int
    saved: bool
    note: str = ""

    def __str__(self) -> str:
        return f"{self.score}/{self.total}"

    def __repr__(self) -> str:
        return f"Graded(lab {self.lab}: {self.score}/{self.total})"


@dataclass
class ExitTicket:
    """The questions of one lab's exit ticket (``labs.exit_ticket``); ``grade(answers)`` checks the answers."""

    lab: str
    questions: dict[str, Question] = field(default_factory=dict)

    def blank(self) -> dict[str, None]:
        """The answers before any is given: every question's key with None."""
        return dict.fromkeys(self.questions)

    def __str__(self) -> str:
        lines = [f"Exit ticket, lab {self.lab}: {len(self.questions)} questions on what you measured above."]
        lines += [f"  {key}: {q.text}" + (f" ({q.unit})" if q.unit else "")
                  + (f" [{', '.join(q.choices)}]" if q.choices else "") for key, q in self.questions.items()]
        lines.append("Answer them in the next cell, e.g.  answers = {"
                     + ", ".join(f'"{key}": ...' for key in self.questions) + "}")
        return "\n".join(lines)

    def grade(self, answers: Mapping[str, Any], *, course: Path | None = None, quiet: bool = False) -> Graded:
        """Check ``answers`` ({question key: your answer}; None or a missing key: not answered), print
        question, your answer, measured and the verdict, store the answers and the score in the course
        folder, and return them."""
        if not isinstance(answers, Mapping):
            raise ValueError(f"answers={answers!r}: give a dict of your answers, e.g. "
                             + "{" + ", ".join(f'"{k}": ...' for k in self.questions) + "}")
        unknown = [k for k in answers if k not in self.questions]
        if unknown:
            raise ValueError(f"answers: no question is called {', '.join(repr(k) for k in unknown)}; "
                             f"the questions of lab {self.lab} are {', '.join(repr(k) for k in self.questions)}")
        rows = []
        for key, question in self.questions.items():
            answer = answers.get(key)
            rows.append({"key": key, "question": question.text, "answer": _stored(answer, question),
                         "measured": question.measured, "unit": question.unit, "status": question.grade(answer),
                         "tolerance": question.tolerance_text(), "computed": question.computed})
        total = sum(r["measured"] is not None for r in rows)  # a question whose measurement is missing: not counted
        score = sum(r["status"] == RIGHT for r in rows)
        saved, note = self._save(rows, score, total, course)
        graded = Graded(self.lab, rows, score, total, saved, note)
        if not quiet:
            print(render(graded))
        return graded

    def _save(self, rows: list[dict[str, Any]], score: int, total: int, course: Path | None) -> tuple[bool, str]:
        from coursekit.labs.kit.participant import choose_pseudonym

        try:
            pseudonym = choose_pseudonym()
        except ValueError:
            pseudonym = ""
        record = {"lab": self.lab, "pseudonym": pseudonym, "saved_at": time.time(), "score": score, "total": total,
                  "questions": {r["key"]: {k: r[k] for k in ("question", "answer", "measured", "unit", "status")}
                                for r in rows}}
        try:
            save_own_record(own_record_path(TICKETS_SUBDIR, self.lab, course), record)
        except OSError as error:
            return False, f"Your answers could not be saved ({error}); tell the instructor your score."
        return True, "Your answers and your score are saved for the instructor."


def render(graded: Graded) -> str:
    """The graded ticket as text: a line per question with its verdict (stable from run to run), the
    numbers under it on a ``measured:`` line, ``computed:`` for a transfer question (they vary; the notebooks'
    checks mask that line)."""
    lines = [f"Exit ticket, lab {graded.lab}: {graded.score}/{graded.total} right"]
    for row in graded.rows:
        lines.append(f"  {row['status']:<{STATUS_WIDTH}}  {row['key']}: {row['question']}")
        label = "computed" if row.get("computed") else "measured"
        missing = "not computed in this run (a number it needs was not measured)" if row.get("computed") \
            else "not measured in this run"
        measured = missing if row["measured"] is None else _show(row["measured"], row["unit"])
        answer = "none" if row["answer"] is None else _show(row["answer"], row["unit"])
        lines.append(f"      {label}: {measured}; your answer: {answer} ({row['tolerance']})")
    lines.append(f"Score: {graded.score}/{graded.total}. {graded.note}")
    return "\n".join(lines)


def exit_ticket(lab: str, questions: Mapping[str, Question], *, quiet: bool = False) -> ExitTicket:
    """The exit ticket of ``lab``: ``questions`` maps a short key to a ``Question`` whose expected answer
    comes from this run's results. Prints the questions (not their answers) and returns the ticket."""
    check_lab(lab)
    if not isinstance(questions, Mapping) or not questions:
        raise ValueError(f"questions={questions!r}: give a dict of short names to labs.Question(...)")
    for key, question in questions.items():
        check_key(key, "question key")
        if not isinstance(question, Question):
            raise ValueError(f"questions[{key!r}] is a {type(question).__name__}: make it a labs.Question(...)")
    ticket = ExitTicket(lab, dict(questions))
    if not quiet:
        print(ticket)
    return ticket


# ------------------------------------------------------------------------------------------ the instructor


def room_scores(course_folders: list[Path] | set[Path], users: set[str], pseudonym: str,
                problems: list[str] | None = None, kind: str = TICKETS_SUBDIR) -> dict[str, tuple[int, int]]:
    """One participant's latest score per lab ({"02": (3, 4)}) in records of ``kind`` (exit tickets, or
    ``EXERCISES_SUBDIR``: an exercise done in the notebook) from the course folders their jobs came from:
    the files these Unix users own, or, when their users are unknown, the records of this pseudonym."""
    latest: dict[str, dict[str, Any]] = {}
    for course in sorted(set(course_folders)):
        for record in read_records(Path(course), kind, problems):
            theirs = record["user"] in users if users else record.get("pseudonym") == pseudonym
            if not theirs or as_number(record.get("score")) is None or as_number(record.get("total")) is None:
                continue
            stamp = as_number(record.get("saved_at")) or 0.0
            if record["lab"] not in latest or stamp >= (as_number(latest[record["lab"]].get("saved_at")) or 0.0):
                latest[record["lab"]] = record
    return {lab: (int(r["score"]), int(r["total"])) for lab, r in sorted(latest.items())}


def scores_text(scores: Mapping[str, tuple[int, int]]) -> str:
    """``01 4/4, 02 3/5``: the room's cell."""
    return ", ".join(f"{lab} {score}/{total}" for lab, (score, total) in scores.items())
