"""What runs inside a job: the callables coursekit hands to submitit (pickled, run on the node).

``CommandTask`` runs ``python -u <command>`` (or torchrun, or inside a Singularity image) from an
argument list, never through a shell; ``FunctionTask`` runs a notebook-defined function. Both first
install the time-limit signal's handler (unless the job is to be requeued: submitit's handler then
checkpoints it), then set the job's environment (``COURSEKIT_RUN_ROOT`` and the user's ``env``).

A command that fails ends its task with the command's own exit code (so srun and Slurm's ExitCode
report it) and one plain last line in the task's stderr (``coursekit: ... exited with code 3``) instead
of a Python traceback of the task around it; a cancelled command says "cancelled".
"""

from __future__ import annotations

import ctypes
import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import submitit
from submitit.core.utils import cloudpickle_dump, temporary_save_path
from submitit.local.local import LOCAL_REQUEUE_RETURN_CODE

from coursekit import launch

TORCHRUN_PORT_OFFSET = 1  # torchrun's rendezvous port = the rank-0 port launch.py derives + this
SINGULARITY = "singularity"
PR_SET_PDEATHSIG = 1  # prctl option: signal sent to the child when its parent dies
STOP_GRACE_S = 5.0
CANCEL_MARKER = ".coursekit_cancelled"  # the job handle writes it in the job folder before a local cancel
SIGNAL_EXIT_BASE = 128  # a command killed by signal N ends the task with 128 + N, as a shell reports it
FAILED_EXIT_CODE = 1  # what a task ends with when the command's own code cannot be passed on


SUBMITTER_GPUS_ENV = "COURSEKIT_SUBMITTER_GPUS"  # the submitting process's CUDA_VISIBLE_DEVICES (local site)


def submitter_gpu_env(is_local: bool) -> dict[str, str]:
    """What a local job needs to find the GPUs its submitter was given: ``{SUBMITTER_GPUS_ENV: ...}`` where the
    submitting process has a ``CUDA_VISIBLE_DEVICES`` list (a JupyterHub server given GPUs 2,3), else ``{}``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return {SUBMITTER_GPUS_ENV: visible} if is_local and visible and visible != "-1" else {}


def job_gpus(env: Mapping[str, str]) -> str | None:
    """The job's ``CUDA_VISIBLE_DEVICES`` among its submitter's GPUs. submitit's local executor numbers a job's
    GPUs 0 ... n-1 whatever the submitting process was given: with the submitter on GPUs "2,3", a 1-GPU job
    got "0" — someone else's GPU (on a 4xH100 dry run, every notebook's jobs landed on GPU 0). Positions are
    mapped to the submitter's entries (numbers or UUIDs); None when there is nothing to map."""
    submitter, own = env.get(SUBMITTER_GPUS_ENV), env.get("CUDA_VISIBLE_DEVICES")
    if not submitter or own is None:
        return None
    entries = [e.strip() for e in submitter.split(",") if e.strip()]
    try:
        positions = [int(p) for p in own.split(",") if p.strip()]
    except ValueError:  # not submitit's numbering: leave it
        return None
    if any(p < 0 or p >= len(entries) for p in positions):
        return None
    return ",".join(entries[p] for p in positions)


def _gpu_slice_for_task(visible: str, local_rank: int, gpus_per_task: int) -> str:
    """Task ``local_rank``'s own GPUs out of the node's ``CUDA_VISIBLE_DEVICES``."""
    devices = [d for d in visible.split(",") if d.strip()]
    own = devices[local_rank * gpus_per_task:(local_rank + 1) * gpus_per_task]
    return ",".join(own)


