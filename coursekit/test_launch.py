"""Tests of coursekit.launch: Slurm host lists, launcher detection, derived ports; it imports no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coursekit import launch


def test_launch_imports_no_torch() -> None:
    """The job layer (coursekit.jobs.tasks) imports it on a login node."""
    code = "import sys, coursekit.launch; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize(("nodelist", "hosts"), [
    ("vm", ["vm"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("jz[1-2],gpu-a100-[009-011]", ["jz1", "jz2", "gpu-a100-009", "gpu-a100-010", "gpu-a100-011"]),
    ("r[1-2]n[3,5]", ["r1n3", "r1n5", "r2n3", "r2n5"]),
    ("a,b[8-10]-ib", ["a", "b8-ib", "b9-ib", "b10-ib"]),
])
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert launch.expand_nodelist(nodelist) == hosts
    assert launch.first_host(nodelist) == hosts[0]


@pytest.mark.parametrize("bad", ["node[1-", "node[a-b]", ""])
def test_bad_nodelist_is_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="node list"):
        launch.first_host(bad)


def test_tasks_on_node() -> None:
    assert [launch.tasks_on_node("4(x2),3", n) for n in range(3)] == [4, 4, 3]
    assert launch.tasks_on_node("2", 0) == 2


def test_launch_info_torchrun() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "n1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "77", "TORCHELASTIC_RESTART_COUNT": "0",
           "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    info = launch.launch_info(env)  # torchrun inside an srun step: torchrun's variables win
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.master_addr, info.master_port, info.launcher) == ("n1", 29500, "torchrun")
    # torchrun started by a submitit task (launcher="torchrun" on the local site): torchrun started this process
    local = {**env, "SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_GLOBALID": "0", "SUBMITIT_LOCAL_NTASKS": "1"}
    assert launch.launch_info(local).launcher == "torchrun"


# What coursekit's task wrapper exports to every srun-style task (coursekit.jobs.tasks.torch_env_variables).
KIT_EXPORTED = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": launch.LOCALHOST, "MASTER_PORT": "20123"}


def test_a_submitit_local_task_with_the_kits_env_variables_is_named_submitit_local() -> None:
    """Lab 06's ranks job logged "launcher: torchrun" under submitit's local executor (a GPU run, 2026)."""
    env = {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1",
           "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_JOB_ID": "777"}
    bare = launch.launch_info(env)
    exported = launch.launch_info({**env, **KIT_EXPORTED})
    assert exported.launcher == bare.launcher == "submitit-local"
    assert (exported.rank, exported.world_size, exported.master_port) == (1, 2, 20123)


def test_an_srun_task_with_the_kits_env_variables_is_named_srun() -> None:
    env = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
           "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_NODELIST": "gpu07", "SLURM_JOB_ID": "4242",
           "SUBMITIT_EXECUTOR": "slurm"}
    assert launch.launch_info(env).launcher == "srun"
    exported = launch.launch_info({**env, **KIT_EXPORTED})
    assert (exported.launcher, exported.rank, exported.world_size) == ("srun", 1, 2)
    # the batch script itself (no step) given the variables by hand: no srun step, nothing else set them
    batch = {k: v for k, v in env.items() if k not in ("SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS")}
    assert launch.launch_info({**batch, **KIT_EXPORTED}).launcher == "torchrun"


def test_env_variables_alone_keep_the_torchrun_name() -> None:
    """Set by hand as torchrun sets them (tests that spawn their ranks do): nothing else names a launcher."""
    assert launch.env_launcher(KIT_EXPORTED) == "torchrun"
    assert launch.env_launcher({**KIT_EXPORTED, "TORCHELASTIC_RUN_ID": "none"}) == "torchrun"
    assert launch.env_launcher({**KIT_EXPORTED, "SUBMITIT_EXECUTOR": "local"}) == "torchrun"  # no task id: not a task


def test_launch_info_srun() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "6",
           "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "2",
           "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1"}
    info = launch.launch_info(env)
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (5, 1, 6, 2)
    assert info.master_addr == "gpu07" and info.launcher == "srun"
    assert launch.MASTER_PORT_BASE <= info.master_port < launch.MASTER_PORT_BASE + launch.MASTER_PORT_SPAN
    other_step = launch.launch_info({**env, "SLURM_STEP_ID": "2"})
    assert other_step.master_port != info.master_port  # concurrent steps of one job do not collide
    assert launch.launch_info({**env, "MASTER_PORT": "12345"}).master_port == 12345


def test_batch_script_outside_srun_is_one_process() -> None:
    """What sbatch --ntasks=2 gives its batch script (seen on this project's Slurm): no step variables."""
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2",
           "SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "106"}
    assert launch.launch_info(env).world_size == 1
    step = {**env, "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert (launch.launch_info(step).rank, launch.launch_info(step).world_size) == (1, 2)


def test_launch_info_submitit_local_and_single() -> None:
    env = {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1",
           "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_JOB_ID": "777"}
    info = launch.launch_info(env)
    assert (info.rank, info.world_size, info.master_addr, info.launcher) == (1, 2, launch.LOCALHOST, "submitit-local")
    assert launch.launch_info({}) == launch.LaunchInfo()


def test_derived_ports_stay_below_the_ephemeral_ports() -> None:
    """A derived rendezvous port among the ephemeral ones may already be taken by some connection: the job's
    rank 0 then fails to listen (a CI run of 2026-11-26 lost lab 08's tensor-parallel job, cause not kept;
    this is the likeliest one on a machine running many gloo jobs at once)."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    first_ephemeral = int(ranges.read_text().split()[0]) if ranges.exists() else 32768
    assert launch.MASTER_PORT_BASE + launch.MASTER_PORT_SPAN <= first_ephemeral
    assert max(launch._port_from_job(str(job), str(step)) for job in range(0, 5000, 7) for step in range(16)) < first_ephemeral
