"""What runs inside a job: the callables coursekit hands to submitit (pickled, run on the node).

``CommandTask`` runs ``python -u <command>`` (or torchrun, or inside a Singularity image) from an
argument list, never through a shell; ``FunctionTask`` runs a notebook-defined function. Both set the
job's environment first (``COURSEKIT_RUN_ROOT`` and the user's ``env``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import submitit

TORCHRUN_PORT_OFFSET = 1  # torchrun's rendezvous port = the rank-0 port distributed.py derives + this
SINGULARITY = "singularity"
PR_SET_PDEATHSIG = 1  # prctl option: signal sent to the child when its parent dies
STOP_GRACE_S = 5.0


class CommandFailedError(RuntimeError):
    """The job's command exited with a non-zero code."""


def _gpu_slice_for_task(visible: str, local_rank: int, gpus_per_task: int) -> str:
    """Task ``local_rank``'s own GPUs out of the node's ``CUDA_VISIBLE_DEVICES``."""
    devices = [d for d in visible.split(",") if d.strip()]
    own = devices[local_rank * gpus_per_task:(local_rank + 1) * gpus_per_task]
    return ",".join(own)


def _rendezvous_endpoint() -> str:
    """``host:port`` of torchrun's c10d rendezvous: the job's first node (coursekit.distributed knows it)."""
    from coursekit import distributed

    info = distributed.launch_info()
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
        if self.bind_local_gpus and os.environ.get("SUBMITIT_EXECUTOR") == "local":
            local_rank = int(os.environ.get("SUBMITIT_LOCAL_LOCALID", "0"))
            env["CUDA_VISIBLE_DEVICES"] = _gpu_slice_for_task(
                os.environ.get("CUDA_VISIBLE_DEVICES", ""), local_rank, self.bind_local_gpus)
        return env

    def __call__(self) -> int:
        job_env = submitit.JobEnvironment()
        if not self.requeue:  # not resumable: let the time limit end the job (state TIMEOUT), not USR2
            signal.signal(job_env._usr_sig(), _note_time_limit_signal)
        command = self.argv(str(job_env.job_id))
        child = subprocess.Popen(command, env=self._environment(),
                                 preexec_fn=functools.partial(_prepare_child, job_env._usr_sig()))
        try:
            returncode = child.wait()
        except KeyboardInterrupt:  # the local executor's cancel or time limit
            _stop(child)
            raise CommandFailedError(f"command {command} was interrupted (cancelled or out of time)") from None
        except BaseException:  # submitit's requeue exits here; the command must not outlive the task
            _stop(child)
            raise
        if returncode != 0:
            raise CommandFailedError(f"command {command} exited with code {returncode}")
        return returncode

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Requeue the same command (it resumes from its own checkpoint), when ``requeue`` was asked."""
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs) if self.requeue else None


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
        os.environ.update(self.env)
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

