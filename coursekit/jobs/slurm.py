"""Jobs on Slurm: ``SlurmBackend`` is what ``Job`` does for a job sbatch accepted (``jobs/local.py`` is the
same shape for submitit's LocalExecutor).

State: from this process's state watcher (``jobs/watcher.py``: one squeue for every job followed, at a
bounded rate); once the job has left the queue, from sacct; where there is no accounting, from what the
job left on disk. When squeue cannot answer, the state is ``UNKNOWN`` and ``job.state_reason`` says why.
At submission: the partition is chosen as the site's rules say, the project account is required where
the site charges one, and a failed sweep is cancelled with one scancel.
"""

from __future__ import annotations

import subprocess
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coursekit import slurm_cli
from coursekit.jobs.watcher import NOT_ASKED, UNREACHABLE, watcher
from coursekit.slurm_cli import TERMINAL_STATES, SlurmError

if TYPE_CHECKING:
    from coursekit.jobs.handle import Job
    from coursekit.sites import Partition, Site

MIN_SLEEP_S = 0.05  # wait() sleeps at least this long between two looks at the watcher
NO_NODE = ("", "None assigned", "(null)")


class SlurmBackend:
    """A Slurm job's behaviour (see the module docstring)."""

    scheduler = "slurm"
    cluster = "slurm"  # submitit.AutoExecutor(cluster=...)
    state_is_cheap = False  # asking the state may cost squeue or sacct
    warns_signal_delay = True

    def __init__(self, job: Job, process: subprocess.Popen | None = None) -> None:
        self.job = job
        self.info: dict[str, str] = {}  # squeue's or sacct's latest row of the job
        self.accounted = False  # sacct asked once for a job that ended (exit code, elapsed, node)
        if job.final_state is None:
            watcher().follow(job.job_id, job.submitted_at)

    # ------------------------------------------------------------ submission

    @staticmethod
    def placement(site: Site, partition: str | None, constraint: str | None,
                  account: str | None) -> tuple[str | None, Partition | None]:
        """The partition the job goes to (``Site.select_partition``) and its record; ValueError when the
        site needs a project account and none is given."""
        chosen = site.select_partition(partition, constraint, account)
        info = site.partition_info(chosen)
        if site.account_required and not (account or site.account):
            suffix = (info.account_suffix or "") if info is not None else ""
            raise ValueError(f"account: site {site.name!r} needs the project account to charge (e.g. "
                             f"account='abc{suffix}'); set it here or as account under [site_defaults] in "
                             "coursekit.toml")
        return chosen, info

    @staticmethod
    def ignored(given: dict[str, Any]) -> list[str]:
        return []

    @staticmethod
    def task_env() -> dict[str, str]:
        return {}

    @staticmethod
    def binds_own_gpus(launcher: str, binding: str | None) -> bool:
        """srun binds the GPUs of each task itself."""
        return False

    @staticmethod
    def process_ids(job_id: str) -> dict[str, Any]:
        return {}

    @staticmethod
    def cancel_all(jobs: Sequence[Job]) -> None:
        slurm_cli.scancel(sorted({job.job_id.split("_")[0] for job in jobs}))

    @staticmethod
    def release(job_ids: Sequence[str]) -> None:
        """Let the jobs start now: they were submitted to begin later (``--begin``, ``jobs/plan.py``), because
        submitit makes a job's folder only after sbatch answered, and an idle node starts a job within
        milliseconds; slurmstepd then cannot open the job's log in a folder not yet made, and the job fails at
        0 s (seen in CI on a busy machine). A later begin, unlike ``--hold``, keeps sbatch's refusal of a job
        the cluster can never run. One ``scontrol update`` for every array of the call; should it fail, the
        jobs start at their begin time anyway, and a warning says so."""
        arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
        try:
            slurm_cli.start_now(arrays)
        except SlurmError as error:
            warnings.warn(f"{error.message}: job(s) {', '.join(arrays)} start within {slurm_cli.BEGIN_AFTER_S} s, at "
                          "the begin time they were submitted with", stacklevel=3)

    @staticmethod
    def ids_from_folder(folder: Path) -> dict[str, Any]:
        return {}

    # ------------------------------------------------------------ following

    def state(self) -> str:
        job = self.job
        seen = watcher().observe(job.job_id, job.submitted_at)
        job.last_error, job.state_reason = seen.error, seen.reason
        if seen.row is not None:
            self.info.update(seen.row)
            if seen.row["state"] not in TERMINAL_STATES and job.paths.result_pickle.exists():
                watcher().hurry(job.job_id)  # task 0 has written its result: the job is ending
            return seen.row["state"]
        if seen.source == NOT_ASKED:
            return "UNKNOWN"
        if seen.source == UNREACHABLE and seen.error is not None and seen.error.command[:1] == ["squeue"]:
            return "UNKNOWN"  # the controller did not answer: accounting or the disk may be stale
        from_disk = job.state_from_disk()
        if from_disk is not None:
            job.state_reason = "read from the job's files (Slurm no longer knows the job)"
            return from_disk
        return "UNKNOWN" if seen.source == UNREACHABLE else "VANISHED"

    def details(self) -> dict[str, str]:
        """squeue's or sacct's row of the job; sacct is asked once after the job ended (exit code)."""
        job = self.job
        job.state  # noqa: B018 - refreshes the row while the job is known to Slurm
        if job.final_state is not None and not self.accounted:
            row = None
            if slurm_cli.accounting_enabled():
                try:
                    row = slurm_cli.row_for(slurm_cli.sacct([job.job_id]), job.job_id)
                except SlurmError:
                    pass
            if row is not None and row["state"] in TERMINAL_STATES:
                self.info.update(row)
            # accounting lags behind the controller by about a second: ask again next time until it has
            # the job's end (or cannot tell at all)
            self.accounted = row is None or row["state"] in TERMINAL_STATES
        return self.info

    def exit_code(self) -> int | None:
        """Slurm's ExitCode of the ended job, when accounting or squeue told it."""
        code = self.details().get("exit_code", "").split(":")[0]
        return int(code) if code.isdigit() else None

    def elapsed(self) -> float | None:
        """Slurm's count of the seconds the job has run; None before it starts."""
        return slurm_cli.parse_duration(self.details().get("elapsed", ""))

    def node(self) -> str | None:
        node = self.details().get("node_list", "")
        return None if node in NO_NODE else node

    def pause(self, delay: float) -> float:
        """How long ``wait`` sleeps before asking again: until the watcher's next squeue."""
        return max(MIN_SLEEP_S, watcher().next_update_in())

    def cancel(self) -> None:
        slurm_cli.scancel([self.job.job_id])
        watcher().poke(self.job.job_id)  # ask again soon: the job is ending
