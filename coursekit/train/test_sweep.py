"""coursekit.train.sweep on 2 processes (gloo, CPU): the runs share one process group, joined once, and the
first run that fails ends the sweep on every rank."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - DDP imports it; imported once here, the forked workers start at once
import torch.distributed as dist
import torch.multiprocessing as mp

from coursekit.launch import LOCALHOST, held_ports
from coursekit.metrics import read_metrics, summary
from coursekit.train import sweep

WORLD = 2
TINY = ["--dataset", "generated", "--model", "mlp", "--num-samples", "64", "--image-size", "4", "--num-classes", "2",
        "--batch-size", "8", "--steps", "3", "--device", "cpu", "--progress", "off", "--checkpoint-every", "1000"]


def _worker(rank: int, ports: tuple[int, int], root: str, results: Any) -> None:
    torch.set_num_threads(1)
    joined, left = [], []
    init, destroy = dist.init_process_group, dist.destroy_process_group
    dist.init_process_group = lambda *a, **k: (joined.append(1), init(*a, **k))[1]  # type: ignore[assignment]
    dist.destroy_process_group = lambda *a, **k: (left.append(1), destroy(*a, **k))[1]  # type: ignore[assignment]
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                       "LOCAL_WORLD_SIZE": str(WORLD), "MASTER_ADDR": LOCALHOST, "MASTER_PORT": str(ports[0])})
    good = sweep.main([*TINY, "--out", f"{root}/good", "--next", *TINY, "--seed", "1", "--next", *TINY, "--lr", "0.5"])
    results[(rank, "good")] = (good, len(joined), len(left), dist.is_initialized())
    os.environ["MASTER_PORT"] = str(ports[1])
    # run 1 asks for SyncBatchNorm, which needs GPUs when there are several processes: refused on every rank
    bad = sweep.main([*TINY, "--out", f"{root}/bad", "--next", *TINY, "--sync-batchnorm", "--next", *TINY])
    results[(rank, "bad")] = (bad, len(joined), len(left), dist.is_initialized())


def test_two_processes_run_a_sweep_in_one_process_group_and_stop_at_a_refused_run(tmp_path: Path) -> None:
    with mp.Manager() as manager:
        results = manager.dict()
        with held_ports(2) as ports:
            mp.start_processes(_worker, args=(tuple(ports), str(tmp_path), results), nprocs=WORLD, join=True,
                               start_method="fork")
        results = dict(results)
    for rank in range(WORLD):  # exit code, group joins and leaves so far, still in a group
        assert results[(rank, "good")] == (0, 1, 1, False)
        assert results[(rank, "bad")] == (2, 2, 2, False)
    ends = [summary(read_metrics(sweep.run_folder(tmp_path / "good", i))) for i in range(3)]
    assert [(e["status"], e["world_size"], e["steps"]) for e in ends] == [("completed", WORLD, 3)] * 3
    assert [(e["config"]["seed"], e["config"]["lr"]) for e in ends][1:] == [(1, ends[0]["config"]["lr"]), (0, 0.5)]
    assert ends[0]["train_loss"] != ends[1]["train_loss"]  # each run trained with its own configuration
    assert summary(read_metrics(sweep.run_folder(tmp_path / "bad", 0)))["status"] == "completed"
    assert not sweep.run_folder(tmp_path / "bad", 2).exists()  # after the refused run nothing started


def test_a_sweep_on_several_processes_needs_one_device(monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(sweep, "launch_info", lambda: type("Info", (), {"world_size": 2})())
    assert sweep.main([*TINY, "--next", *TINY[:-6], "--device", "auto", "--progress", "off"]) == 2
    assert "--device differs" in capsys.readouterr().err


def test_one_process_frees_each_runs_memory_before_the_next_even_after_a_failed_run(monkeypatch: Any,
                                                                                     tmp_path: Path) -> None:
    freed: list[int] = []
    statuses = iter([{"status": "completed"}, RuntimeError("CUDA out of memory"), {"status": "completed"}])

    def fake_train(config: Any) -> dict[str, str]:
        outcome = next(statuses)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(sweep, "train", fake_train)
    monkeypatch.setattr(sweep, "_release_memory", lambda: freed.append(1))
    configs = [sweep.parse_args([*TINY, "--out", str(tmp_path / str(i))]) for i in range(3)]
    assert sweep._run_each(configs) == 1  # the failed run is counted, the next one still ran
    assert len(freed) == 3
