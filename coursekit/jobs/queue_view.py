"""``display_slurm_queue``: the course's jobs as a table that follows them.

In a Jupyter kernel: an ipywidgets HTML table that returns at once and refreshes from a background
thread every ``timestep`` seconds (state, elapsed, node, progress from the job's metrics, last log line),
and stops by itself when every job shown has ended. It never touches signal handlers, so Jupyter's
interrupt keeps working. Elsewhere: a plain-text table, printed once (``watch_queue`` repeats it for
``coursekit queue --watch``).

Rows come from the registry's Job handles (so local jobs work too); Slurm jobs' states come from this
process's state watcher (coursekit/jobs/watcher.py: one ``squeue`` for all of them and, once they leave
the queue, one ``sacct``, at the watcher's bounded pace whatever ``timestep`` is; a running job's
elapsed time is counted on between two calls); ended jobs are not asked again.
The table itself is rendered by the pure functions of coursekit/jobs/queue_table.py.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import IO

from coursekit import slurm_cli
from coursekit.jobs import registry
from coursekit.jobs.handle import ENDED_BY_SLURM, UNCACHED_TERMINAL, Job, tail_lines
from coursekit.jobs.queue_table import (
    UNKNOWN,
    QueueRow,
    gpu_util_text,
    last_log_line,
    progress_text,
    rows_to_html,
    rows_to_text,
    status_message,
)
from coursekit.jobs.watcher import SACCT, SQUEUE, UNREACHABLE, Observation, watcher
from coursekit.metrics import metrics_path
from coursekit.slurm_cli import SlurmError

DEFAULT_TIMESTEP_S = 2.0
RECENT_S = 3600.0  # ended jobs submitted this long ago or less are still shown
MAX_ROWS = 40  # newest jobs kept in the view
LOG_LINES_SCANNED = 20  # enough to get past submitit's closing INFO lines
UNREACHABLE_GIVE_UP_S = 600.0  # the live view stops when Slurm stays unreachable this long


JobKey = tuple[str, str]  # (scheduler, job id): a local pid may equal a Slurm job id


def _key(job: Job) -> JobKey:
    return job.scheduler, job.job_id


class QueueSource:
    """Builds the rows for the jobs called ``name`` (or the given ``jobs``), refreshing only what can change."""

    def __init__(self, name: str | None = None, jobs: Sequence[Job] | None = None, recent_s: float = RECENT_S,
                 max_rows: int = MAX_ROWS, clock: Callable[[], float] = time.time) -> None:
        self.name, self._given, self.recent_s, self.max_rows, self.clock = name, jobs, recent_s, max_rows, clock
        self._jobs: dict[JobKey, Job] = {}
        self._ended: dict[JobKey, QueueRow] = {}  # rows that will not change any more
        # metrics file (mtime, size) -> (progress text, GPU utilisation text)
        self._progress: dict[JobKey, tuple[tuple[int, int], tuple[str, str]]] = {}
        self.error: SlurmError | None = None

    def jobs(self) -> list[Job]:
        """The jobs shown: not known to have ended, or submitted less than ``recent_s`` ago; newest last."""
        if self._given is not None:
            for job in self._given:
                self._jobs.setdefault(_key(job), job)
        else:
            now = self.clock()
            for record in registry.merged_records():
                if self.name is not None and record.get("name") != self.name:
                    continue
                key = (str(record.get("scheduler", "slurm")), str(record["job_id"]))
                recent = now - float(record.get("submitted_at") or 0.0) <= self.recent_s
                if key not in self._jobs and (record.get("final_state") is None or recent):
                    self._jobs[key] = Job.from_record(record)
        return sorted(self._jobs.values(), key=lambda job: job.submitted_at)[-self.max_rows:]

    def rows(self) -> list[QueueRow]:
        jobs = self.jobs()
        slurm_jobs = [job for job in jobs if job.scheduler != "local" and _key(job) not in self._ended]
        for job in slurm_jobs:
            watcher().follow(job.job_id, job.submitted_at)
        seen = watcher().observe_all([job.job_id for job in slurm_jobs])
        errors = [s.error for s in seen.values() if s.source == UNREACHABLE and s.error is not None]
        self.error = errors[0] if errors else None
        rows = []
        for job in jobs:
            ended = self._ended.get(_key(job))
            if ended is not None:
                rows.append(ended)
                continue
            from_slurm = self._slurm_row(job, seen[job.job_id]) if job.job_id in seen else None
            row = from_slurm or self._row_from_handle(job)
            progress, gpu_util = self._progress_of(job)
            row = replace(row, progress=progress, gpu_util=gpu_util, last_line=_last_line(job, row.state))
            if row.done:
                self._ended[_key(job)] = row
                if from_slurm is not None and self._given is None:
                    _record_final_state(job, row.state)
            rows.append(row)
        return rows

    def _progress_of(self, job: Job) -> tuple[str, str]:
        """progress_text and gpu_util_text of the job's metrics, read again only when the file changed."""
        try:
            info = metrics_path(job.run_dir).stat()
        except OSError:
            return "", UNKNOWN
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._progress.get(_key(job))
        if cached is None or cached[0] != stamp:
            records = job.metrics()
            cached = (stamp, (progress_text(records), gpu_util_text(records)))
            self._progress[_key(job)] = cached
        return cached[1]

    def _slurm_row(self, job: Job, seen: Observation) -> QueueRow | None:
        """The row from what squeue or sacct said (None: neither knows the job, the handle tells)."""
        if seen.source == UNREACHABLE and seen.error is not None and seen.error.command[:1] == ["squeue"]:
            return QueueRow(job.job_id, job.name, "UNKNOWN")
        if seen.row is None or seen.source not in (SQUEUE, SACCT):
            return None
        entry = seen.row
        elapsed = slurm_cli.parse_duration(entry.get("elapsed", ""))
        if elapsed is not None and entry["state"] == "RUNNING":
            elapsed += int(max(0.0, self.clock() - seen.at))  # counted on since the watcher asked
        node = entry.get("node_list", "")
        node = "" if node in ("None assigned", "(null)") else node
        reason = entry.get("reason", "")
        if not node and seen.source == SQUEUE and reason and reason != "None":
            node = f"({reason})"
        return QueueRow(job.job_id, job.name, entry["state"], elapsed, node)

    @staticmethod
    def _row_from_handle(job: Job) -> QueueRow:
        """Local jobs, and Slurm jobs neither squeue nor sacct knows (the handle reads the disk)."""
        state = job.state
        if job.scheduler != "local":
            return QueueRow(job.job_id, job.name, state)
        return QueueRow(job.job_id, job.name, state, job.elapsed, job.node or "")


