"""Checkpoint/resume: a resumed run repeats the uninterrupted loss trajectory exactly (CPU); submitit requeue."""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import submitit
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from coursekit.metrics import of_kind, read_metrics, steps, summary
from coursekit.train.checkpoint import (
    load_checkpoint,
    loader_generators,
    remaining_batches,
    rng_state,
    set_rng_state,
)
from coursekit.train.config import TrainConfig
from coursekit.train.engine import ConfigError, TrainingJob, train
from coursekit.train.loop import Trainer

# PointNet has dropout (random masks every step), so the random state must be restored too; warmup +
# cosine make the LR depend on the step; accumulation and log windows test the saved accumulators.
RESUME_RUN = {"dataset": "pointclouds", "model": "pointnet", "num_samples": 120, "num_classes": 3,
              "batch_size": 16, "accumulation_steps": 2, "epochs": 2, "schedule": "cosine", "warmup_epochs": 0.5,
              "optimizer": "adamw", "lr": 0.003, "checkpoint_every": 3, "progress": "off"}
STEPS_PER_EPOCH = 6  # 96 training clouds / 16


class Interrupted(Exception):
    """Stands for the end of a Slurm time limit."""


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in steps(read_metrics(run_dir))}


def interrupt_after(monkeypatch: pytest.MonkeyPatch, stop_step: int) -> None:
    original = Trainer.save

    def save_then_stop(self: Trainer) -> None:
        original(self)
        if self.pos.step == stop_step:
            raise Interrupted(f"stopped after the checkpoint of step {stop_step}")

    monkeypatch.setattr(Trainer, "save", save_then_stop)


@pytest.mark.parametrize(("stop_step", "log_every"), [(3, 1), (6, 1), (9, 2)])
def test_resume_repeats_the_uninterrupted_trajectory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     stop_step: int, log_every: int) -> None:
    """Stopped mid-epoch (3), exactly at an epoch's end (6), or mid-epoch 2 within a log window (9)."""
    cfg = TrainConfig(**RESUME_RUN, log_every=log_every)
    train(cfg.replace(out=str(tmp_path / "whole")))
    with monkeypatch.context() as patch:
        interrupt_after(patch, stop_step)
        with pytest.raises(Interrupted):
            train(cfg.replace(out=str(tmp_path / "split")))
    assert summary(read_metrics(tmp_path / "split"))["status"] == "failed"
    resumed = train(cfg.replace(out=str(tmp_path / "split"), resume=True))

    whole, split = losses(tmp_path / "whole"), losses(tmp_path / "split")
    assert len(whole) == 2 * STEPS_PER_EPOCH // log_every
    assert split == whole  # exactly equal, step by step (the resumed part re-logs nothing twice here)
    final_whole, final_split = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "split")
    for name, value in final_whole["model"].items():
        assert torch.equal(value, final_split["model"][name]), name
    epochs_whole = [(r["train_loss"], r["val_loss"]) for r in of_kind(read_metrics(tmp_path / "whole"), "epoch")]
    epochs_split = [(r["train_loss"], r["val_loss"]) for r in of_kind(read_metrics(tmp_path / "split"), "epoch")]
    assert epochs_split == epochs_whole
    assert resumed["status"] == "completed" and resumed["steps"] == 2 * STEPS_PER_EPOCH
    events = of_kind(read_metrics(tmp_path / "split"), "event")
    assert [e["event"] for e in events] == ["resumed"] and events[0]["step"] == stop_step


def test_resume_refuses_a_different_run(tmp_path: Path) -> None:
    cfg = TrainConfig(**{**RESUME_RUN, "epochs": 1, "out": str(tmp_path)})
    train(cfg)
    with pytest.raises(ConfigError, match="batch_size: 16 -> 32"):
        train(cfg.replace(batch_size=32, resume=True))
    finished = train(cfg.replace(resume=True))  # nothing left to do: it only writes its summary
    assert finished["status"] == "completed" and finished["steps"] == STEPS_PER_EPOCH


def test_rng_state_round_trip() -> None:
    generator = torch.Generator().manual_seed(3)
    python_rng = random.Random(4)
    named = {"g": generator, "r": python_rng}
    saved = rng_state(named)
    first = (random.random(), np.random.rand(), torch.rand(2), torch.rand(1, generator=generator), python_rng.random())
    set_rng_state(saved, named)
    again = (random.random(), np.random.rand(), torch.rand(2), torch.rand(1, generator=generator), python_rng.random())
    assert first[:2] == again[:2] and first[4] == again[4]
    assert torch.equal(first[2], again[2]) and torch.equal(first[3], again[3])


def _batches(iterator: Any) -> list[list[int]]:
    return [batch[0].tolist() for batch in iterator]


class Wrapped:
    """A loader-like iterable around a DataLoader (as GPU decoding does): fast-forwarded by iterating."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


def test_remaining_batches_skip_without_changing_the_order() -> None:
    dataset = TensorDataset(torch.arange(50))
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, generator=torch.Generator().manual_seed(1))
    sampler.set_epoch(2)
    full = _batches(iter(loader))
    assert _batches(remaining_batches(loader, 3)) == full[3:]  # index-level skip
    assert set(loader_generators(loader)) == {"loader.generator"}

    wrapped = Wrapped(loader)
    assert _batches(remaining_batches(wrapped, 5)) == full[5:]
    assert set(loader_generators(wrapped)) == {"inner_loader.generator"}


def test_training_job_requeues_as_a_resume(tmp_path: Path) -> None:
    cfg = TrainConfig(**{**RESUME_RUN, "epochs": 1, "checkpoint_every": None, "out": str(tmp_path)})
    job = TrainingJob(cfg)
    assert isinstance(job, submitit.helpers.Checkpointable) and job.cfg.checkpoint_every is not None
    first = job()
    delayed = job.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission)
    resumed_job = pickle.loads(pickle.dumps(delayed)).function  # what submitit stores for the requeued job
    assert resumed_job.cfg.resume and resumed_job.cfg.out == str(tmp_path)
    again = resumed_job()
    assert first["status"] == again["status"] == "completed" and again["steps"] == first["steps"]
    assert [e["event"] for e in of_kind(read_metrics(tmp_path), "event")] == ["resumed"]
