"""What lab 07 runs: ``plan(s)`` names every run (tags ``part``, ``arm``, ``batch_size``, ``lr``, ``seed``,
``optimizer``) with its ``TrainConfig``; ``submit`` sends them as ``s.jobs`` jobs of ``python -m
coursekit.train.sweep`` (one start of Python and torch for many runs); ``results`` waits (a bar counting runs) and
reads the table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coursekit.labs.kit.experiments import DEFAULT_TIMEOUT_S, Sweep, submit_sweeps, summarize_run, wait_runs
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab07_large_batch.settings import Arm, scaled_lr, steps_per_epoch
from coursekit.train.config import TrainConfig


@dataclass
class Run:
    """One planned run: its tags (a row's first columns) and its configuration."""

    tags: dict[str, Any]
    config: TrainConfig


def _run(part: str, arm: str, config: TrainConfig) -> Run:
    return Run({"part": part, "arm": arm, "batch_size": config.batch_size, "lr": config.lr, "seed": config.seed,
                "optimizer": config.optimizer}, config)


def _arm_config(base: TrainConfig, arm: Arm, images: int, seed: int) -> TrainConfig:
    """An arm's run: one schedule shape (warm-up for ``arm.warmup_share`` of its steps, then linear decay)."""
    per_epoch = steps_per_epoch(images, arm.batch_size)
    steps = arm.steps or base.epochs * per_epoch
    config = base.replace(batch_size=arm.batch_size, lr=arm.lr, warmup_steps=round(arm.warmup_share * steps),
                          optimizer=arm.optimizer, ghost_batch_size=arm.ghost_batch, seed=seed,
                          nesterov=base.nesterov and arm.optimizer == "sgd")  # LARS: heavy ball, as its paper
    if arm.steps:  # validate once, after the last step
        config = config.replace(steps=arm.steps, val_every_epochs=math.ceil(arm.steps / per_epoch))
    return config


def plan(s: Any, seeds: Sequence[int] | None = None) -> list[Run]:
    """Every run of the lab from its settings ``s`` (``profile.settings("07")``), in the order A, B, C, D;
    ``seeds``: A and B's seeds, the first also C and D's and that of A's first-seed arms (``room.my_seeds``: each
    seat of a room its own); None: ``s.seeds``."""
    base, b0, lr0, images = s.base, s.base_batch, s.base_lr, s.train_images
    seeds = list(s.seeds if seeds is None else seeds)
    if not seeds or not all(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in seeds):
        raise ValueError(f"seeds={seeds!r}: give one or more whole numbers, 0 or more (or None: the lab's seeds)")
    runs: list[Run] = []
    for seed in seeds:
        for arm in s.arms:  # A: one shape, only peak LR, warm-up and batch vary (and the optimizer of the grid)
            if arm.all_seeds or seed == seeds[0]:
                runs.append(_run("A", arm.name, _arm_config(base, arm, images, seed)))
        for lr in s.spike_lrs:  # B: the loss of every step, with and without warm-up
            for warmup in (s.spike_warmup_steps, 0):
                arm = f"lr {lr:g}, " + (f"{warmup} warm-up steps" if warmup else "no warm-up")
                runs.append(_run("B", arm, base.replace(batch_size=s.spike_batch, lr=lr, warmup_steps=warmup,
                                                        seed=seed, log_every=1)))
    critical = base.replace(holdout_samples=s.holdout, schedule="constant", warmup_steps=s.critical_warmup_steps,
                            target_acc=s.target_acc, timing_warmup=0)
    for batch in s.critical_batches:  # C: steps to the target on the held-out split
        epochs = s.critical_epochs.get(batch, s.critical_epochs["default"])
        every = max(s.eval_min_steps, math.ceil(s.eval_every_samples / batch))
        for factor in s.critical_lr_factors:
            lr = factor * scaled_lr(lr0, b0, batch, "linear")
            runs.append(_run("C", f"{factor:g} x linear", critical.replace(
                batch_size=batch, lr=lr, epochs=epochs, eval_every=every, seed=seeds[0])))
    runs.append(_run("D", "noise scale", critical.replace(  # D: C's reference batch, split into micro-batches
        batch_size=b0, lr=lr0, epochs=s.noise_epochs, target_acc=None, eval_every=None,
        accumulation_steps=s.noise_micro_batches, noise_every=s.noise_every, log_every=s.noise_log_every,
        seed=seeds[0])))
    return runs


def submit(runs: Sequence[Run], *, name: str, jobs: int = 1, **job: Any) -> list[Sweep]:
    """The runs as ``jobs`` jobs, each making its share one after the other (``submit_sweeps(one_job=True)``):
    A and B dealt by seed, C and D after them, so that the jobs cost alike."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be at least 1")
    if not runs:
        raise ValueError("runs is empty: plan(s) gives the lab's runs")
    shares: list[list[Run]] = [[] for _ in range(jobs)]
    for index, run in enumerate(runs):
        shares[index % jobs].append(run)
    return [submit_sweeps([[r.config for r in share]], names=[name], one_job=True, **job)[0]
            for share in shares if share]


def results(sweeps: Sequence[Sweep], runs: Sequence[Run], timeout_s: float | None = DEFAULT_TIMEOUT_S
            ) -> ResultsTable:
    """Wait for the jobs (a bar counting runs as they end); one row per run: its tags, then its figures."""
    handles = [handle for sweep in sweeps for handle in sweep.jobs]
    jobs = list({id(h.job): h.job for h in handles}.values())
    wait_runs(jobs, [h.run_dir for h in handles], timeout_s, desc="lab 07")
    by_config = {}
    for sweep in sweeps:
        for config, handle in zip(sweep.configs, sweep.jobs, strict=True):
            by_config[id(config)] = handle
    rows = []
    for run in runs:
        handle = by_config[id(run.config)]
        rows.append({**run.tags, "job_id": handle.job_id, **summarize_run(handle.metrics()), "config": run.config})
    return ResultsTable(rows, title="lab 07: every run")
