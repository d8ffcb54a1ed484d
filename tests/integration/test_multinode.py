"""Two nodes of the local Slurm (node1, node2: one slurmd each in its own network namespace, see
slurm/README.md): real 2-node jobs with srun + torchrun (c10d rendezvous on the first node, gloo on CPU),
a failing rank, and a drained node that ``cluster.sh status`` / ``start-controller`` resume."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from slurm_helpers import (
    CLUSTER_ACTION_TIMEOUT_S,
    CLUSTER_SCRIPT,
    REPO,
    cluster,
    node_states,
    sbatch_and_wait,
    wait_nodes_healthy,
)

import coursekit

NODES = 2  # what the test cluster must have at least
END_S = 120  # a 2-node torch job: 4 Python processes start on a 2-core machine
FAIL_PROMPTLY_S = 90  # a job whose rank 1 raises ends well before this (its time limit is 10 minutes)
FAILING_JOB_TIME_MIN = 10
TEMPLATE = REPO / "slurm" / "templates" / "multinode_srun_torchrun.sbatch"

ALL_REDUCE = '''\
import os, socket
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"RANK {rank} WORLD {world} HOST {socket.gethostname()} LOCAL {os.environ['LOCAL_RANK']} SUM {total.item():g}",
      flush=True)
dist.destroy_process_group()
'''

RANK1_RAISES = '''\
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("rank 1 fails on purpose")
dist.barrier()  # rank 0 waits here for a rank that is gone
print("rank 0 passed the barrier", flush=True)
'''

# the template's srun + torchrun line, with its c10d rendezvous on the first node, run on a tiny script
TORCHRUN_SBATCH = '''\
#!/bin/bash
#SBATCH --job-name=mn_allreduce
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=2
#SBATCH --time=5
#SBATCH --output=%x-%j.out
#SBATCH --error=%x-%j.err
set -euo pipefail
mapfile -t JOB_NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
srun torchrun --nnodes "$SLURM_JOB_NUM_NODES" --nproc_per_node "$SLURM_GPUS_ON_NODE" \\
    --rdzv_id "$SLURM_JOB_ID" --rdzv_backend c10d --rdzv_endpoint "${JOB_NODES[0]}:29500" all_reduce.py
'''

RANK_LINE = re.compile(r"^RANK (\d+) WORLD (\d+) HOST (\S+) LOCAL (\d+) SUM (\S+)$", re.MULTILINE)


@pytest.fixture()
def two_nodes(slurm_cluster: dict) -> list[str]:
    """The cluster's node names; the test fails (never skips) with fewer than two."""
    nodes = sorted(node_states())
    assert len(nodes) >= NODES, f"the local Slurm has {nodes}, not {NODES} nodes: bash slurm/cluster.sh start"
    return nodes


def _rank_lines(text: str) -> list[tuple[int, int, str, int, float]]:
    return sorted((int(r), int(w), host, int(local), float(s)) for r, w, host, local, s in RANK_LINE.findall(text))


def test_a_two_node_srun_torchrun_job_all_reduces_over_both_nodes(tmp_path: Path, two_nodes: list[str]) -> None:
    (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
    script = tmp_path / "mn.sbatch"
    script.write_text(TORCHRUN_SBATCH)
    job_id, state = sbatch_and_wait(script, tmp_path, END_S)
    out = (tmp_path / f"mn_allreduce-{job_id}.out").read_text()
    assert state == "COMPLETED", f"{out}\n{(tmp_path / f'mn_allreduce-{job_id}.err').read_text()[-3000:]}"
    world = 4  # 2 nodes x 2 processes
    expected_sum = world * (world + 1) / 2
    assert _rank_lines(out) == [(r, world, two_nodes[r // 2], r % 2, expected_sum) for r in range(world)], out


def test_gpu_jobs_submitter_spans_two_nodes_with_torchrun(course: Path, two_nodes: list[str]) -> None:
    # one GPU per node in this course's profile: n_gpu=2 is 2 nodes x 1 torchrun process (cheap on 2 cores)
    (course / "coursekit.toml").write_text('site = "slurm"\n[site_defaults]\ngpus_per_node = 1\ncpus_per_gpu = 1\n')
    script = course / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    job_id = coursekit.gpu_jobs_submitter(str(script), n_gpu=2, launcher="torchrun", name="mn")[0]
    job = coursekit.get_job(job_id)
    assert job.wait(END_S) == "COMPLETED", job.tail(30, "err")
    script_text = job.submission_script.read_text()
    assert "#SBATCH --nodes=2" in script_text and "#SBATCH --ntasks-per-node=1" in script_text, script_text
    out = "".join(path.read_text() for path in sorted(job.folder.glob("*.out")))
    assert _rank_lines(out) == [(0, 2, two_nodes[0], 0, 3.0), (1, 2, two_nodes[1], 0, 3.0)], out


def test_a_two_node_job_whose_rank_1_raises_fails_promptly(course: Path, two_nodes: list[str]) -> None:
    (course / "coursekit.toml").write_text('site = "slurm"\n[site_defaults]\ngpus_per_node = 1\ncpus_per_gpu = 1\n')
    script = course / "rank1_raises.py"
    script.write_text(RANK1_RAISES)
    start = time.monotonic()
    job = coursekit.submit_jobs(str(script), n_gpu=2, launcher="torchrun", name="rank1",
                                time_max=FAILING_JOB_TIME_MIN)[0]
    assert job.wait(FAIL_PROMPTLY_S) == "FAILED", f"not failed within {FAIL_PROMPTLY_S} s:\n{job.tail(30, 'err')}"
    assert time.monotonic() - start < FAIL_PROMPTLY_S
    logs = "".join(path.read_text() for path in sorted(job.folder.glob("*.err")))
    assert "rank 1 fails on purpose" in logs, logs[-3000:]
    assert "rank 0 passed the barrier" not in "".join(p.read_text() for p in job.folder.glob("*.out"))


def test_the_multinode_template_runs_on_two_nodes(tmp_path: Path, two_nodes: list[str]) -> None:
    # the template as shipped, with a node's worth of GPUs and CPUs this machine can run: 2 x 1 process
    done = subprocess.run(["sbatch", "--parsable", "--gres=gpu:1", "--cpus-per-task=1", "--time=5", str(TEMPLATE),
                           "--model", "linear", "--dataset", "generated", "--epochs", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=CLUSTER_ACTION_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = sbatch_and_wait(None, tmp_path, END_S, job_id=job_id)[1]
    out = (tmp_path / f"multinode_torchrun-{job_id}.out").read_text()
    err = (tmp_path / f"multinode_torchrun-{job_id}.err").read_text()
    assert state == "COMPLETED", f"{out}\n{err[-3000:]}"
    assert f"2 nodes ({two_nodes[0]} {two_nodes[1]})" in out, out


def test_status_and_start_controller_resume_a_drained_node(two_nodes: list[str]) -> None:
    node = two_nodes[-1]
    for action in ("status", "start-controller"):
        drain = ["scontrol", "update", f"nodename={node}", "state=drain", "reason=Kill task failed"]
        subprocess.run(drain, check=True, capture_output=True, timeout=CLUSTER_ACTION_TIMEOUT_S)
        assert node_states()[node] in ("drained", "draining"), node_states()
        done = subprocess.run(["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True,
                              timeout=CLUSTER_ACTION_TIMEOUT_S)
        assert done.returncode == 0, f"cluster.sh {action}:\n{done.stdout}\n{done.stderr}"
        assert f"node {node} was drained (reason: Kill task failed): resumed" in done.stdout, done.stdout
        wait_nodes_healthy()
    cluster("status")
