"""Run a participant's script under a checker's recording runner: one server per runner, a child per run.

The checkers of labs 04 and 05 (``amp_check``, ``loader_check``) each have a runner script (``amp_runner.py``,
``loader_runner.py``) that imports torch once, then runs the participant's script with recorders around it.
Importing torch costs seconds, so on a CPU a :class:`RunnerServer` starts the runner once per Python session
and asks it to fork a child per run; on a GPU each run is a runner process of its own (a child forked after
CUDA started could not use it). This module holds that machinery; each checker keeps its own runner (what it
records) and reads its own output files.

The runner protocol (the runners import nothing from coursekit: they run as plain scripts):

- ``python RUNNER``: answers ``{"cuda": <bool>}`` at start (asked of NVML: CUDA does not start), then reads
  one JSON request per line on stdin and answers ``{"pid": <child>}`` per line; each child leads its own
  session, and the system reaps it;
- ``python RUNNER --run REQUEST``: one run in this process;
- a request is ``{"script", "args", "workdir"}``; the run writes :data:`STDOUT`, :data:`STDERR`,
  :data:`RECORD` and, last, :data:`EXIT` (its exit code) in the work folder.

Standard library only, like :mod:`script_check`: the notebook's kernel need not import torch to run a check.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coursekit.labs.kit import script_check
from coursekit.labs.kit.script_check import STOP_GRACE_S, read_text, tail  # a stopped run: SIGKILL after

STDOUT, STDERR, RECORD, EXIT = "stdout.txt", "stderr.txt", "record.json", "exit.txt"  # a run's files
SERVER_START_S = 120.0  # importing torch on a busy machine
POLL_S = 0.05


@dataclass
class RunnerRun:
    """What a run left: its exit code, output and record (the checkers add what the script wrote)."""

    returncode: int | None  # None: stopped, or ended without the runner's exit code
    timed_out: bool
    stdout: str
    stderr: str
    record: dict[str, Any] | None
    seconds: float


def runner_env() -> dict[str, str]:
    """The runner's environment: no launcher variables (a checker runs inside a Slurm job too), one thread per
    process, and the GPU as this process sees it (``launcher_free_env`` hides it; the GPU runs need it).
    ``PYTORCH_NVML_BASED_CUDA_CHECK``: ``torch.cuda.is_available()`` asks NVML, and does not start CUDA in the
    server (its children could not use CUDA then)."""
    env = script_check.launcher_free_env() | {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pid: int, is_alive: Callable[[], bool] | None = None) -> None:
    """Stop a process group this module started (a run's child leads its own, with whatever the script started,
    DataLoader workers for one), leader first: SIGTERM, then SIGKILL."""
    is_alive = is_alive or (lambda: alive(pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + STOP_GRACE_S
        while is_alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if not is_alive():
            break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # what the script left behind, if anything


class RunnerServer:
    """`runner`, started once per Python session: it has imported torch, and forks a child per run."""

    def __init__(self, runner: Path, log_prefix: str) -> None:
        self.runner = runner
        self.log_prefix = log_prefix  # of the temporary file that holds the server's error output
        self.process: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.log: Path | None = None  # the server's own error output (a broken torch install shows there)
        self.cuda = False  # whether the server sees a GPU (it asks NVML: CUDA does not start)
        atexit.register(self.stop)

    def _start(self) -> subprocess.Popen:
        fd, name = tempfile.mkstemp(prefix=self.log_prefix, suffix=".err")
        self.log = Path(name)
        with os.fdopen(fd, "wb") as err:
            process = subprocess.Popen([sys.executable, "-u", str(self.runner)], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=err, env=runner_env(), start_new_session=True)
        self.cuda = bool(json.loads(self._answer(process))["cuda"])
        return process

    def _answer(self, process: subprocess.Popen) -> bytes:
        """The server's next line; a server that gives none in time is stopped, its error output shown."""
        ready, _, _ = select.select([process.stdout], [], [], SERVER_START_S)
        line = process.stdout.readline() if ready else b""
        if not line:
            log = read_text(self.log) if self.log else ""
            self.process = process
            self.stop()
            raise RuntimeError(f"the checker's runner did not start: {tail(log)}")
        return line

    def started(self) -> subprocess.Popen:
        """The server, started if it is not running."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        return self.process

    def sees_gpu(self) -> bool:
        """Whether a GPU is visible, asked of the server: the notebook's kernel need not import torch."""
        with self.lock:
            self.started()
            return self.cuda

    def fork(self, request: dict[str, Any]) -> int:
        """Start one run; the child's process id (it leads its own process group)."""
        with self.lock:
            process = self.started()
            process.stdin.write((json.dumps(request) + "\n").encode())
            process.stdin.flush()
            return int(json.loads(self._answer(process))["pid"])

    def stop(self) -> None:
        """End the server (closing its stdin ends its loop) and remove its error log."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                kill_group(self.process.pid)
                self.process.wait()
        self.process = None
        if self.log is not None:
            self.log.unlink(missing_ok=True)
            self.log = None


def run_script(server: RunnerServer, script: Path, args: list[str], workdir: Path, timeout_s: float,
               fork: bool = True) -> RunnerRun:
    """Run `script` with `args` in `workdir` under `server`'s runner: forked from the server (`fork`), or in a
    process of its own (on a GPU: a child forked after CUDA started could not use it). Stopped at `timeout_s`;
    whatever the script started is stopped with it."""
    workdir.mkdir(parents=True, exist_ok=True)
    request = {"script": str(script), "args": args, "workdir": str(workdir)}
    process = None
    if fork:
        pid = server.fork(request)
    else:
        process = subprocess.Popen([sys.executable, "-u", str(server.runner), "--run", json.dumps(request)],
                                   cwd=workdir, env=runner_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        pid = process.pid

    def running() -> bool:  # the server's children are reaped by the system; our own child, by poll()
        return process.poll() is None if process is not None else alive(pid)

    start = time.monotonic()  # the server's start (importing torch, once per session) is not the script's time
    deadline, timed_out = start + timeout_s, False
    while running() and not (workdir / EXIT).is_file():
        if time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(POLL_S)
    if not timed_out:  # the exit code is written just before the child ends
        end = time.monotonic() + STOP_GRACE_S
        while running() and time.monotonic() < end:
            time.sleep(POLL_S)
    kill_group(pid, running)  # and whatever the script started
    if process is not None:
        process.wait()
    seconds = time.monotonic() - start
    exit_text = read_text(workdir / EXIT).strip()
    record_text = read_text(workdir / RECORD)
    return RunnerRun(int(exit_text) if exit_text and not timed_out else None, timed_out, read_text(workdir / STDOUT),
                     read_text(workdir / STDERR), json.loads(record_text) if record_text else None, seconds)