def torch_env_variables(env: Mapping[str, str]) -> dict[str, str]:
    """PyTorch's ``env://`` variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT) of
    this task, from Slurm's or submitit's own: a plain script's ``init_process_group()`` then works under
    srun as under torchrun (coursekit.launch knows the ranks)."""
    info = launch.launch_info(env)
    return {"RANK": str(info.rank), "LOCAL_RANK": str(info.local_rank), "WORLD_SIZE": str(info.world_size),
            "LOCAL_WORLD_SIZE": str(info.local_world_size), "MASTER_ADDR": info.master_addr,
            "MASTER_PORT": str(info.master_port)}


def _rendezvous_endpoint() -> str:
    """``host:port`` of torchrun's c10d rendezvous: the job's first node (coursekit.launch knows it)."""
    info = launch.launch_info()
    return f"{info.master_addr}:{info.master_port + TORCHRUN_PORT_OFFSET}"


@dataclass
class CommandTask:
    """Run ``python -u <words>`` in the job; the job fails when the command does."""

    words: list[str]
    env: dict[str, str] = field(default_factory=dict)
    launcher: str = "srun"  # "srun": one process per task; "torchrun": one per GPU, spawned by torchrun
    nnodes: int = 1
    nproc_per_node: int = 1
    singularity: str | None = None
    bind_local_gpus: int = 0  # local executor: give each task this many of the node's GPUs (0: all)
    requeue: bool = False  # on timeout/preemption, requeue and run the command again (it must resume)

    def argv(self, job_id: str = "0") -> list[str]:
        """``python -u <words>``; with torchrun, torchrun starts that same command once per GPU."""
        python = [sys.executable if self.singularity is None else "python", "-u"]
        command = [*python, *self.words]
        if self.launcher == "torchrun":
            rendezvous = ["--rdzv_backend", "c10d", "--rdzv_endpoint", _rendezvous_endpoint(),
                          "--rdzv_id", job_id] if self.nnodes > 1 else ["--standalone"]
            command = [*python, "-m", "torch.distributed.run", "--nnodes", str(self.nnodes),
                       "--nproc_per_node", str(self.nproc_per_node), *rendezvous, "--no-python", *command]
        prefix = [SINGULARITY, "exec", "--nv", self.singularity] if self.singularity else []
        return [*prefix, *command]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        mapped = job_gpus(env)
        if mapped is not None:
            env["CUDA_VISIBLE_DEVICES"] = mapped
        if self.bind_local_gpus and os.environ.get("SUBMITIT_EXECUTOR") == "local":
            local_rank = int(os.environ.get("SUBMITIT_LOCAL_LOCALID", "0"))
            env["CUDA_VISIBLE_DEVICES"] = _gpu_slice_for_task(
                env.get("CUDA_VISIBLE_DEVICES", ""), local_rank, self.bind_local_gpus)
        if self.launcher == "srun":  # torchrun sets these for the processes it starts
            env.update({k: v for k, v in torch_env_variables(env).items() if k not in env})
        return env

    def __call__(self) -> int:
        if not self.requeue:  # first: the signal may be due as soon as the job starts
            install_time_limit_note()
        interruptible()
        job_env = submitit.JobEnvironment()
        command = self.argv(str(job_env.job_id))
        child = subprocess.Popen(command, env=self._environment(),
                                 preexec_fn=functools.partial(_prepare_child, time_limit_signal()))
        try:
            returncode = child.wait()
        except KeyboardInterrupt:  # the local executor's cancel or time limit
            _stop(child)
            cancelled = (job_env.paths.folder / CANCEL_MARKER).exists()
            _end_task(job_env, "the job was cancelled" if cancelled
                      else "the job reached its time limit, or another task of it failed",
                      SIGNAL_EXIT_BASE + signal.SIGINT)
        except BaseException:  # submitit's requeue exits here; the command must not outlive the task
            _stop(child)
            raise
        if returncode == 0:
            return returncode
        if returncode < 0:
            name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
            message, exit_code = f"the command was stopped by {name}: {shlex.join(self.words)}", SIGNAL_EXIT_BASE - returncode
        else:
            message, exit_code = f"the command exited with code {returncode}: {shlex.join(self.words)}", returncode
        # the result first: the local executor waits for every task, so the others are stopped next (they must not
        # wait in vain), and a stopped sibling's end makes submitit's controller interrupt this task too
        _write_error(job_env, message)
        launch.stop_local_peer_tasks()
        _end_task(job_env, message, exit_code)
        return returncode

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Requeue the same command (it resumes from its own checkpoint), when ``requeue`` was asked."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs) if self.requeue else None


