"""Reading a clinic job's logs: what each rank wrote (its stamped lines, error lines, exit line, when it ended),
and :class:`Symptoms`, what the kit shows of one job (``clinic.symptoms``). Pure text in, so the tests plant logs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LAST_LINES = 4  # each rank's last own lines shown among the symptoms
# an earlier line of a rank is shown too when it says the rank left the common path (lab 10's mismatched collectives:
# "this rank's batch was empty: step skipped", three steps before the end)
OFF_PATH = re.compile(r"\bskipped\b")
MAX_HITS_PER_RANK = 4  # error lines shown per rank
HIT_CHARS = 600  # an error line shown up to this length (torch's mismatch report runs to ~550 characters)
LINE = re.compile(r"^\[clinic rank (?P<rank>\d+) t=(?P<t>\d+(?:\.\d+)?)\] (?P<text>.*)$")
EXIT_LINE = re.compile(r"^coursekit: (?P<text>.*)$")
EXIT_CODE = re.compile(r"exited with code (\d+)")
STOPPED_EXIT_CODE = 130  # 128 + SIGINT: a task the launcher stopped (coursekit.jobs.tasks says "another task ...")
ERROR_PATTERNS = re.compile(  # what to look for in a log: errors, timeouts, NCCL's warnings, torch's mismatch report
    r"Error|error:|Timed out|timed out|timeout after|Detected mismatch|out of memory|can't allocate|"
    r"clients joined|NCCL WARN|Connection closed|Connection reset|watchdog|Watchdog")
OOM_PATTERNS = re.compile(r"OutOfMemoryError|out of memory|can't allocate memory", re.IGNORECASE)
CLIENTS_JOINED = re.compile(r"(\d+)/(\d+) clients joined")
DIALLED = re.compile(r"\(([\w.\-]+), (\d+)\)|(?:host|to) [\w.\-]+:(\d+)")
FORMED = "process group formed"  # clinic_jobs' line once init_process_group returned
RANK_PREFIX = re.compile(r"^\[rank\d+\]: ")
# a traceback's frame and source lines, and a C++ stack's frames ("frame #0: c10::Error::Error(...)"): not errors
SOURCE_LINE = re.compile(r"^(\s{2,}|\s*File \"|\s*\^|frame #\d+: )")
ASKED_WORLD = re.compile(r"of world size (\d+) joins .* at tcp://[\w.\-]+:(\d+)")


@dataclass
class RankLog:
    """What one rank's logs tell."""

    rank: int
    events: list[tuple[float, str]]  # the job's own stamped lines (time, text)
    exit_line: str  # the task's last "coursekit: ..." line ("" when it ended cleanly)
    exit_code: int | None
    ended_at: float | None  # when its logs were last written (the task's end)
    last_lines: list[str]
    hits: list[str]  # error lines (ERROR_PATTERNS) of its stderr and stdout

    @property
    def failed_at(self) -> float | None:
        """When it wrote its own ``failed:`` line (None: it did not, e.g. killed)."""
        return next((t for t, text in reversed(self.events) if text.startswith("failed:")), None)

    @property
    def end(self) -> float | None:
        """When it ended: its ``failed:`` line, else its logs' last write."""
        return self.failed_at if self.failed_at is not None else self.ended_at

    @property
    def waited_s(self) -> float | None:
        """How long it sat in its last call before failing: its end minus its last line before that."""
        before = [t for t, text in self.events if not text.startswith("failed:")]
        return None if self.end is None or not before else self.end - before[-1]


def read_rank_log(rank: int, out_text: str, err_text: str, ended_at: float | None) -> RankLog:
    """A rank's :class:`RankLog` from its stdout and stderr text (planted text in the tests)."""
    lines = out_text.splitlines() + err_text.splitlines()
    # by time only: lines of one stamp keep the order the rank wrote them in (a GPU step can take under a ms)
    events = sorted(((float(m["t"]), m["text"]) for m in map(LINE.match, lines) if m and int(m["rank"]) == rank),
                    key=lambda event: event[0])
    exits = [m["text"] for m in map(EXIT_LINE.match, err_text.splitlines()) if m]
    exit_line = exits[-1] if exits else ""
    code = EXIT_CODE.search(exit_line)
    stopped = "another task" in exit_line or "cancelled" in exit_line
    exit_code = int(code.group(1)) if code else (STOPPED_EXIT_CODE if stopped else (None if exit_line else 0))
    hits = [line.strip() for line in map(_without_rank_prefix, err_text.splitlines() + out_text.splitlines())
            if ERROR_PATTERNS.search(line) and not LINE.match(line) and not SOURCE_LINE.match(line)]
    own = [line for line in out_text.splitlines() if line.strip()]
    return RankLog(rank, events, exit_line, exit_code, ended_at, own[-LAST_LINES:], hits)


def _without_rank_prefix(line: str) -> str:
    """A traceback line without torch's ``[rank1]: `` prefix (torch adds it to an uncaught error's lines)."""
    return RANK_PREFIX.sub("", line, count=1)


@dataclass
class Symptoms:
    """What the kit shows of one clinic job."""

    label: str
    job_id: str
    state: str
    exit_code: int | None
    ranks: list[RankLog]
    log_paths: list[str]

    @property
    def start(self) -> float | None:
        times = [t for r in self.ranks for t, _ in r.events[:1]]
        return min(times) if times else None

    def __str__(self) -> str:
        start = self.start or 0.0
        lines = [f"job {self.label} ({self.job_id}): {self.state}, exit code {self.exit_code}",
                 "  search_log(..., all_tasks=True, with_err=True):", *[f"    {p}" for p in self.log_paths]]
        for r in self.ranks:
            end = f"t+{r.end - start:.1f} s" if r.end is not None and self.start else "?"
            lines.append(f"  rank {r.rank}: ended at {end}, exit code {r.exit_code}"
                         + (f" — {r.exit_line}" if r.exit_line else ""))
            earlier = [event for event in r.events[:-LAST_LINES] if OFF_PATH.search(event[1])]
            for t, text in earlier + r.events[-LAST_LINES:]:
                lines.append(f"    t+{t - start:5.1f} s  {text[:160]}")
            for hit in _distinct(r.hits)[:MAX_HITS_PER_RANK]:
                lines.append(f"    error line: {hit[:HIT_CHARS]}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def _distinct(lines: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for line in lines:
        seen.setdefault(line, None)
    return list(seen)


def _read(path: Any) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _mtime(paths: Sequence[Any]) -> float | None:
    stamps = []
    for path in paths:
        try:
            stamps.append(path.stat().st_mtime)
        except OSError:
            pass
    return max(stamps) if stamps else None


def job_symptoms(job: Any, label: str = "?") -> Symptoms:
    """The symptoms of a clinic job (any coursekit Job of 2 tasks): what its logs and the kit tell."""
    from coursekit.jobs.logs import search_log

    ranks = [read_rank_log(entry["rank"], _read(entry["out"]), _read(entry["err"]),
                           _mtime([entry["out"], entry["err"]])) for entry in job.log_paths()]
    found = search_log(job.name, contains=job.job_id, with_err=True, all_tasks=True)
    paths = [*found["stdout"], *found["stderr"]]
    return Symptoms(label, job.job_id, job.state, job.exit_code, ranks, paths)
