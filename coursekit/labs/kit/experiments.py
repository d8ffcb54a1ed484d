"""Experiments of the labs: configurations of the engine, submitted as jobs, read back as one table.

A lab never trains in the notebook. It builds ``TrainConfig``s, and ``run_sweep`` submits each as a job
of ``python -m coursekit.train`` through coursekit's job API (Slurm on a cluster, submitit's local
executor elsewhere), waits for them, and turns each job's ``metrics.jsonl`` into one row of a
:class:`~coursekit.labs.kit.results.ResultsTable`: the options that differ between the runs, then the
figures (images/s, time, accuracy, memory, the share of step time spent waiting for data, ...).

Timing sweeps on one machine run ``one_at_a_time``: jobs that share a CPU would slow each other down
and the figures would measure the crowd, not the setting.

A job may also make several runs one after the other (``python -m coursekit.train.sweep``, lab 07):
``wait_runs`` then counts the runs as they end (each run's summary record), so that the bar moves while
jobs that run side by side are still going, and its ETA comes from the runs done so far.

The figures of a row come from ``kit/run_figures.py`` (``summarize_run``, importable from here too).
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from itertools import accumulate
from pathlib import Path
from typing import Any

from coursekit.labs.kit.progress import JobsBar
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.run_figures import summarize_run  # importable from here too (labs.summarize_run)
from coursekit.metrics import read_metrics, steps, summary
from coursekit.train.config import TrainConfig

ENGINE = "-m coursekit.train"
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_TIME_MAX = "00:30:00"
OOM_STATE = "OUT_OF_MEMORY"
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "out of memory")
ERR_TAIL_LINES = 200
LOCAL_POLL_S = 0.2  # a local job's state is a process poll: cheap, so ask often
MAX_PAUSE_S = 5.0  # wait_all looks at least this often (the watcher decides when Slurm is asked)
METRICS_POLL_S = 0.5  # wait_until_training and wait_runs read the metrics files this often
RUN_UNIT = "run"  # wait_runs' bar counts runs, not jobs


def engine_command(config: TrainConfig) -> str:
    """The job command of one run: ``-m coursekit.train --opt value ...`` (only non-default options)."""
    return " ".join([ENGINE, *(shlex.quote(arg) for arg in config.to_args())])


def varying_fields(configs: Sequence[TrainConfig]) -> list[str]:
    """The option names whose values differ between the configurations, in TrainConfig order."""
    if len(configs) < 2:
        return []
    names = [f.name for f in fields(TrainConfig)]
    return [n for n in names if len({repr(getattr(c, n)) for c in configs}) > 1]


def is_oom(job: Any) -> bool:
    """Did the job run out of memory? Its state (OUT_OF_MEMORY) or its .err (as DLO-JZ checks it). One run of a
    job that makes several (:class:`SweepRun`): the error its run recorded, where it recorded how it ended (the
    job's .err holds every run's errors)."""
    if isinstance(job, SweepRun):
        ended = summary(job.metrics())
        if ended is not None:
            return any(marker in str(ended.get("error", "")) for marker in OOM_MARKERS)
        if not job.job.done():  # its run has not ended: another run's error may be in the .err
            return False
    if getattr(job, "state", None) == OOM_STATE:
        return True
    try:
        err_text = job.tail(ERR_TAIL_LINES, stream="err")
    except (OSError, ValueError):
        return False
    return any(marker in err_text for marker in OOM_MARKERS)


def _pause(jobs: Sequence[Any]) -> float:
    """How long to sleep before looking again: local jobs are a process poll (cheap); Slurm jobs are
    asked about by the process's one state watcher, at its pace (coursekit/jobs/watcher.py)."""
    if all(getattr(job, "scheduler", "slurm") == "local" for job in jobs):
        return LOCAL_POLL_S
    from coursekit.jobs.watcher import watcher

    return min(MAX_PAUSE_S, max(LOCAL_POLL_S, watcher().next_update_in()))


