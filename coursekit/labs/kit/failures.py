"""Failed jobs, said where a lab waits for them: the state, the last lines of stderr, and what to do.

Every lab calls ``report_failures`` right after it waits for its jobs (``labs.run_sweep``, ``sweep.results``,
``labs.collect``): a participant reads *there* that 4 jobs FAILED and why, instead of a ``KeyError`` ten
cells further down. ``completed(table)`` keeps the rows whose run completed, so that plots and claims
below work on what exists; ``result_or_none(job)`` does the same for ``submit_function`` jobs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coursekit.labs.kit.results import ResultsTable

COMPLETED = "COMPLETED"
TAIL_LINES = 8
# Slurm's OUT_OF_MEMORY (its cgroup's oom-kill) is about the node's memory: Slurm does not watch a GPU's
HOST_MEMORY_ADVICE = ("the job went over its host memory (Slurm's --mem, not the GPU's): ask for more, e.g. "
                      "slurm_addon={'mem': '64G'} (or more cpus_per_task where memory comes with the cores), or use "
                      "fewer DataLoader workers")
# (markers in stderr / the run's error, what the participant should do), first match wins
ADVICE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("CUDA out of memory", "OutOfMemoryError"),
     "the GPU ran out of memory: lower the batch size (or use bf16, or activation checkpointing)"),
    (("oom-kill", "OUT_OF_MEMORY", "DefaultCPUAllocator: can't allocate memory"), HOST_MEMORY_ADVICE),
    (("CIFAR-10 is not in data_dir",),
     "CIFAR-10 is not staged where the jobs look: run `python -m coursekit.labs.kit.datasets --stage` once on a node "
     "with internet access (the login node), or set COURSEKIT_DATA_DIR to the folder that holds it"),
    (("needs an Ampere or newer GPU", "is not supported by this GPU"),
     "this GPU does not support that precision (bf16 and tf32 need compute capability 8.0, an A100 or newer): "
     "use fp16 or fp32 there"),
    (("bad configuration", "coursekit.train: error:"),
     "the configuration cannot run here: the last line above names the option to change"),
    (("No such file or directory", "does not exist"),
     "a file or folder the job needs is missing on the compute node: check the paths above"),
)
STATE_ADVICE = {
    "TIMEOUT": "the job reached its time limit: raise time_max in s.job or shorten the run",
    "CANCELLED": "the job was cancelled (by you, an instructor or the scheduler): run the cell again",
    "NODE_FAIL": "the node failed: run the cell again (the scheduler picks another node)",
    "PREEMPTED": "the job was preempted: run the cell again",
    "OUT_OF_MEMORY": HOST_MEMORY_ADVICE,
}
DEFAULT_ADVICE = "read the job's whole stderr (job.stderr) and ask an instructor if it is unclear"


@dataclass(frozen=True)
class Failure:
    """One job that did not complete."""

    job_id: str
    name: str
    state: str
    tail: str
    advice: str

    def __str__(self) -> str:
        lines = [f"job {self.job_id} ({self.name}) {self.state}"]
        lines += [f"    | {line}" for line in self.tail.splitlines()] or ["    | (nothing on stderr)"]
        lines.append(f"    what to do: {self.advice}")
        return "\n".join(lines)


def advice_for(state: str, text: str) -> str:
    """What to do about a job that ended in ``state`` and wrote ``text`` (stderr tail + run error)."""
    lowered = text.lower()
    for markers, advice in ADVICE:
        if any(marker.lower() in lowered for marker in markers):
            return advice
    return STATE_ADVICE.get(state, DEFAULT_ADVICE)


def _job(job_id: str) -> Any | None:
    try:
        from coursekit.jobs import get_job

        return get_job(job_id)
    except (KeyError, ValueError, OSError):
        return None


def _tail(job: Any | None, lines: int) -> str:
    if job is None:
        return ""
    try:
        return job.tail(lines, stream="err")
    except (OSError, ValueError):
        return ""


def failure_of(row_or_job: Any, lines: int = TAIL_LINES) -> Failure | None:
    """The failure of one results-table row or one job handle; None when it completed."""
    if isinstance(row_or_job, dict):
        row = row_or_job
        state, job_id = str(row.get("state")), str(row.get("job_id"))
        status = (row.get("summary") or {}).get("status") or row.get("status")
        error = str((row.get("summary") or {}).get("error") or "")
        if state == COMPLETED and status in (None, "completed"):
            return None
        job = row.get("job") or _job(job_id)
        if state == COMPLETED:  # the process exited 0 but the run itself did not complete (e.g. NaN loss)
            state = f"COMPLETED, run {status}"
    else:
        job, error = row_or_job, ""
        state, job_id = str(job.state), str(job.job_id)
        if state == COMPLETED:
            return None
    tail = _tail(job, lines)
    name = getattr(job, "name", "") if job is not None else ""
    return Failure(job_id, name, state, tail, advice_for(state.split(",")[0], tail + "\n" + error))


def report_failures(source: ResultsTable | Iterable[Any], what: str = "", lines: int = TAIL_LINES) -> list[Failure]:
    """Print every job of ``source`` (a results table, or job handles) that did not complete: its state,
    the last ``lines`` of its stderr and what to do. Prints nothing when all completed; the failures."""
    items = list(source)
    failures = [f for f in (failure_of(item, lines) for item in items) if f is not None]
    if failures:
        label = f" of {what}" if what else ""
        print(f"{len(failures)} of {len(items)} job(s){label} did not complete:")
        for failure in failures:
            print(failure)
        print("The cells below use the jobs that completed; figures and claims that need the others say so.")
    return failures


def completed(table: ResultsTable) -> ResultsTable:
    """The rows of ``table`` whose job and run completed."""
    return table.where(lambda row: failure_of(row) is None)


def result_or_none(job: Any, timeout_s: float | None = None, what: str = "") -> Any:
    """``job.result(timeout_s)``; when the job failed, report it (as ``report_failures``) and return None."""
    from coursekit.jobs import JobFailedError

    try:
        return job.result(timeout=timeout_s)
    except (JobFailedError, TimeoutError) as error:
        failure = failure_of(job) or Failure(str(job.job_id), getattr(job, "name", ""), str(job.state), "",
                                             DEFAULT_ADVICE)
        label = f" ({what})" if what else ""
        print(f"job {failure.job_id}{label} returned no result: {str(error).splitlines()[0]}")
        print(failure)
        return None
