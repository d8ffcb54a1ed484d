"""Lab 08's runs as jobs of the engine: :class:`Run` (one engine run, its tags and job shape),
:func:`strategy_runs` (one run per strategy and the serial reference) and :func:`bubble_runs` (the pipeline sweep
over micro-batches); :func:`run_jobs` runs them one job at a time under one progress bar, :func:`start_jobs`
without waiting (:class:`PendingRuns`), :func:`run_strategies` gives :func:`strategy_table`'s table."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab08_model_parallel.analysis import strategy_table
from coursekit.labs.lab08_model_parallel.strategies import (
    PIPELINES,
    STRATEGIES,
    bubble_configs,
    job_shape,
    processes,
    strategy_config,
)
from coursekit.train.config import TrainConfig

# --- the runs, as jobs: one job per run, or the runs of one shape in one job -----------------------

COMPLETED = "COMPLETED"
PROGRESS_EVERY_S = 1.0  # the progress bar reads the runs' metrics files this often


@dataclass
class Run:
    """One engine run: its tags (the first columns of its row), configuration and job shape (``submit_jobs``'s
    ``n_gpu``, ``n_gpu_per_task``); once submitted, its job and its place among that job's runs (None: the
    job's only run)."""

    tags: dict[str, Any]
    config: TrainConfig
    shape: dict[str, int]
    job: Any = None
    position: int | None = None

    def metrics(self) -> list[dict[str, Any]]:
        if self.position is None:
            return self.job.metrics()
        from coursekit.labs.kit.experiments import SWEEP_RUN_FOLDER
        from coursekit.metrics import read_metrics

        return read_metrics(Path(self.job.run_dir) / SWEEP_RUN_FOLDER.format(self.position))

    def ended(self) -> bool:
        """Its job ended, or (a job of several runs) the run wrote its summary."""
        from coursekit.metrics import summary

        return self.job.done() or (self.position is not None and summary(self.metrics()) is not None)


def strategy_runs(base: TrainConfig, strategies: Sequence[str], n: int, *, weights_dir: str | os.PathLike,
                  options: dict[str, dict[str, Any]] | None = None, naive_gpus: int = 1) -> list[Run]:
    """One run per strategy (``n`` processes; serial, checkpointed and naive 1), each with its ``options``
    (e.g. ``{"gpipe": {"microbatches": 4}}``), saving its final weights into ``weights_dir``. ``naive_gpus``:
    GPUs of naive's one process (1 on a CPU: its stages share it). Tags: experiment "strategy", strategy, n_gpu
    (processes), gpus (the GPUs the job holds: naive's one process drives ``naive_gpus``)."""
    if n < 2:
        raise ValueError(f"n={n}: model parallelism needs at least 2 processes")
    for strategy in strategies:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategies: {strategy!r} is unknown; choose among {', '.join(STRATEGIES)}")
    Path(weights_dir).mkdir(parents=True, exist_ok=True)
    return [Run({"experiment": "strategy", "strategy": s, "n_gpu": processes(s, n),
                 "gpus": job_shape(s, n, naive_gpus)["n_gpu"]},
                strategy_config(base, s, weights_dir, n=processes(s, n), **(options or {}).get(s, {})),
                job_shape(s, n, naive_gpus)) for s in strategies]


def bubble_runs(base: TrainConfig, microbatches: Sequence[int], stages: int,
                schedules: Sequence[str] = PIPELINES) -> list[Run]:
    """The runs of :func:`bubble_configs`, on ``stages`` processes. Tags: experiment "bubble", schedule, m."""
    return [Run({"experiment": "bubble", "schedule": c.pipeline_schedule, "microbatches": c.microbatches}, c,
                {"n_gpu": stages}) for c in bubble_configs(base, microbatches, stages, schedules)]


def run_strategies(base: TrainConfig, strategies: Sequence[str], n: int, *, name: str,
                   weights_dir: str | os.PathLike, options: dict[str, dict[str, Any]] | None = None,
                   naive_gpus: int = 1, one_job: bool = False, timeout_s: float = 600, **job: Any) -> ResultsTable:
    """:func:`strategy_runs` run by :func:`run_jobs`, as :func:`strategy_table` (serial first: the reference)."""
    runs = strategy_runs(base, strategies, n, weights_dir=weights_dir, options=options, naive_gpus=naive_gpus)
    return strategy_table(run_jobs(runs, name=name, one_job=one_job, timeout_s=timeout_s, **job))