def wait_all(jobs: Sequence[Any], timeout_s: float | None = DEFAULT_TIMEOUT_S,
             on_progress: Callable[[int], None] | None = None, desc: str = "") -> list[str]:
    """Wait until every job has ended (TimeoutError after ``timeout_s``); their final states, in order.
    ``on_progress(n)`` is told on every poll how many have ended (a progress bar); ``desc`` instead draws
    one, "2/3 jobs" (:class:`~coursekit.labs.kit.progress.JobsBar`, after ``PROGRESS_DELAY_S``).

    Slurm jobs are followed by the process's state watcher: one squeue for all of them per call, at a
    pace that slows as they age, however many jobs there are."""
    if desc and on_progress is None:
        with JobsBar(len(jobs), desc) as bar:
            return wait_all(jobs, timeout_s, on_progress=bar.done)
    start = time.monotonic()
    pending = list(jobs)
    while pending:
        pending = [job for job in pending if not job.done()]
        if on_progress is not None:
            on_progress(len(jobs) - len(pending))
        if not pending:
            break
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            names = ", ".join(f"{j.job_id} ({j.state})" for j in pending)
            raise TimeoutError(f"jobs still running after {timeout_s:.0f} s: {names}")
        pause = _pause(pending)
        if timeout_s is not None:
            pause = max(0.0, min(pause, timeout_s - (time.monotonic() - start)) + LOCAL_POLL_S / 10)
        time.sleep(pause)
    return [job.state for job in jobs]


class RunsBar(JobsBar):
    """A :class:`JobsBar` that counts runs (``done(n)``: ``n`` of ``total`` runs have ended)."""

    unit = RUN_UNIT


def run_ended(folder: str | Path) -> bool:
    """Has the run of ``folder`` (its ``metrics.jsonl``) written its summary record: ended, however it ended?"""
    return summary(read_metrics(folder)) is not None


def wait_runs(jobs: Sequence[Any], run_folders: Sequence[str | Path], timeout_s: float | None = DEFAULT_TIMEOUT_S,
              desc: str = "") -> list[str]:
    """Wait until every job has ended, like :func:`wait_all`, with a bar that counts the runs of
    ``run_folders`` (every run of every job) as their summary records appear: jobs that each make several
    runs (``python -m coursekit.train.sweep``) and run side by side end together, so a bar over jobs would
    sit at 0 until the end. The folders are read at most every ``METRICS_POLL_S`` and a run once seen
    ended is not read again. When the jobs have ended, so has every run (a killed job's too): the bar ends
    full. Returns the jobs' final states."""
    pending = [Path(f) for f in run_folders]
    total, last_read = len(pending), -math.inf
    with RunsBar(total, desc) as bar:

        def count_runs(_jobs_ended: int) -> None:
            nonlocal pending, last_read
            if time.monotonic() - last_read < METRICS_POLL_S:
                return
            last_read = time.monotonic()
            pending = [f for f in pending if not run_ended(f)]
            bar.done(total - len(pending))

        states = wait_all(jobs, timeout_s, on_progress=count_runs)
        bar.done(total)
    return states


def wait_until_training(job: Any, timeout_s: float = DEFAULT_TIMEOUT_S, min_steps: int = 1) -> int:
    """Wait until the job has written ``min_steps`` step records (it is really training); that count.

    Raises RuntimeError when the job ends first and TimeoutError after ``timeout_s``. The metrics file is
    read often (a file); Slurm is asked only through the state watcher, at its pace."""
    start = time.monotonic()
    while True:
        done = len(steps(job.metrics()))
        if done >= min_steps:
            return done
        if job.done():
            done = len(steps(job.metrics()))  # the last records may have come with the end
            if done >= min_steps:
                return done
            raise RuntimeError(f"job {job.job_id} ended ({job.state}) after {done} step record(s); "
                               f"last lines of its stderr:\n{job.tail(10, stream='err')}")
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"job {job.job_id} wrote no step record within {timeout_s:.0f} s (state {job.state})")
        time.sleep(METRICS_POLL_S)


def job_row(job: Any, config: TrainConfig, varied: Sequence[str]) -> dict[str, Any]:
    """One row of a results table: the varied options, the job, and the figures of its run."""
    row: dict[str, Any] = {name: getattr(config, name) for name in varied}
    row.update({"job_id": job.job_id, "state": job.state, "oom": is_oom(job)})
    row.update(summarize_run(job.metrics()))
    row["config"] = config
    return row