def time_limit_signal() -> signal.Signals:
    """The signal submitit asks Slurm to send before the time limit (SIGUSR2 unless configured)."""
    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))


def install_time_limit_note() -> None:
    """Note the time-limit signal in stderr instead of dying of it (or of submitit's requeue handler):
    a job that cannot resume runs on until the limit itself ends it (state TIMEOUT)."""
    signal.signal(time_limit_signal(), _note_time_limit_signal)


def interruptible() -> None:
    """SIGINT raises KeyboardInterrupt in the task (the local site's cancel and time limit send it), even where
    the task was started with SIGINT ignored — as every process is that a non-interactive shell starts in the
    background (``nohup jupyter lab &``), and Python then leaves it ignored."""
    if threading.current_thread() is threading.main_thread():  # signal handlers: main thread only
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _end_task(job_env: submitit.JobEnvironment, message: str, exit_code: int) -> None:
    """End the task with ``exit_code`` after one plain line in stderr and the task's result file (an
    error carrying ``message``), instead of a traceback: the job's log ends with what went wrong."""
    print(f"coursekit: {message}", file=sys.stderr, flush=True)
    _write_error(job_env, message)
    if os.environ.get("SUBMITIT_EXECUTOR") == "local" and exit_code == LOCAL_REQUEUE_RETURN_CODE:
        exit_code = FAILED_EXIT_CODE  # submitit's local controller would take this code for "requeue me"
    sys.stdout.flush()
    raise SystemExit(exit_code if 0 < exit_code < 256 else FAILED_EXIT_CODE)


def _write_error(job_env: submitit.JobEnvironment, message: str) -> None:
    """The task's result file: an error carrying ``message`` (written atomically: whole or not at all)."""
    try:
        with temporary_save_path(job_env.paths.result_pickle) as scratch:
            cloudpickle_dump(("error", message), scratch)
    except OSError as error:
        print(f"coursekit: could not write {job_env.paths.result_pickle}: {error}", file=sys.stderr, flush=True)


def _prepare_child(preemption_signal: int) -> None:
    """In the child, before exec: ignore the preemption signal (a program that wants it installs its
    own handler, as the engine does) and die with the task that started it (Linux PR_SET_PDEATHSIG)."""
    signal.signal(preemption_signal, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _note_time_limit_signal(signum: int, frame: object) -> None:
    print(f"coursekit: received signal {signum}: the job's time limit is near", file=sys.stderr, flush=True)


@dataclass
class FunctionTask:
    """Run ``fn(*args, **kwargs)`` in the job with the job's environment; checkpointable when ``fn`` is."""

    fn: Callable[..., Any]
    env: Mapping[str, str] = field(default_factory=dict)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self.fn, "checkpoint", None) is None:  # first: the signal may be due at once
            install_time_limit_note()
        interruptible()
        os.environ.update(self.env)
        mapped = job_gpus(os.environ)
        if mapped is not None:  # before torch sees a GPU
            os.environ["CUDA_VISIBLE_DEVICES"] = mapped
        with launch.stop_peers_on_failure():
            return self.fn(*args, **kwargs)

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        inner = getattr(self.fn, "checkpoint", None)
        if inner is None:
            return None
        delayed = inner(*args, **kwargs)
        if delayed is None:
            return None
        return submitit.helpers.DelayedSubmission(FunctionTask(delayed.function, self.env), *delayed.args,
                                                  **delayed.kwargs)

