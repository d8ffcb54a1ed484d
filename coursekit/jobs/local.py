"""Jobs of submitit's LocalExecutor: processes on this machine (``site="local"``).

``LocalBackend`` is what ``Job`` does for such a job (as submitit's ``local/`` package is for its own):
the state comes from its controller's pid (with the start time of that process: a pid reused later is
not the job), then from what the job left on disk; ``cancel`` interrupts its tasks. At submission, the
options only a Slurm script would carry are ignored (with a warning) and the job's id is its
controller's pid. ``jobs/slurm.py`` is the same shape for Slurm.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coursekit.jobs.local_process import child_pids, interrupt, process_start_time, reap_when_done
from coursekit.jobs.tasks import CANCEL_MARKER, submitter_gpu_env

if TYPE_CHECKING:
    from coursekit.jobs.handle import Job
    from coursekit.sites import Partition, Site

IGNORED = ("module", "script_addon", "slurm_addon", "qos", "partition", "account", "constraint",
           "email", "exclusive")  # options a local job cannot honour


class LocalBackend:
    """A local job's behaviour (see the module docstring)."""

    scheduler = "local"
    cluster = "local"  # submitit.AutoExecutor(cluster=...)
    state_is_cheap = True  # asking the state reads /proc and the job's folder, never a Slurm command
    warns_signal_delay = False

    def __init__(self, job: Job, process: subprocess.Popen | None = None) -> None:
        self.job, self.process = job, process
        if process is not None:
            reap_when_done(process)  # no <defunct> process left under the kernel

    # ------------------------------------------------------------ submission

    @staticmethod
    def placement(site: Site, partition: str | None, constraint: str | None,
                  account: str | None) -> tuple[str | None, Partition | None]:
        """The partition as given (ignored, with a warning), no partition record."""
        return partition, None

    @staticmethod
    def ignored(given: dict[str, Any]) -> list[str]:
        """The options given that a local job ignores."""
        return [key for key in IGNORED if given.get(key) not in (None, False)]

    @staticmethod
    def task_env() -> dict[str, str]:
        """The kernel's own GPUs, for tasks that share them out (``tasks.submitter_gpu_env``)."""
        return submitter_gpu_env(True)

    @staticmethod
    def binds_own_gpus(launcher: str, binding: str | None) -> bool:
        """Whether each task picks its own GPUs (no srun to bind them)."""
        return launcher == "srun" and binding == "task"

    @staticmethod
    def process_ids(job_id: str) -> dict[str, Any]:
        """The controller's pid and its start time, recorded to follow the job after a kernel restart."""
        pid = int(job_id)
        return {"pid": pid, "pid_start": process_start_time(pid)}

    @staticmethod
    def cancel_all(jobs: Sequence[Job]) -> None:
        for job in jobs:
            job.cancel()

    @staticmethod
    def release(job_ids: Sequence[str]) -> None:
        """Nothing to do: a local job starts after its folder is made."""

    # ------------------------------------------------------------ a job found by its folder alone

    @staticmethod
    def left(folder: Path) -> bool:
        """Whether a local job left ``folder`` (no sbatch script, not an array task)."""
        job_id = folder.name
        return not (folder / f"{job_id.split('_')[0]}_submission.sh").exists() and "_" not in job_id

    @staticmethod
    def ids_from_folder(folder: Path) -> dict[str, Any]:
        """The controller's pid (its start time is not known: the job is not taken for alive)."""
        return {"pid": int(folder.name) if folder.name.isdigit() else None}

    # ------------------------------------------------------------ following

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        job = self.job
        return job.pid is not None and job.pid_start is not None and process_start_time(job.pid) == job.pid_start

    def state(self) -> str:
        if self.alive():
            return "RUNNING"
        if (self.job.folder / CANCEL_MARKER).exists():
            return "CANCELLED"
        from_disk = self.job.state_from_disk()
        if from_disk in ("FAILED", None) and self.ran_out_of_time():
            return "TIMEOUT"
        return from_disk or "VANISHED"

    def ended_at(self) -> float:
        """When the job ended: the newest of its result file and logs (an empty log keeps the time it was
        created, at the start)."""
        stamps = []
        for path in (self.job.paths.result_pickle, self.job.stdout, self.job.stderr):
            with contextlib.suppress(OSError):
                stamps.append(path.stat().st_mtime)
        return max(stamps, default=time.time())

    def ran_out_of_time(self) -> bool:
        if self.job.time_limit_min is None:
            return False
        return self.ended_at() - self.job.submitted_at >= self.job.time_limit_min * 60

    def exit_code(self) -> int | None:
        """No scheduler keeps one: the job's result file tells (``Job.exit_code``)."""
        return None

    def elapsed(self) -> float:
        """Seconds since submission (until the job ended)."""
        end = self.ended_at() if self.job.done() else time.time()
        return max(0.0, end - self.job.submitted_at)

    def node(self) -> str:
        return socket.gethostname()

    def pause(self, delay: float) -> float:
        """How long ``wait`` sleeps before asking again: a process poll is cheap, ``delay`` grows."""
        return delay

    def cancel(self) -> None:
        """Interrupt the tasks, not submitit's controller: it then ends quietly (an interrupted controller
        prints a traceback into the notebook); SIGTERM, then SIGKILL, if one ignores it."""
        job = self.job
        job.folder.mkdir(parents=True, exist_ok=True)
        (job.folder / CANCEL_MARKER).write_text(f"{time.time()}\n")
        if self.alive():
            interrupt(child_pids(job.pid) or [job.pid])