def _record_final_state(job: Job, state: str) -> None:
    """Tell the registry (as Job.state does), so that later views and list_jobs() need not ask Slurm."""
    if state in UNCACHED_TERMINAL:
        return
    try:
        registry.append({"event": "state", "job_id": job.job_id, "scheduler": job.scheduler, "state": state,
                         "time": time.time()})
    except OSError:
        pass


def _last_line(job: Job, state: str = "") -> str:
    """The last meaningful line of stdout/stderr, from the one written last first (a job Slurm or the
    user ended says so plainly)."""
    if state in ENDED_BY_SLURM:
        return f"job {ENDED_BY_SLURM[state]}"
    written = []
    for path in (job.stdout, job.stderr):
        try:
            info = path.stat()
        except OSError:
            continue
        if info.st_size > 0:
            written.append((info.st_mtime_ns, path))
    for _, path in sorted(written, reverse=True):
        line = last_log_line(tail_lines(path, LOG_LINES_SCANNED))
        if line:
            return line
    return ""


def in_kernel() -> bool:
    """Running inside a Jupyter kernel (IPython is imported only if it already is)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


class QueueView:
    """The live widget and its refresh thread (``stop()`` ends it early; ``thread.join()`` waits)."""

    def __init__(self, source: QueueSource, timestep: float) -> None:
        import ipywidgets

        self.source, self.timestep = source, timestep
        self.widget = ipywidgets.HTML(value=rows_to_html([], "loading…"))
        self.rows: list[QueueRow] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="coursekit-queue-view", daemon=True)

    def start(self) -> QueueView:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def refresh(self) -> bool:
        """One refresh; True while some job shown has not ended."""
        self.rows = self.source.rows()
        self.widget.value = rows_to_html(self.rows, status_message(self.rows, self.source.error))
        return any(not row.done for row in self.rows)

    def _run(self) -> None:
        unreachable_since: float | None = None
        while not self._stop.is_set():
            try:
                active = self.refresh()
            except Exception as error:  # noqa: BLE001 - a refresh error must not kill the view silently
                self.widget.value = rows_to_html(self.rows, f"queue view stopped: {error!r}")
                return
            if self.source.error is None:
                unreachable_since = None
            else:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > UNREACHABLE_GIVE_UP_S:
                    return
            if not active:
                return
            self._stop.wait(self.timestep)

    def _ipython_display_(self) -> None:
        """Shown already by display_slurm_queue: returning the view from a cell adds nothing."""


def print_queue(source: QueueSource, out: IO[str] | None = None) -> list[QueueRow]:
    rows = source.rows()
    print(rows_to_text(rows, status_message(rows, source.error)), file=out or sys.stdout, flush=True)
    return rows


def watch_queue(name: str | None = None, timestep: float = DEFAULT_TIMESTEP_S, out: IO[str] | None = None,
                clear: bool = True, source: QueueSource | None = None) -> list[QueueRow]:
    """Print the table every ``timestep`` seconds until every job has ended (Ctrl-C stops it)."""
    _check_arguments(name, timestep)
    source = source or QueueSource(name)
    stream = out or sys.stdout
    while True:
        if clear and stream.isatty():
            stream.write("\033[H\033[2J")
        rows = print_queue(source, stream)
        if all(row.done for row in rows):
            return rows
        time.sleep(timestep)


def _check_arguments(name: object, timestep: object) -> None:
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"name={name!r}: give a job name, or None for every job of the course")
    if isinstance(timestep, bool) or not isinstance(timestep, (int, float)) or not timestep > 0:
        raise ValueError(f"timestep={timestep!r}: give the refresh period in seconds, a number > 0")


def display_slurm_queue(name: str | None = None, timestep: float = DEFAULT_TIMESTEP_S, *,
                        jobs: Sequence[Job] | None = None) -> QueueView | list[QueueRow]:
    """Show the course's jobs called ``name`` (all when None), or the given ``jobs``.

    In a notebook: a live table refreshed every ``timestep`` seconds in the background; returns the
    ``QueueView`` at once. Elsewhere: prints the table once and returns its rows.
    """
    _check_arguments(name, timestep)
    source = QueueSource(name, jobs)
    if not in_kernel():
        return print_queue(source)
    from IPython.display import display

    view = QueueView(source, float(timestep))
    display(view.widget)
    return view.start()
