"""Tests of coursekit.distributed: Slurm host lists, launcher detection, and real gloo collectives."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch
import torch._dynamo  # noqa: F401 - DDP imports it; imported here once, forked workers start at once
import torch.multiprocessing as mp

from coursekit import distributed as d


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("vm", ["vm"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("jz[1-2],gpu-a100-[009-011]", ["jz1", "jz2", "gpu-a100-009", "gpu-a100-010", "gpu-a100-011"]),
    ("r[1-2]n[3,5]", ["r1n3", "r1n5", "r2n3", "r2n5"]),
    ("a,b[8-10]-ib", ["a", "b8-ib", "b9-ib", "b10-ib"]),
])
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert d.expand_nodelist(nodelist) == hosts
    assert d.first_host(nodelist) == hosts[0]


@pytest.mark.parametrize("bad", ["node[1-", "node[a-b]", ""])
def test_bad_nodelist_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="node list"):
        d.first_host(bad)


def test_tasks_on_node() -> None:
    assert [d.tasks_on_node("4(x2),3", n) for n in range(3)] == [4, 4, 3]
    assert d.tasks_on_node("2", 0) == 2


def test_launch_info_torchrun() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "n1", "MASTER_PORT": "29500", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    info = d.launch_info(env)  # torchrun inside an srun step: torchrun's variables win
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.master_addr, info.master_port, info.launcher) == ("n1", 29500, "torchrun")


def test_launch_info_srun() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "6",
           "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "2",
           "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1"}
    info = d.launch_info(env)
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (5, 1, 6, 2)
    assert info.master_addr == "gpu07" and info.launcher == "srun"
    assert d.MASTER_PORT_BASE <= info.master_port < d.MASTER_PORT_BASE + d.MASTER_PORT_SPAN
    other_step = d.launch_info({**env, "SLURM_STEP_ID": "2"})
    assert other_step.master_port != info.master_port  # concurrent steps of one job do not collide
    assert d.launch_info({**env, "MASTER_PORT": "12345"}).master_port == 12345


def test_batch_script_outside_srun_is_one_process() -> None:
    """What sbatch --ntasks=2 gives its batch script (seen on this project's Slurm): no step variables."""
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2",
           "SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "106"}
    assert d.launch_info(env).world_size == 1
    step = {**env, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert (d.launch_info(step).rank, d.launch_info(step).world_size) == (1, 2)


def test_launch_info_submitit_local_and_single() -> None:
    env = {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1",
           "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_JOB_ID": "777"}
    info = d.launch_info(env)
    assert (info.rank, info.world_size, info.master_addr, info.launcher) == (1, 2, d.LOCALHOST, "submitit-local")
    assert d.launch_info({}) == d.LaunchInfo()


def test_single_process_context_and_cuda_request() -> None:
    ctx = d.init_distributed("cpu", env={})
    assert (ctx.world_size, ctx.is_main, ctx.backend, ctx.device.type) == (1, True, None, "cpu")
    assert d.reduce_values([1.5, torch.tensor(2.0)], ctx) == [1.5, 2.0]
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device='cuda'"):
            d.init_distributed("cuda", env={})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((d.LOCALHOST, 0))
        return sock.getsockname()[1]


def _collectives_worker(rank: int, world: int, port: int, results: dict) -> None:
    torch.set_num_threads(1)
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": d.LOCALHOST,
           "MASTER_PORT": str(port)}
    ctx = d.init_distributed("cpu", env=env)
    try:
        summed = d.reduce_values([rank + 1.0, 10.0], ctx)
        mean = d.all_reduce_(torch.tensor([float(rank)]), ctx, op="mean").item()
        biggest = d.all_reduce_(torch.tensor([float(rank)]), ctx, op="max").item()
        chosen = d.broadcast_object(f"run-of-rank-{rank}", ctx)
        model = d.wrap_model(torch.nn.Linear(2, 1), ctx)
        results[rank] = (ctx.backend, ctx.owns_group, summed, mean, biggest, chosen,
                         type(model).__name__, type(d.unwrap_model(model)).__name__)
    finally:
        d.cleanup()


def test_two_gloo_processes_reduce_and_broadcast() -> None:
    world = 2
    with mp.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_collectives_worker, args=(world, free_port(), results), nprocs=world, join=True,
                           start_method="fork")
        results = dict(results)
    for rank in range(world):
        backend, owns, summed, mean, biggest, chosen, wrapper, inner = results[rank]
        assert backend == "gloo" and owns
        assert summed == [3.0, 20.0] and mean == 0.5 and biggest == 1.0
        assert chosen == "run-of-rank-0"
        assert (wrapper, inner) == ("DistributedDataParallel", "Linear")
    assert not os.environ.get("RANK")  # the workers' environment did not leak into this process


def test_derived_ports_stay_below_the_ephemeral_ports() -> None:
    """A derived rendezvous port among the ephemeral ones may already be taken by some connection: the job's
    rank 0 then fails to listen (a CI run of 2026-11-26 lost lab 08's tensor-parallel job, cause not kept;
    this is the likeliest one on a machine running many gloo jobs at once)."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    first_ephemeral = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    assert d.MASTER_PORT_BASE + d.MASTER_PORT_SPAN <= first_ephemeral
    assert max(d._port_from_job(str(job), str(step)) for job in range(0, 5000, 7) for step in range(16)) < first_ephemeral
