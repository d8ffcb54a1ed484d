"""Two nodes of the local Slurm (node1, node2: one slurmd each in its own network namespace, see
slurm/README.md): real 2-node jobs with srun + torchrun (c10d rendezvous on the first node, gloo on CPU),
a failing rank, and a drained node that ``cluster.sh status`` / ``start-controller`` resume."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_helpers import (
    CLUSTER_ACTION_TIMEOUT_S,
    CLUSTER_SCRIPT,
    REPO,
    cluster,
    node_states,
    sbatch,
    wait_job_end,
    wait_nodes_healthy,
)

import coursekit
from coursekit.sites import SITE_ENV

NODES = 2  # what the test cluster must have at least
END_S = 180  # a 2-node torch job on a loaded 2-core machine, counted from the submission of them all
FAIL_PROMPTLY_S = 150  # a job whose rank 1 raises runs less than this: a hang would run to its 10-minute limit
# (60 s failed once on a machine at load 12: starting torch on both nodes took most of it)
FAILING_JOB_TIME_MIN = 10
TEMPLATE = REPO / "slurm" / "templates" / "multinode_srun_torchrun.sbatch"
TEMPLATE_OPTIONS = ("--gres=gpu:1", "--cpus-per-task=1", "--time=5")  # a node's worth this machine can run
TEMPLATE_TRAIN_ARGS = ("--model", "linear", "--dataset", "generated", "--epochs", "1")
ONE_GPU_PER_NODE = 'site = "slurm"\n[site_defaults]\ngpus_per_node = 1\ncpus_per_gpu = 1\n'

ALL_REDUCE = '''\
import os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
line = f"RANK {rank} WORLD {world} HOST {socket.gethostname()} LOCAL {os.environ['LOCAL_RANK']} SUM {total.item():g}"
sys.stdout.write(line + "\\n")  # one write: print() writes the text and its newline apart
sys.stdout.flush()
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
PORT=$((20000 + SLURM_JOB_ID % 10000))  # not a fixed port: other jobs of this file may share node1
srun torchrun --nnodes "$SLURM_JOB_NUM_NODES" --nproc_per_node "$SLURM_GPUS_ON_NODE" \\
    --rdzv_id "$SLURM_JOB_ID" --rdzv_backend c10d --rdzv_endpoint "${JOB_NODES[0]}:$PORT" all_reduce.py
'''

# not anchored to lines: processes of one node share a stdout, and their lines may interleave
RANK_LINE = re.compile(r"RANK (\d+) WORLD (\d+) HOST (\S+?) LOCAL (\d+) SUM ([\d.]+)")


@dataclass
class Submitted:
    """The jobs of this file, sent at once so that they run side by side on the two nodes."""

    folder: Path
    all_reduce: str  # plain sbatch: srun + torchrun, 2 nodes x 2 processes
    template: str  # slurm/templates/multinode_srun_torchrun.sbatch, 2 nodes x 1 process
    submitter: coursekit.Job  # gpu_jobs_submitter(n_gpu=2, launcher="torchrun"), 2 nodes x 1 process
    failing: coursekit.Job  # the same, rank 1 raises


@pytest.fixture(scope="module")
def nodes(slurm_cluster: dict) -> list[str]:
    """The cluster's node names; the test fails (never skips) with fewer than two."""
    names = sorted(node_states())
    assert len(names) >= NODES, f"the local Slurm has {names}, not {NODES} nodes: bash slurm/cluster.sh start"
    return names


@pytest.fixture(scope="module")
def submitted(nodes: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Submitted]:
    folder = tmp_path_factory.mktemp("multinode")
    (folder / "coursekit.toml").write_text(ONE_GPU_PER_NODE)  # n_gpu=2 is 2 nodes x 1 torchrun process
    (folder / "all_reduce.py").write_text(ALL_REDUCE)
    (folder / "rank1_raises.py").write_text(RANK1_RAISES)
    (folder / "mn.sbatch").write_text(TORCHRUN_SBATCH)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSEKIT_COURSE_DIR", str(folder))
        patch.setenv(SITE_ENV, "slurm")
        failing = coursekit.submit_jobs(str(folder / "rank1_raises.py"), n_gpu=2, launcher="torchrun",
                                        name="rank1", time_max=FAILING_JOB_TIME_MIN)[0]
        job_id = coursekit.gpu_jobs_submitter(str(folder / "all_reduce.py"), n_gpu=2, launcher="torchrun",
                                              name="mn")[0]
        yield Submitted(folder, all_reduce=sbatch(folder / "mn.sbatch", folder),
                        template=sbatch(TEMPLATE, folder, *TEMPLATE_OPTIONS, args=TEMPLATE_TRAIN_ARGS),
                        submitter=coursekit.get_job(job_id), failing=failing)


def _rank_lines(text: str) -> list[tuple[int, int, str, int, float]]:
    return sorted((int(r), int(w), host, int(local), float(s)) for r, w, host, local, s in RANK_LINE.findall(text))


def _logs(job: coursekit.Job, suffix: str) -> str:
    return "".join(path.read_text() for path in sorted(job.folder.glob(f"*{suffix}")))


def test_a_two_node_srun_torchrun_job_all_reduces_over_both_nodes(submitted: Submitted, nodes: list[str]) -> None:
    state = wait_job_end(submitted.all_reduce, END_S)
    out = (submitted.folder / f"mn_allreduce-{submitted.all_reduce}.out").read_text()
    err = (submitted.folder / f"mn_allreduce-{submitted.all_reduce}.err").read_text()
    assert state == "COMPLETED", f"{out}\n{err[-3000:]}"
    world = 4  # 2 nodes x 2 processes
    expected_sum = world * (world + 1) / 2
    assert _rank_lines(out) == [(r, world, nodes[r // 2], r % 2, expected_sum) for r in range(world)], out


def test_gpu_jobs_submitter_spans_two_nodes_with_torchrun(submitted: Submitted, nodes: list[str]) -> None:
    job = submitted.submitter
    assert job.wait(END_S) == "COMPLETED", job.tail(30, "err")
    script = job.submission_script.read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script, script
    assert _rank_lines(_logs(job, ".out")) == [(0, 2, nodes[0], 0, 3.0), (1, 2, nodes[1], 0, 3.0)], _logs(job, ".out")


def test_a_two_node_job_whose_rank_1_raises_fails_promptly(submitted: Submitted) -> None:
    job = submitted.failing
    assert job.wait(END_S) == "FAILED", f"not ended within {END_S} s:\n{job.tail(30, 'err')}"
    assert job.elapsed is not None and job.elapsed < FAIL_PROMPTLY_S, f"ran {job.elapsed} s"
    assert "rank 1 fails on purpose" in _logs(job, ".err"), _logs(job, ".err")[-3000:]
    assert "rank 0 passed the barrier" not in _logs(job, ".out")


def test_the_multinode_template_runs_on_two_nodes(submitted: Submitted, nodes: list[str]) -> None:
    state = wait_job_end(submitted.template, END_S)
    out = (submitted.folder / f"multinode_torchrun-{submitted.template}.out").read_text()
    err = (submitted.folder / f"multinode_torchrun-{submitted.template}.err").read_text()
    assert state == "COMPLETED", f"{out}\n{err[-3000:]}"
    assert f"2 nodes ({nodes[0]} {nodes[1]})" in out, out


def test_status_and_start_controller_resume_a_drained_node(nodes: list[str]) -> None:
    node = nodes[-1]
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
