"""Tests of coursekit.train.parallel.process_group: one process, and real gloo collectives between two."""

from __future__ import annotations

import os

import pytest
import torch
import torch._dynamo  # noqa: F401 - DDP imports it; imported here once, forked workers start at once
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from coursekit.launch import LOCALHOST, held_ports
from coursekit.train.parallel import process_group as pg


def test_single_process_context_and_cuda_request() -> None:
    ctx = pg.init_distributed("cpu", env={})
    assert (ctx.world_size, ctx.is_main, ctx.backend, ctx.device.type) == (1, True, None, "cpu")
    assert pg.reduce_values([1.5, torch.tensor(2.0)], ctx) == [1.5, 2.0]
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda'"):
            pg.init_distributed("cuda", env={})


def _collectives_worker(rank: int, world: int, port: int, results: dict) -> None:
    torch.set_num_threads(1)
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": LOCALHOST,
           "MASTER_PORT": str(port)}
    ctx = pg.init_distributed("cpu", env=env)
    try:
        summed = pg.reduce_values([rank + 1.0, 10.0], ctx)
        mean = pg.all_reduce_(torch.tensor([float(rank)]), ctx, op="mean").item()
        biggest = pg.all_reduce_(torch.tensor([float(rank)]), ctx, op="max").item()
        chosen = pg.broadcast_object(f"run-of-rank-{rank}", ctx)
        model = DistributedDataParallel(torch.nn.Linear(2, 1))
        results[rank] = (ctx.backend, ctx.owns_group, summed, mean, biggest, chosen,
                         type(model).__name__, type(pg.unwrap_model(model)).__name__)
    finally:
        pg.cleanup()


def test_two_gloo_processes_reduce_and_broadcast() -> None:
    world = 2
    with mp.Manager() as manager:
        results = manager.dict()
        with held_ports(1) as (port,):
            mp.start_processes(_collectives_worker, args=(world, port, results), nprocs=world, join=True,
                               start_method="fork")
        results = dict(results)
    for rank in range(world):
        backend, owns, summed, mean, biggest, chosen, wrapper, inner = results[rank]
        assert backend == "gloo" and owns
        assert summed == [3.0, 20.0] and mean == 0.5 and biggest == 1.0
        assert chosen == "run-of-rank-0"
        assert (wrapper, inner) == ("DistributedDataParallel", "Linear")
    assert not os.environ.get("RANK")  # the workers' environment did not leak into this process
