"""``Job``: one submitted job, followed from the notebook (state, logs, metrics, result, cancel), and
``list_jobs``/``get_job``, which build the handles back from the registry (after a kernel restart).

What depends on the scheduler is a backend chosen once, when the handle is made (submitit's shape):
``jobs/slurm.py`` (squeue through this process's watcher, then sacct, then the disk; ``UNKNOWN`` with
``state_reason`` when squeue cannot answer) or ``jobs/local.py`` (submitit's LocalExecutor: the
controller's pid; its process is reaped as soon as it ends). A job found nowhere is ``VANISHED``
(terminal), so ``wait()`` never polls forever. What the job left on disk (submitit's result pickles,
Slurm's messages in the log) is read here, for both.

Logs: one stdout/stderr pair per task (rank): ``tail(n, stream, rank=...)`` shows the job's own lines
(submitit's and srun's notes left out), ``log_paths()`` lists them all.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from pathlib import Path
from typing import Any

from submitit.core.utils import JobPaths, pickle_load

from coursekit.course import CoursePaths, course_paths
from coursekit.jobs import registry
from coursekit.jobs.local import LocalBackend
from coursekit.jobs.logs import job_output
from coursekit.jobs.slurm import SlurmBackend
from coursekit.jobs.watcher import UNSETTLED_STATES
from coursekit.metrics import read_metrics
from coursekit.sites import site_paths
from coursekit.slurm_cli import TERMINAL_STATES, SlurmError

Backend = LocalBackend | SlurmBackend
BACKENDS: dict[str, type[Backend]] = {LocalBackend.scheduler: LocalBackend, SlurmBackend.scheduler: SlurmBackend}
POLL_START_S = 0.5  # local jobs: a process poll, cheap; Slurm jobs wait for the watcher's next call
POLL_MAX_S = 5.0
POLL_GROWTH = 1.5
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
                 lab: str | None = None, **_ignored: Any) -> None:
        self.job_id, self.name, self.folder = str(job_id), name, Path(folder)
        self.site, self.scheduler, self.command, self.kind = site, scheduler, command, kind
        self.n_gpu, self.num_tasks = n_gpu, num_tasks
        self.submitted_at = submitted_at if submitted_at is not None else time.time()
        self.time_limit_min, self.pid, self.pid_start = time_limit_min, pid, pid_start
        self.lab = lab  # the lab (its two-digit number) the notebook that submitted it was at, when known
        self._final = final_state if final_state not in UNCACHED_TERMINAL else None
        self.last_error: SlurmError | None = None
        self.state_reason = ""  # why the state is what it is (Slurm's pending reason, or why UNKNOWN)
        # any scheduler but "local" is Slurm's
        self.backend: Backend = BACKENDS.get(scheduler, SlurmBackend)(self, getattr(submitit_job, "_process", None))

    # ------------------------------------------------------------ construction

    def record(self) -> dict[str, Any]:
        return {"event": "submitted", "job_id": self.job_id, "name": self.name, "folder": str(self.folder),
                "site": self.site, "scheduler": self.scheduler, "command": self.command, "kind": self.kind,
                "n_gpu": self.n_gpu, "num_tasks": self.num_tasks, "submitted_at": self.submitted_at,
                "time_limit_min": self.time_limit_min, "pid": self.pid, "pid_start": self.pid_start,
                **({"lab": self.lab} if self.lab else {})}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Job:
        return cls(**{k: v for k, v in record.items() if k != "event"})

    @classmethod
    def from_folder(cls, folder: Path) -> Job:
        """A handle rebuilt from a job folder alone (``<jobs root>/<name>/<job_id>``): a Slurm job left its
        sbatch script (or has an array task's id), a local job's id is its controller's pid."""
        backend = LocalBackend if LocalBackend.left(folder) else SlurmBackend
        return cls(folder.name, folder.parent.name, folder, site=backend.scheduler, scheduler=backend.scheduler,
                   submitted_at=folder.stat().st_mtime, **backend.ids_from_folder(folder))

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
        state = self._final or (self.state if self.backend.state_is_cheap or path.exists() else None)
        ending = ENDED_BY_SLURM.get(state or "")
        last = lines[-1].lower() if lines else ""
        if ending is not None and n > 0 and ending not in last and (state or "").lower() not in last:
            lines = [*lines, f"coursekit: job {self.job_id} {ending} ({state})"][-n:]
        return "\n".join(lines)

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.run_dir)

    # ------------------------------------------------------------ state

    @property
    def final_state(self) -> str | None:
        """The terminal state already known (asks nothing); None while the job may still change."""
        return self._final

    @property
    def state(self) -> str:
        """Slurm's state name (see slurm_cli.TERMINAL_STATES), ``VANISHED`` or ``UNKNOWN``."""
        if self._final is not None:
            return self._final
        state = self.backend.state()
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

    @property
    def exit_code(self) -> int | None:
        """The command's exit code once the job has ended (what a failing task recorded, else Slurm's
        ExitCode, else 0 for a task that succeeded); None while it runs or when nothing tells."""
        if not self.done():
            return None
        recorded = self._commands_exit_code()
        if recorded is not None:  # srun reports 15 for a step whose peer tasks it stopped after a failure
            return recorded
        code = self.backend.exit_code()
        if code is not None:
            return code
        outcome = self.outcome()
        return 0 if outcome is not None and outcome[0] == "success" else None

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

    def outcome(self) -> tuple[str, Any] | None:
        """Task 0's ``("success", value)`` or ``("error", traceback)`` from submitit's result file; None
        while there is none (or it is half-written)."""
        path = self.paths.result_pickle
        if not path.exists():
            return None
        try:
            return pickle_load(path)
        except Exception:  # noqa: BLE001 - half-written or unreadable: no outcome yet
            return None

    def state_from_disk(self) -> str | None:
        """The final state the job's files tell (result file, Slurm's words in the log); None if they don't."""
        outcome = self.outcome()
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
        return self.backend.elapsed()

    @property
    def node(self) -> str | None:
        return self.backend.node()

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
            pause = self.backend.pause(delay)
            if timeout is not None:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    raise TimeoutError(f"job {self.job_id} ({self.name}) still {state} after {timeout:.0f} s")
                pause = min(pause, left)
            time.sleep(pause)
            delay = min(POLL_MAX_S, delay * POLL_GROWTH)

    def cancel(self) -> None:
        """Cancel the job (Slurm: scancel; local: interrupt its tasks)."""
        if not self.done():
            self.backend.cancel()

    def result(self, timeout: float | None = None) -> Any:
        """The function's return value (task 0), after waiting; ``JobFailedError`` otherwise."""
        state = self.wait(timeout)
        outcome = self.outcome()
        if outcome is None and state == "COMPLETED":
            time.sleep(POLL_START_S)  # a shared filesystem may show the file late
            outcome = self.outcome()
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


