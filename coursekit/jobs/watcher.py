"""One state watcher per process: every Slurm job this process follows, asked about in one call.

``Job.state``, ``Job.wait``, ``wait_all`` (coursekit.labs) and the live queue view all read job states
from :func:`watcher`. It asks Slurm with ONE ``squeue`` for every job it follows that has not ended
(and one ``sacct`` for those that have left the queue), never more often than a delay that grows as the
jobs age, as submitit's own watcher does: ``min(MAX_DELAY_S, max(MIN_DELAY_S, age / 2))`` where ``age`` is
the time since the youngest followed job was submitted (or poked, e.g. by a cancel). A room of 30
participants waiting on 8-job sweeps thus sends each about one call every few seconds at first, then one
per ``MAX_DELAY_S``, however many jobs each follows. Ended jobs are not asked about again.

When ``squeue`` cannot answer (the controller is down), every job not known to have ended is reported
``UNKNOWN`` with Slurm's message (``Observation.reason``), never an accounting state that may be stale.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coursekit import slurm_cli
from coursekit.slurm_cli import TERMINAL_STATES, SlurmError

MIN_DELAY_S = 1.0  # a just-submitted job is asked about after 1 s, 2 s, 4 s, 8 s, ...
MAX_DELAY_S = 10.0  # ... then every 10 s at most: a participant waits at most this long to see a job end
UNSETTLED_STATES = frozenset({"PREEMPTED", "VANISHED"})  # ended, but may still change (requeue, slow disk)

# Where an observation came from
SQUEUE, SACCT, NOWHERE, UNREACHABLE, NOT_ASKED = "squeue", "sacct", "nowhere", "unreachable", "not asked"


@dataclass(frozen=True)
class Observation:
    """What Slurm said about one job at ``at`` (time.time()): its squeue/sacct row, or why there is none.

    ``source``: ``squeue`` or ``sacct`` (row given), ``nowhere`` (neither knows it: look on disk),
    ``unreachable`` (squeue failed: state UNKNOWN, ``error`` says why; or sacct failed for a job that
    left the queue) or ``not asked`` (no call made yet).
    """

    row: dict[str, str] | None
    source: str
    at: float
    error: SlurmError | None = None

    @property
    def state(self) -> str | None:
        return self.row["state"] if self.row is not None else ("UNKNOWN" if self.source == UNREACHABLE else None)

    @property
    def reason(self) -> str:
        """Why the state is what it is, in words (Slurm's reason for a pending job, or the error)."""
        if self.error is not None:
            return f"Slurm could not be asked: {self.error.message}"
        if self.row is not None:
            reason = self.row.get("reason", "")
            return "" if reason in ("", "None") else reason
        return {NOWHERE: "neither squeue nor sacct knows this job", NOT_ASKED: "not asked yet"}.get(self.source, "")


class StateWatcher:
    """Follows Slurm jobs by id (see the module docstring); thread-safe."""

    def __init__(self, min_delay_s: float = MIN_DELAY_S, max_delay_s: float = MAX_DELAY_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.min_delay_s, self.max_delay_s, self.clock = min_delay_s, max_delay_s, clock
        self._lock = threading.RLock()
        self._active: dict[str, float] = {}  # job id -> when it was submitted or last poked
        self._seen: dict[str, Observation] = {}
        self._last_call = float("-inf")
        self._hurried: set[str] = set()  # jobs whose files said they are ending (hurried once each)
        self.calls = 0  # Slurm commands run (squeue + sacct)
        self.last_error: SlurmError | None = None

    # ---------------------------------------------------------------- following jobs

    def follow(self, job_id: str, since: float | None = None) -> None:
        """Follow ``job_id`` (submitted at ``since``, default now) until it ends."""
        with self._lock:
            if job_id in self._seen and self._ended(self._seen[job_id]):
                return
            self._active.setdefault(job_id, since if since is not None else self.clock())

    def poke(self, job_id: str) -> None:
        """Something happened to the job (cancelled, requeued): ask soon again, and keep following it."""
        with self._lock:
            self._seen.pop(job_id, None)
            self._active[job_id] = self.clock()

    def hurry(self, job_id: str) -> None:
        """The job's own files say it is ending (its result is written): ask about it again after
        ``min_delay_s`` rather than up to ``max_delay_s``, so that a wait ends seconds after the job. Once per
        job: a job that takes a while to leave the queue gets the usual growing delay from then on."""
        with self._lock:
            if job_id in self._active and job_id not in self._hurried:
                self._hurried.add(job_id)
                self._active[job_id] = self.clock()

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._active.pop(job_id, None)
            self._seen.pop(job_id, None)

    @property
    def followed(self) -> list[str]:
        """Ids of the jobs still asked about."""
        with self._lock:
            return list(self._active)

    # ---------------------------------------------------------------- reading states

    def delay(self) -> float:
        """Seconds between two calls now (grows with the age of the youngest followed job)."""
        with self._lock:
            if not self._active:
                return self.max_delay_s
            age = self.clock() - max(self._active.values())
        return min(self.max_delay_s, max(self.min_delay_s, age / 2))

    def next_update_in(self) -> float:
        """Seconds until the watcher will ask Slurm again (0: now)."""
        with self._lock:
            return max(0.0, self._last_call + self.delay() - self.clock())

    def observe(self, job_id: str, since: float | None = None, refresh: bool = True) -> Observation:
        """The latest observation of ``job_id`` (followed from now on); asks Slurm first when the delay has
        passed and ``refresh`` is true."""
        return self.observe_all([job_id], refresh, since)[job_id]

    def observe_all(self, job_ids: Iterable[str], refresh: bool = True, since: float | None = None
                    ) -> dict[str, Observation]:
        """Observations of several jobs, with at most one round of calls (a job never asked about yet is
        asked about at once, but never sooner than ``min_delay_s`` after the previous call)."""
        ids = list(job_ids)
        with self._lock:
            for job_id in ids:
                self.follow(job_id, since)
            if refresh and any(j in self._active for j in ids):
                if any(j not in self._seen for j in ids):
                    self._sleep(self._last_call + self.min_delay_s - self.clock())
                    self.update()
                elif self.next_update_in() == 0:
                    self.update()
            return {j: self._seen.get(j, Observation(None, NOT_ASKED, self.clock())) for j in ids}

    @staticmethod
    def _sleep(seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def update(self) -> None:
        """Ask Slurm now about every followed job: one squeue, and one sacct for those that left it."""
        with self._lock:
            ids = sorted(self._active)
            self._last_call = self.clock()
            if not ids:
                return
            now = self.clock()
            try:
                self.calls += 1
                rows = slurm_cli.squeue(ids)
                self.last_error = None
            except SlurmError as error:
                self.last_error = error
                for job_id in ids:
                    self._seen[job_id] = Observation(None, UNREACHABLE, now, error)
                return
            missing = []
            for job_id in ids:
                row = slurm_cli.row_for(rows, job_id)
                if row is None:
                    missing.append(job_id)
                else:
                    self._record(job_id, Observation(row, SQUEUE, now))
            if missing:
                self._ask_accounting(missing, now)

    def _ask_accounting(self, ids: list[str], now: float) -> None:
        if not slurm_cli.accounting_enabled():
            for job_id in ids:
                self._record(job_id, Observation(None, NOWHERE, now))
            return
        try:
            self.calls += 1
            rows = slurm_cli.sacct(ids)
        except SlurmError as error:
            for job_id in ids:
                self._seen[job_id] = Observation(None, UNREACHABLE, now, error)
            return
        for job_id in ids:
            row = slurm_cli.row_for(rows, job_id)
            self._record(job_id, Observation(row, SACCT if row is not None else NOWHERE, now))

    def _record(self, job_id: str, seen: Observation) -> None:
        self._seen[job_id] = seen
        if self._ended(seen):
            self._active.pop(job_id, None)

    @staticmethod
    def _ended(seen: Observation) -> bool:
        return seen.state in TERMINAL_STATES and seen.state not in UNSETTLED_STATES


_watcher: StateWatcher | None = None
_watcher_lock = threading.Lock()


def watcher() -> StateWatcher:
    """This process's watcher (made on first use)."""
    global _watcher
    with _watcher_lock:
        if _watcher is None:
            _watcher = StateWatcher()
        return _watcher


def reset() -> StateWatcher:
    """A fresh watcher for this process (tests; or after Slurm was reconfigured)."""
    global _watcher
    with _watcher_lock:
        _watcher = StateWatcher()
        return _watcher