def group_command(configs: Sequence[TrainConfig]) -> str:
    """One job's command: the engine's sweep (``python -m coursekit.train.sweep``) with each run's engine
    options, ``--next`` between them."""
    from coursekit.labs.kit.experiments import SWEEP_ENGINE, SWEEP_SEPARATOR

    groups = [" ".join(shlex.quote(arg) for arg in config.to_args()) for config in configs]
    return f"{SWEEP_ENGINE} " + f" {SWEEP_SEPARATOR} ".join(groups)


def run_jobs(runs: Sequence[Run], *, name: str, one_job: bool = False, timeout_s: float = 600, bar: bool = True,
             **job: Any) -> ResultsTable:
    """Run every run as a job of its shape, one job at a time (jobs side by side would share the CPU, or a
    local machine's GPUs), waiting under one progress bar over the runs; one row per run, in order: its tags,
    state, job id, :func:`~coursekit.labs.kit.experiments.summarize_run`'s figures and its config.

    ``one_job`` (the cpu profile, whose runs last a second where starting Python and torch costs each process
    several): the runs of one shape share one job, in their order, in one process group (the engine's sweep), and
    the jobs of different shapes run side by side (except on the local site of a GPU machine): what the runs
    then share is the CPU: their speeds, not their weights or memory (runs that time something go last)."""
    from coursekit.jobs import submit_jobs
    from coursekit.labs.kit.experiments import (
        RunsBar,
        engine_command,
        jobs_share_gpus,
        summarize_run,
        wait_all,
    )

    runs = list(runs)
    if not runs:
        raise ValueError("runs is empty: give at least one Run")
    groups: dict[Any, list[Run]] = {}
    for index, run in enumerate(runs):  # one job per run, or per shape (in order of first appearance)
        key = (run.shape["n_gpu"], run.shape.get("n_gpu_per_task", 1)) if one_job else index
        groups.setdefault(key, []).append(run)
    together = one_job and not jobs_share_gpus(job.get("site"))
    waves = [list(groups.values())] if together else [[members] for members in groups.values()]
    checked = [0.0]

    def progress(_: int) -> None:
        if time.monotonic() - checked[0] >= PROGRESS_EVERY_S:  # reads metrics files: not on every poll
            checked[0] = time.monotonic()
            bar.done(sum(run.job is not None and run.ended() for run in runs))

    with RunsBar(len(runs), name, enabled=bar) as bar:
        for wave in waves:
            handles = []
            for members in wave:
                command = group_command([r.config for r in members]) if one_job else engine_command(members[0].config)
                (handle,) = submit_jobs(command, name=name, **members[0].shape, **job)
                handles.append(handle)
                for position, run in enumerate(members):
                    run.job, run.position = handle, position if one_job else None
            wait_all(handles, timeout_s, on_progress=progress)
            checked[0] = 0.0
            progress(0)
    rows = []
    for run in runs:
        figures = summarize_run(run.metrics())
        state = COMPLETED if figures["status"] == "completed" else run.job.state
        rows.append({**run.tags, "job_id": run.job.job_id, "state": state, **figures, "config": run.config})
    return ResultsTable(rows, title=f"{name}: {len(runs)} runs in {len(groups)} job(s)")


class PendingRuns:
    """:func:`run_jobs` started in the background (:func:`start_jobs`): the cell that submits returns at once,
    the jobs run one after the other while the participant reads on, and :meth:`results` waits for the rest
    (a bar over the runs) and gives run_jobs' table, or raises what run_jobs raised."""

    def __init__(self, runs: Sequence[Run], name: str, **options: Any) -> None:
        import threading

        self.runs, self.name = list(runs), name
        self._table: ResultsTable | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, kwargs=options, daemon=True, name=f"lab08 {name}")
        self._thread.start()

    def _run(self, **options: Any) -> None:
        try:
            self._table = run_jobs(self.runs, name=self.name, bar=False, **options)
        except BaseException as error:  # handed to the cell that collects
            self._error = error

    def ended(self) -> int:
        """How many runs have ended so far."""
        return sum(run.job is not None and run.ended() for run in self.runs)

    def results(self) -> ResultsTable:
        from coursekit.labs.kit.experiments import RunsBar

        with RunsBar(len(self.runs), self.name) as bar:
            while self._thread.is_alive():
                bar.done(self.ended())
                self._thread.join(PROGRESS_EVERY_S)
            bar.done(len(self.runs) if self._error is None else self.ended())
        if self._error is not None:
            raise self._error
        assert self._table is not None
        return self._table


def start_jobs(runs: Sequence[Run], *, name: str, one_job: bool = False, timeout_s: float = 600,
               **job: Any) -> PendingRuns:
    """:func:`run_jobs` without waiting: the jobs are submitted (one at a time on a machine's own GPUs, as
    run_jobs does) from a background thread; ``.results()`` collects them."""
    return PendingRuns(runs, name, one_job=one_job, timeout_s=timeout_s, **job)
