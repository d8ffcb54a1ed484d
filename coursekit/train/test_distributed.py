"""DDP on 2 CPU processes (gloo): the same weights as one process with the 2x larger batch."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo  # noqa: F401 - DDP imports it; imported once here, the forked workers start at once
import torch.multiprocessing as mp

from coursekit.launch import LOCALHOST
from coursekit.metrics import epochs, of_kind, read_metrics, steps
from coursekit.train.checkpoint import load_checkpoint
from coursekit.train.config import TrainConfig
from coursekit.train.engine import train
from coursekit.train.parallel.test_process_group import free_port

WORLD = 2
PER_RANK_BATCH = 8
# an MLP (no batch norm, no dropout): DDP's averaged gradient is exactly the big batch's gradient
BASE = {"dataset": "generated", "model": "mlp", "num_samples": 160, "image_size": 8, "num_classes": 4,
        "epochs": 2, "lr": 0.05, "checkpoint_every": 1000, "progress": "off"}
RUNS = {"plain": {}, "accumulation": {"accumulation_steps": 2},
        # DDP's options change when gradients travel, never the result
        "sync_every_micro_batch": {"accumulation_steps": 2, "sync_every_micro_batch": True, "bucket_cap_mb": 0.001}}


def _worker(rank: int, port: int, root: str, results: Any) -> None:
    torch.set_num_threads(1)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                       "LOCAL_WORLD_SIZE": str(WORLD), "MASTER_ADDR": LOCALHOST})
    for offset, (name, changes) in enumerate(RUNS.items()):
        os.environ["MASTER_PORT"] = str(port + offset)
        cfg = TrainConfig(**BASE, **changes, batch_size=PER_RANK_BATCH, out=str(Path(root) / f"ddp-{name}"))
        results[(rank, name)] = train(cfg)


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("ddp")
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_worker, args=(free_port(), str(root), results), nprocs=WORLD, join=True,
                           start_method="fork")
        results = dict(results)
    for name, changes in RUNS.items():
        train(TrainConfig(**BASE, **changes, batch_size=WORLD * PER_RANK_BATCH, out=str(root / f"single-{name}")))
    return root, results


@pytest.mark.parametrize("name", list(RUNS))
def test_ddp_weights_equal_single_process_with_the_global_batch(ddp_runs: tuple[Path, dict], name: str) -> None:
    root, results = ddp_runs
    ddp, single = load_checkpoint(root / f"ddp-{name}"), load_checkpoint(root / f"single-{name}")
    assert ddp["world_size"] == WORLD and single["world_size"] == 1
    assert ddp["position"]["step"] == single["position"]["step"] > 0
    for key, value in single["model"].items():
        assert torch.allclose(ddp["model"][key], value, rtol=1e-4, atol=1e-6), key
    ddp_losses = [r["loss"] for r in steps(read_metrics(root / f"ddp-{name}"))]
    single_losses = [r["loss"] for r in steps(read_metrics(root / f"single-{name}"))]
    assert ddp_losses == pytest.approx(single_losses, rel=1e-4)  # all-reduced across ranks
    ddp_val = [r["val_loss"] for r in epochs(read_metrics(root / f"ddp-{name}"))]
    single_val = [r["val_loss"] for r in epochs(read_metrics(root / f"single-{name}"))]
    assert ddp_val == pytest.approx(single_val, rel=1e-4)
    assert results[(0, name)]["val_acc"] == results[(1, name)]["val_acc"]  # every rank sees the reduced value


def test_only_rank_zero_writes(ddp_runs: tuple[Path, dict]) -> None:
    root, results = ddp_runs
    records = read_metrics(root / "ddp-plain")
    assert len(of_kind(records, "start")) == 1 and len(of_kind(records, "summary")) == 1
    start = of_kind(records, "start")[0]
    assert start["world_size"] == WORLD and start["launcher"] == "torchrun"
    summary = results[(0, "plain")]
    assert summary["world_size"] == WORLD and summary["global_batch"] == WORLD * PER_RANK_BATCH
    assert summary["mesh"] == {"dp": WORLD} and summary["config"]["parallel"] == "ddp"
    for record in steps(records):  # global rate = sum over ranks, not rank 0's rate
        assert record["images_per_s_global"] > record["images_per_s"]