# ---------------------------------------------------------------- handles back from the registry


def list_jobs(name: str | None = None) -> list[Job]:
    """Handles of this course's jobs (all, or those called ``name``), oldest first."""
    return [Job.from_record(r) for r in registry.merged_records() if name is None or r.get("name") == name]


def _job_folder_roots() -> list[CoursePaths]:
    """Where submission put job folders: under the course's site's ``log_folder``, else the course's ``jobs/``."""
    roots = [site_paths(), course_paths()]
    return [paths for i, paths in enumerate(roots) if paths.jobs_root not in [p.jobs_root for p in roots[:i]]]


def get_job(job_id: str | int) -> Job:
    """The handle of job ``job_id`` (the newest with that id); found in its folder when not in the registry
    (under the site's log folder, where it was submitted)."""
    wanted = str(job_id)
    matches = [r for r in registry.merged_records() if str(r["job_id"]) == wanted]
    if matches:
        return Job.from_record(matches[-1])
    roots = _job_folder_roots()
    for paths in roots:
        for folder in paths.find(wanted):
            if (folder / f"{wanted}_submitted.pkl").exists():
                return Job.from_folder(folder)
    where = " nor under ".join(str(paths.jobs_root) for paths in roots)
    raise KeyError(f"job {wanted!r} is not in {registry.registry_path()} nor under {where}: "
                   "list_jobs() shows the jobs of this course")
