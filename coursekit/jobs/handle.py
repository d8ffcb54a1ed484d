"""``Job``: one submitted job, followed from the notebook (state, logs, metrics, result, cancel).

State, for a Slurm job: from this process's state watcher (coursekit/jobs/watcher.py: one squeue for
every job followed, at a bounded rate); once the job has left the queue, from sacct; where there is no
accounting, from what the job left on disk (submitit's result pickle, Slurm's messages in the log).
When squeue cannot answer, the state is ``UNKNOWN`` and ``state_reason`` says why. A job found nowhere
is ``VANISHED`` (terminal), so ``wait()`` never polls forever. A local job (submitit's LocalExecutor) is
followed through its controller's pid; its process is reaped as soon as it ends.

Logs: one stdout/stderr pair per task (rank): ``tail(n, stream, rank=...)`` shows the job's own lines
(submitit's and srun's notes left out), ``log_paths()`` lists them all.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

from submitit.core.utils import JobPaths, pickle_load

from coursekit import slurm_cli
from coursekit.jobs import registry
from coursekit.jobs.local_process import child_pids, interrupt, process_start_time, reap_when_done
from coursekit.jobs.logs import job_output
from coursekit.jobs.tasks import CANCEL_MARKER
from coursekit.jobs.watcher import NOT_ASKED, UNREACHABLE, UNSETTLED_STATES, watcher
from coursekit.metrics import read_metrics
from coursekit.slurm_cli import TERMINAL_STATES, SlurmError

POLL_START_S = 0.5  # local jobs: a process poll, cheap; Slurm jobs wait for the watcher's next call
POLL_MAX_S = 5.0
POLL_GROWTH = 1.5
MIN_SLEEP_S = 0.05
CONTROLLER_DOWN_GRACE_S = 30.0  # wait() raises when Slurm stays unreachable this long
TAIL_BLOCK_BYTES = 8192
TAIL_SCAN_FACTOR = 4  # tail(n) reads this many times n lines, to have n left once submitit's are dropped
MAX_TAIL_SCAN_LINES = 100_000  # the window tail() reads stops growing here
EXIT_CODE_IN_RESULT = re.compile(r"exited with code (\d+)")
ENDED_BY_SLURM = {"CANCELLED": "was cancelled", "TIMEOUT": "reached its time limit",
                  "OUT_OF_MEMORY": "ran out of memory", "NODE_FAIL": "lost its node", "PREEMPTED": "was preempted",
                  "DEADLINE": "reached its deadline", "BOOT_FAIL": "could not boot its node"}
LOG_MARKERS = (  # Slurm's own words in a job's stderr -> state (checked after a successful result)
    ("DUE TO TIME LIMIT", "TIMEOUT"),
    ("DUE TO NODE FAILURE", "NODE_FAIL"),
    ("DUE TO PREEMPTION", "PREEMPTED"),
    ("oom-kill", "OUT_OF_MEMORY"),
    ("Out Of Memory", "OUT_OF_MEMORY"),
    ("CANCELLED AT", "CANCELLED"),
)
LOCAL_TIMEOUT_HINT = "timed-out and not checkpointable"
UNCACHED_TERMINAL = UNSETTLED_STATES  # may still change (requeue, slow filesystem)


class JobFailedError(RuntimeError):
    """The job did not return a result: its exception (with the remote traceback) or its final state."""


def tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of a (possibly large, possibly growing) text file."""
    if not path.is_file() or n <= 0:
        return []
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        position, data = handle.tell(), b""
        while position > 0 and data.count(b"\n") <= n:
            step = min(TAIL_BLOCK_BYTES, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    return list(deque(data.decode("utf-8", errors="replace").splitlines(), maxlen=n))


def _own_last_lines(path: Path, n: int) -> list[str]:
    """The job's own last ``n`` lines: the window read grows until it holds ``n`` of them (srun and
    slurmstepd may end a log with several lines of their own) or the file has no more."""
    scan = n * TAIL_SCAN_FACTOR
    while n > 0:
        raw = tail_lines(path, scan)
        own = job_output(raw)
        if len(own) >= n or len(raw) < scan or scan >= MAX_TAIL_SCAN_LINES:
            return own[-n:]
        scan *= TAIL_SCAN_FACTOR
    return []


class Job:
    """A job submitted by coursekit (see the module docstring)."""

    def __init__(self, job_id: str, name: str, folder: str | Path, site: str = "slurm", scheduler: str = "slurm",
                 command: str = "", kind: str = "command", n_gpu: int = 1, num_tasks: int = 1,
                 submitted_at: float | None = None, time_limit_min: int | None = None, pid: int | None = None,
                 pid_start: str | None = None, final_state: str | None = None, submitit_job: Any = None,
                 **_ignored: Any) -> None:
        self.job_id, self.name, self.folder = str(job_id), name, Path(folder)
        self.site, self.scheduler, self.command, self.kind = site, scheduler, command, kind
        self.n_gpu, self.num_tasks = n_gpu, num_tasks
        self.submitted_at = submitted_at if submitted_at is not None else time.time()
        self.time_limit_min, self.pid, self.pid_start = time_limit_min, pid, pid_start
        self._final = final_state if final_state not in UNCACHED_TERMINAL else None
        self._submitit_job = submitit_job
        self._info: dict[str, str] = {}
        self._accounted = False  # sacct asked once for a job that ended (exit code, elapsed, node)
        self.last_error: SlurmError | None = None
        self.state_reason = ""  # why the state is what it is (Slurm's pending reason, or why UNKNOWN)
        process = getattr(submitit_job, "_process", None)
        if process is not None:
            reap_when_done(process)  # no <defunct> process left under the kernel
        if scheduler != "local" and self._final is None:
            watcher().follow(self.job_id, self.submitted_at)

    # ------------------------------------------------------------ construction

    def record(self) -> dict[str, Any]:
        return {"event": "submitted", "job_id": self.job_id, "name": self.name, "folder": str(self.folder),
                "site": self.site, "scheduler": self.scheduler, "command": self.command, "kind": self.kind,
                "n_gpu": self.n_gpu, "num_tasks": self.num_tasks, "submitted_at": self.submitted_at,
                "time_limit_min": self.time_limit_min, "pid": self.pid, "pid_start": self.pid_start}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Job:
        return cls(**{k: v for k, v in record.items() if k != "event"})

    @classmethod
    def from_folder(cls, folder: Path) -> Job:
        """A handle rebuilt from a job folder alone (``<course>/jobs/<name>/<job_id>``)."""
        job_id = folder.name
        is_local = not (folder / f"{job_id.split('_')[0]}_submission.sh").exists() and "_" not in job_id
        return cls(job_id, folder.parent.name, folder, site="local" if is_local else "slurm",
                   scheduler="local" if is_local else "slurm", submitted_at=folder.stat().st_mtime,
                   pid=int(job_id) if is_local and job_id.isdigit() else None)

    # ------------------------------------------------------------ paths and logs

    @property
    def paths(self) -> JobPaths:
        return JobPaths(self.folder, job_id=self.job_id, task_id=0)

    @property
    def stdout(self) -> Path:
        return self.paths.stdout

    @property
    def stderr(self) -> Path:
        return self.paths.stderr

    @property
    def run_dir(self) -> Path:
        """Where the job writes its metrics (``$COURSEKIT_RUN_ROOT/<job_id>``, the job's folder)."""
        return self.folder

    @property
    def submission_script(self) -> Path:
        """The sbatch script (one per job array, in the array's own folder ``<name>/<array_id>``)."""
        array_id = self.job_id.split("_")[0]
        return self.folder.parent / array_id / f"{array_id}_submission.sh"

    def log_paths(self) -> list[dict[str, Path]]:
        """Every task's logs, by rank: ``[{"rank": 0, "out": Path, "err": Path}, ...]`` (one per Slurm task;
        with torchrun, one task per node whose log holds the output of all that node's processes)."""
        return [{"rank": task, "out": paths.stdout, "err": paths.stderr}
                for task in range(max(1, self.num_tasks))
                for paths in [JobPaths(self.folder, job_id=self.job_id, task_id=task)]]

    def _log(self, stream: str, rank: int) -> Path:
        if stream not in ("out", "err"):
            raise ValueError(f"stream={stream!r}: use 'out' or 'err'")
        tasks = max(1, self.num_tasks)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < tasks:
            per_task = f"; torchrun runs {self.n_gpu // tasks} processes in each task, their output shares " \
                       "that task's log" if self.n_gpu > tasks else ""
            raise ValueError(f"rank={rank!r}: job {self.job_id} has {tasks} task log(s), use rank=0..{tasks - 1}"
                             f"{per_task}")
        paths = JobPaths(self.folder, job_id=self.job_id, task_id=rank)
        return paths.stdout if stream == "out" else paths.stderr

    def tail(self, n: int = 10, stream: str = "out", rank: int = 0, raw: bool = False) -> str:
        """The last ``n`` lines the job wrote to task ``rank``'s stdout (``stream="out"``) or stderr
        (``"err"``): submitit's own log lines and srun's notes about its tasks left out (``raw=True``: the
        file as it is). A job that Slurm ended (cancelled, out of time, ...) says so in a last line."""
        path = self._log(stream, rank)
        if raw:
            return "\n".join(tail_lines(path, n))
        lines = _own_last_lines(path, n)
        state = self._final or (self.state if self.scheduler == "local" or path.exists() else None)
        ending = ENDED_BY_SLURM.get(state or "")
        last = lines[-1].lower() if lines else ""
        if ending is not None and n > 0 and ending not in last and (state or "").lower() not in last:
            lines = [*lines, f"coursekit: job {self.job_id} {ending} ({state})"][-n:]
        return "\n".join(lines)

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.run_dir)

    # ------------------------------------------------------------ state

    @property
    def state(self) -> str:
        """Slurm's state name (see slurm_cli.TERMINAL_STATES), ``VANISHED`` or ``UNKNOWN``."""
        if self._final is not None:
            return self._final
        state = self._local_state() if self.scheduler == "local" else self._slurm_state()
        if state in TERMINAL_STATES and state not in UNCACHED_TERMINAL:
            self._final = state
            try:
                registry.append({"event": "state", "job_id": self.job_id, "scheduler": self.scheduler,
                                 "state": state, "time": time.time()})
            except OSError:
                pass
        return state

    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def _slurm_state(self, refresh: bool = True) -> str:
        seen = watcher().observe(self.job_id, self.submitted_at, refresh=refresh)
        self.last_error, self.state_reason = seen.error, seen.reason
        if seen.row is not None:
            self._info.update(seen.row)
            return seen.row["state"]
        if seen.source == NOT_ASKED:
            return "UNKNOWN"
        if seen.source == UNREACHABLE and seen.error is not None and seen.error.command[:1] == ["squeue"]:
            return "UNKNOWN"  # the controller did not answer: accounting or the disk may be stale
        from_disk = self._state_from_disk()
        if from_disk is not None:
            self.state_reason = "read from the job's files (Slurm no longer knows the job)"
            return from_disk
        return "UNKNOWN" if seen.source == UNREACHABLE else "VANISHED"

    def _details(self) -> dict[str, str]:
        """squeue's or sacct's row of the job; sacct is asked once after the job ended (exit code)."""
        self.state  # noqa: B018 - refreshes _info while the job is known to Slurm
        if self._final is not None and not self._accounted and self.scheduler != "local":
            row = None
            if slurm_cli.accounting_enabled():
                try:
                    row = slurm_cli.row_for(slurm_cli.sacct([self.job_id]), self.job_id)
                except SlurmError:
                    pass
            if row is not None and row["state"] in TERMINAL_STATES:
                self._info.update(row)
            # accounting lags behind the controller by about a second: ask again next time until it has
            # the job's end (or cannot tell at all)
            self._accounted = row is None or row["state"] in TERMINAL_STATES
        return self._info

    @property
    def exit_code(self) -> int | None:
        """The command's exit code once the job has ended (what a failing task recorded, else Slurm's
        ExitCode, else 0 for a task that succeeded); None while it runs or when nothing tells."""
        if not self.done():
            return None
        recorded = self._commands_exit_code()
        if recorded is not None:  # srun reports 15 for a step whose peer tasks it stopped after a failure
            return recorded
        if self.scheduler != "local":
            code = self._details().get("exit_code", "").split(":")[0]
            if code.isdigit():
                return int(code)
        outcome = self._outcome()
        return 0 if outcome is not None and outcome[0] == "success" else None

    def _local_alive(self) -> bool:
        process = getattr(self._submitit_job, "_process", None)
        if process is not None:
            return process.poll() is None
        return self.pid is not None and self.pid_start is not None and process_start_time(self.pid) == self.pid_start

    def _local_state(self) -> str:
        if self._local_alive():
            return "RUNNING"
        if (self.folder / CANCEL_MARKER).exists():
            return "CANCELLED"
        from_disk = self._state_from_disk()
        if from_disk in ("FAILED", None) and self._ran_out_of_time():
            return "TIMEOUT"
        return from_disk or "VANISHED"

    def _ended_at(self) -> float:
        """When a local job ended: the newest of its result file and logs (an empty log keeps the time it
        was created, at the start)."""
        stamps = []
        for path in (self.paths.result_pickle, self.stdout, self.stderr):
            with contextlib.suppress(OSError):
                stamps.append(path.stat().st_mtime)
        return max(stamps, default=time.time())

    def _ran_out_of_time(self) -> bool:
        if self.time_limit_min is None:
            return False
        return self._ended_at() - self.submitted_at >= self.time_limit_min * 60

    def _commands_exit_code(self) -> int | None:
        """The exit code a task recorded for its own command (the first task whose command failed)."""
        for task in range(max(1, self.num_tasks)):
            path = JobPaths(self.folder, job_id=self.job_id, task_id=task).result_pickle
            try:
                outcome = pickle_load(path) if path.exists() else None
            except Exception:  # noqa: BLE001 - half-written or unreadable: nothing recorded
                outcome = None
            found = EXIT_CODE_IN_RESULT.search(str(outcome[1])) if outcome and outcome[0] == "error" else None
            if found:
                return int(found.group(1))
        return None

    def _outcome(self) -> tuple[str, Any] | None:
        path = self.paths.result_pickle
        if not path.exists():
            return None
        try:
            return pickle_load(path)
        except Exception:  # noqa: BLE001 - half-written or unreadable: no outcome yet
            return None

    def _state_from_disk(self) -> str | None:
        outcome = self._outcome()
        if outcome is not None and outcome[0] == "success":
            return "COMPLETED"
        log = "\n".join(tail_lines(self.stderr, 60))
        for marker, state in LOG_MARKERS:
            if marker in log:
                return state
        if outcome is not None:
            return "TIMEOUT" if LOCAL_TIMEOUT_HINT in str(outcome[1]) else "FAILED"
        return None

    @property
    def elapsed(self) -> float | None:
        """Seconds the job has run (Slurm's count; for local jobs, since submission), None before it starts."""
        if self.scheduler == "local":
            end = self._ended_at() if self.done() else time.time()
            return max(0.0, end - self.submitted_at)
        return slurm_cli.parse_duration(self._details().get("elapsed", ""))

    @property
    def node(self) -> str | None:
        if self.scheduler == "local":
            return socket.gethostname()
        node = self._details().get("node_list", "")
        return None if node in ("", "None assigned", "(null)") else node

    # ------------------------------------------------------------ waiting, cancelling, results

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job ends; its final state. TimeoutError after ``timeout`` seconds; SlurmError
        when Slurm stays unreachable for CONTROLLER_DOWN_GRACE_S."""
        start, delay, unreachable_since = time.monotonic(), POLL_START_S, None
        while True:
            state = self.state
            if state in TERMINAL_STATES:
                return state
            if state == "UNKNOWN" and self.last_error is not None:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > CONTROLLER_DOWN_GRACE_S:
                    raise self.last_error
            else:
                unreachable_since = None
            pause = delay if self.scheduler == "local" else max(MIN_SLEEP_S, watcher().next_update_in())
            if timeout is not None:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    raise TimeoutError(f"job {self.job_id} ({self.name}) still {state} after {timeout:.0f} s")
                pause = min(pause, left)
            time.sleep(pause)
            delay = min(POLL_MAX_S, delay * POLL_GROWTH)

    def cancel(self) -> None:
        """Cancel the job (Slurm: scancel; local: interrupt its controller)."""
        if self.done():
            return
        if self.scheduler != "local":
            slurm_cli.scancel([self.job_id])
            watcher().poke(self.job_id)  # ask again soon: the job is ending
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / CANCEL_MARKER).write_text(f"{time.time()}\n")
        if self._local_alive():
            # interrupt the tasks, not submitit's controller: it then ends quietly (an interrupted
            # controller prints a traceback into the notebook); SIGTERM, then SIGKILL, if one ignores it
            interrupt(child_pids(self.pid) or [self.pid])

    def result(self, timeout: float | None = None) -> Any:
        """The function's return value (task 0), after waiting; ``JobFailedError`` otherwise."""
        state = self.wait(timeout)
        outcome = self._outcome()
        if outcome is None and state == "COMPLETED":
            time.sleep(POLL_START_S)  # a shared filesystem may show the file late
            outcome = self._outcome()
        if outcome is None:
            raise JobFailedError(f"job {self.job_id} ({self.name}) ended {state} without a result; "
                                 f"last lines of {self.stderr}:\n{self.tail(20, 'err')}")
        kind, value = outcome
        if kind != "success":
            raise JobFailedError(f"job {self.job_id} ({self.name}) failed ({state}); its traceback:\n{value}")
        return value

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every task's return value (a function run on several GPUs runs once per task)."""
        self.result(timeout)
        values = []
        for task in range(self.num_tasks):
            path = JobPaths(self.folder, job_id=self.job_id, task_id=task).result_pickle
            kind, value = pickle_load(path) if path.exists() else ("error", "no result file")
            if kind != "success":
                raise JobFailedError(f"job {self.job_id} task {task} failed:\n{value}")
            values.append(value)
        return values

    def __repr__(self) -> str:
        """The state comes from the watcher (one squeue for every job, at its pace), as ``state`` does."""
        return f"Job(job_id={self.job_id!r}, name={self.name!r}, site={self.site!r}, state={self.state!r})"