@dataclass
class Sweep:
    """Jobs of one experiment, in the order of their configurations."""

    name: str
    configs: list[TrainConfig]
    jobs: list[Any] = field(default_factory=list)
    n_gpus: list[int] | None = None  # a sweep over GPU counts: each job's count (a column of the results)

    @property
    def varied(self) -> list[str]:
        return varying_fields(self.configs)

    def wait(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> list[str]:
        """Wait until every job has ended (a progress bar when it takes a while); their final states."""
        bar_class = RunsBar if any(isinstance(job, SweepRun) for job in self.jobs) else JobsBar  # several per job
        with bar_class(len(self.jobs), self.name) as bar:
            return wait_all(self.jobs, timeout_s, on_progress=bar.done)

    def results(self, timeout_s: float | None = DEFAULT_TIMEOUT_S, title: str = "") -> ResultsTable:
        """Wait, then one row per job (see :func:`job_row`)."""
        self.wait(timeout_s)
        varied = self.varied
        rows = [job_row(j, c, varied) for j, c in zip(self.jobs, self.configs, strict=True)]
        for row, count in zip(rows, self.n_gpus or [], strict=False):
            row["n_gpu"] = count
        return ResultsTable(rows, title=title)


def _validate(configs: Sequence[TrainConfig], name: str) -> list[TrainConfig]:
    configs = list(configs)
    if not configs:
        raise ValueError("configs is empty: give at least one TrainConfig")
    for index, config in enumerate(configs):
        if not isinstance(config, TrainConfig):
            raise ValueError(f"configs[{index}] is a {type(config).__name__}, not a TrainConfig")
    if not name:
        raise ValueError("name is empty: give the experiment a name (e.g. '<pseudonym>-bs')")
    return configs


def _gpu_counts(n_gpu: int | Sequence[int]) -> list[int]:
    counts = [n_gpu] if isinstance(n_gpu, int) else list(n_gpu)
    if not counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
        raise ValueError(f"n_gpu={n_gpu!r}: give a GPU count >= 1 or a list of them (e.g. [1, 2, 4])")
    return counts


def jobs_share_gpus(site: Any = None) -> bool:
    """Would this machine's jobs share its GPU(s)? The local site on a machine with GPUs (submitit's local executor
    gives each job the first GPUs); a cluster gives each its own. ``site``: a Site, its name, or None (the
    course's). Where they share, a sweep's runs go one after the other (or into one job)."""
    from coursekit.sites import Site, load_site, visible_gpu_count

    the_site = site if isinstance(site, Site) else load_site(site)
    return the_site.is_local and visible_gpu_count() > 0


def submit_sweep(configs: Sequence[TrainConfig], *, name: str, n_gpu: int | Sequence[int] = 1,
                 one_at_a_time: bool = False, timeout_s: float | None = DEFAULT_TIMEOUT_S,
                 time_max: str = DEFAULT_TIME_MAX, **submit_options: Any) -> Sweep:
    """Submit one job per configuration under ``name``; ``one_at_a_time`` waits for each before the next.

    ``n_gpu`` may be a list: every configuration runs on every GPU count (GPU counts outer, like
    ``gpu_jobs_submitter``), and the results get an ``n_gpu`` column. On the local site of a GPU machine
    the jobs always run one at a time: side by side they would share the GPUs (and their memory)."""
    from coursekit.jobs import submit_jobs

    configs = _validate(configs, name)
    counts = _gpu_counts(n_gpu)
    one_at_a_time = one_at_a_time or jobs_share_gpus(submit_options.get("site"))
    pairs = [(c, n) for n in counts for c in configs]  # the order submit_jobs returns the jobs in
    sweep = Sweep(name, [c for c, _ in pairs], n_gpus=[n for _, n in pairs] if not isinstance(n_gpu, int) else None)
    if not one_at_a_time:
        commands = [engine_command(c) for c in configs]
        sweep.jobs = list(submit_jobs(commands, n_gpu=counts if len(counts) > 1 else counts[0], name=name,
                                      time_max=time_max, **submit_options))
        return sweep
    with JobsBar(len(pairs), name) as bar:  # one bar over the whole sweep
        for ended, (config, count) in enumerate(pairs):
            (job,) = submit_jobs(engine_command(config), n_gpu=count, name=name, time_max=time_max, **submit_options)
            sweep.jobs.append(job)
            wait_all([job], timeout_s, on_progress=lambda n, ended=ended: bar.done(ended + n))
    return sweep


def collect(jobs: Sequence[Any], configs: Sequence[TrainConfig], timeout_s: float | None = DEFAULT_TIMEOUT_S,
            title: str = "") -> ResultsTable:
    """The results table of jobs submitted some other way (``gpu_jobs_submitter`` ids -> ``get_job``)."""
    if len(jobs) != len(configs):
        raise ValueError(f"jobs and configs differ in length ({len(jobs)} vs {len(configs)}): one config per job")
    sweep = Sweep(jobs[0].name if jobs else "", list(configs), list(jobs))
    return sweep.results(timeout_s=timeout_s, title=title)


def run_sweep(configs: Sequence[TrainConfig], *, name: str, title: str = "", one_job: bool = False,
              **options: Any) -> ResultsTable:
    """Submit, wait, and return the results table (see :func:`submit_sweep` for the options; ``one_job``:
    every run in one job, :func:`submit_sweeps`)."""
    (sweep,) = submit_sweeps([configs], names=[name], one_job=one_job, **options)
    return sweep.results(timeout_s=options.get("timeout_s", DEFAULT_TIMEOUT_S), title=title)


# ------------------------------------------------- tiny runs in one job (labs 01, 02 and 05's cpu profile)

SWEEP_ENGINE = "-m coursekit.train.sweep"
SWEEP_SEPARATOR, SWEEP_RUN_FOLDER = "--next", "run{:03d}"  # coursekit.train.sweep's (which imports torch)


class SweepRun:
    """Run ``index`` of a job that makes several (``python -m coursekit.train.sweep``), seen as a job by
    ``labs.Sweep``: its own metrics folder (``run_dir``), the job's id and logs; done when its run has ended
    (its summary record), so that a sweep's results come while the job goes on with its later runs;
    COMPLETED when its run ended well, even if a later run of the job failed, FAILED when it ended otherwise
    while the job still runs, else the job's state."""

    def __init__(self, job: Any, index: int) -> None:
        self.job, self.run_dir = job, Path(job.run_dir) / SWEEP_RUN_FOLDER.format(index)
        self._ended, self._read_at = False, -math.inf

    def __getattr__(self, name: str) -> Any:  # job_id, name, scheduler, tail, stderr, ...
        return getattr(self.job, name)

    def done(self) -> bool:
        """Its run has ended, or the job has (a killed job's later runs never start); the metrics are read at
        most every ``METRICS_POLL_S``."""
        if self._ended or self.job.done():
            return True
        if time.monotonic() - self._read_at >= METRICS_POLL_S:
            self._read_at = time.monotonic()
            self._ended = run_ended(self.run_dir)
        return self._ended

    @property
    def state(self) -> str:
        ended = summary(self.metrics())
        if ended and ended.get("status") in ("completed", "nan"):
            return "COMPLETED"
        return "FAILED" if ended and not self.job.done() else self.job.state

    def metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.run_dir)


