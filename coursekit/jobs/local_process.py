"""Local jobs are processes: their start time (to tell a pid from a later reuse), their children, and
reaping them when they end (else each stays ``<defunct>`` under the kernel until someone polls it)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

REAP_INTERVAL_S = 1.0
# interrupt(): SIGTERM this long after SIGINT to a process still there, SIGKILL as long after; longer than a
# task's own stop of its command (tasks.STOP_GRACE_S, 5 s), which it must be left to finish
STOP_GRACE_S = 10.0

_to_reap: list[subprocess.Popen] = []
_reaper_lock = threading.Lock()
_reaper: threading.Thread | None = None


def reap_when_done(process: subprocess.Popen) -> None:
    """Poll ``process`` from a daemon thread until it has ended (which reaps it); the thread stops when
    no process is left to watch."""
    global _reaper
    with _reaper_lock:
        if process not in _to_reap:
            _to_reap.append(process)
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap_loop, name="coursekit-reaper", daemon=True)
            _reaper.start()


def _reap_loop() -> None:
    global _reaper
    while True:
        with _reaper_lock:
            _to_reap[:] = [p for p in _to_reap if p.poll() is None]
            if not _to_reap:
                _reaper = None
                return
        threading.Event().wait(REAP_INTERVAL_S)


def process_start_time(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot), to tell it from a later one with the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return None if fields[0] == "Z" else fields[19]


def child_pids(pid: int | None) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    if pid is None:
        return []
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def interrupt(pids: list[int], grace_s: float | None = None) -> None:
    """SIGINT to each of ``pids`` now (a job's tasks end quietly on it); a daemon thread sends SIGTERM after
    ``grace_s`` (default ``STOP_GRACE_S``) and SIGKILL after twice that to any of them still running — the
    same process, by its start time: a pid reused meanwhile is left alone. Returns at once."""
    grace_s = STOP_GRACE_S if grace_s is None else grace_s
    started = {pid: process_start_time(pid) for pid in pids}
    started = {pid: start for pid, start in started.items() if start is not None}
    _signal_each(started, signal.SIGINT)
    if started:
        threading.Thread(target=_escalate, args=(started, grace_s), name="coursekit-stop", daemon=True).start()


def _signal_each(started: dict[int, str], signum: int) -> None:
    for pid, start in started.items():
        if process_start_time(pid) == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def _escalate(started: dict[int, str], grace_s: float) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        time.sleep(grace_s)
        left = {pid: start for pid, start in started.items() if process_start_time(pid) == start}
        if not left:
            return
        _signal_each(left, signum)