def submit_sweeps(groups: Sequence[Sequence[TrainConfig]], *, names: Sequence[str], one_job: bool = False,
                  **options: Any) -> list[Sweep]:
    """One ``labs.Sweep`` per group of configurations: ``labs.submit_sweep`` for each, or with ``one_job`` a
    single job (named ``names[0]``) that makes every run one after the other — one start of Python and
    torch instead of one per run, and never two runs side by side (``one_at_a_time`` goes without saying).

    With ``one_job`` and ``n_gpu`` a list, one such job per GPU count (its processes make every run in one
    process group, ``python -m coursekit.train.sweep``), and the results get an ``n_gpu`` column, as
    ``submit_sweep``'s; ``one_at_a_time`` then waits for each count's job (a bar over its runs) before the
    next."""
    if len(names) != len(groups):
        raise ValueError(f"{len(groups)} groups of configurations but {len(names)} names: give one name each")
    if not one_job:
        return [submit_sweep(configs, name=name, **options) for configs, name in zip(groups, names, strict=True)]
    from coursekit.jobs import submit_jobs

    options = {"time_max": DEFAULT_TIME_MAX, **options}
    n_gpu = options.pop("n_gpu", 1)
    counts = _gpu_counts(n_gpu)
    one_at_a_time = options.pop("one_at_a_time", False) or jobs_share_gpus(options.get("site"))
    timeout_s = options.pop("timeout_s", DEFAULT_TIMEOUT_S)  # results() waits for the last job
    runs = [" ".join(shlex.quote(arg) for arg in config.to_args()) for configs in groups for config in configs]
    command = f"{SWEEP_ENGINE} " + f" {SWEEP_SEPARATOR} ".join(runs)
    jobs: list[Any] = []
    for count in counts:
        if one_at_a_time and jobs:
            previous = jobs[-1]
            wait_runs([previous], [Path(previous.run_dir) / SWEEP_RUN_FOLDER.format(i) for i in range(len(runs))],
                      timeout_s, desc=f"{names[0]} ({counts[len(jobs) - 1]} GPU(s))")
        (job,) = submit_jobs(command, n_gpu=count, name=names[0], **options)
        jobs.append(job)
    firsts = accumulate((len(configs) for configs in groups), initial=0)  # each group's first run in a job
    return [Sweep(name, [c for _ in counts for c in configs],
                  [SweepRun(job, first + i) for job in jobs for i in range(len(configs))],  # GPU counts outer
                  n_gpus=None if isinstance(n_gpu, int) else [n for n in counts for _ in configs])
            for configs, name, first in zip(groups, names, firsts, strict=False)]
