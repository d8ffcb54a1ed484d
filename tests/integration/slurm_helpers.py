"""Helpers of the integration tests: the cluster script, and a tiny checkpointable job for the requeue
test (sent to the job by value: the job cannot import this file)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import submitit

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "slurm" / "cluster.sh"
CLUSTER_ACTION_TIMEOUT_S = 120

SLEEP_UNTIL_TIMEOUT_S = 600


class CountRuns(submitit.helpers.Checkpointable):
    """First run: note it and wait for the time limit's signal. Run after the requeue: resume and return
    how many runs there were, read from the state file the first run left."""

    def __call__(self, state_file: str) -> int:
        path = Path(state_file)
        runs = int(path.read_text()) + 1 if path.exists() else 1
        path.write_text(str(runs))
        if runs == 1:
            time.sleep(SLEEP_UNTIL_TIMEOUT_S)  # submitit checkpoints and requeues on USR2
        return runs


def cluster(action: str) -> None:
    """``bash slurm/cluster.sh <action>`` (stop-controller, start-controller, status), which must succeed."""
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True,
                          timeout=CLUSTER_ACTION_TIMEOUT_S)
    assert done.returncode == 0, f"cluster.sh {action} failed:\n{done.stdout}\n{done.stderr}"


NODE_STATE_FLAGS = "*~#!%$@^-"  # sinfo's suffixes on a state (down* = not responding)
HEALTHY_NODE_STATES = ("idle", "mixed", "allocated", "completing")
ACTIVE_JOB_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")
POLL_S = 0.5
SLURM_COMMAND_TIMEOUT_S = 30


def node_states() -> dict[str, str]:
    """Every node's state from ``sinfo -N`` (flags such as ``*`` stripped), e.g. {"node1": "idle"}."""
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T"], capture_output=True, text=True, check=True,
                          timeout=SLURM_COMMAND_TIMEOUT_S)
    rows = (line.split("|") for line in done.stdout.split())
    return {name: state.rstrip(NODE_STATE_FLAGS) for name, state in rows}


def wait_nodes_healthy(timeout_s: float = CLUSTER_ACTION_TIMEOUT_S) -> dict[str, str]:
    """Wait until every node takes jobs; their states (AssertionError naming the others when time is up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = node_states()
        if states and all(s in HEALTHY_NODE_STATES for s in states.values()):
            return states
        assert time.monotonic() < deadline, f"nodes not back to idle/mixed in {timeout_s} s: {states}"
        time.sleep(POLL_S)


def job_state(job_id: str) -> str:
    """The job's state from accounting (sacct), '' before slurmdbd knows it."""
    done = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "State", "-j", job_id], capture_output=True, text=True,
                          timeout=SLURM_COMMAND_TIMEOUT_S)
    words = done.stdout.split()
    return words[0] if words else ""


def sbatch(script: Path, cwd: Path, *options: str, args: tuple[str, ...] = ()) -> str:
    """``sbatch [options] script [args]`` from ``cwd``: the job id (AssertionError with sbatch's message if
    refused)."""
    done = subprocess.run(["sbatch", "--parsable", *options, str(script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=SLURM_COMMAND_TIMEOUT_S)
    assert done.returncode == 0, f"sbatch {' '.join(options)} {script} refused: {done.stderr}"
    return done.stdout.strip().split(";")[0]


def wait_job_end(job_id: str, timeout_s: float) -> str:
    """Wait until the job has ended (accounting says so): its final state."""
    deadline = time.monotonic() + timeout_s
    while (state := job_state(job_id)) in ("", *ACTIVE_JOB_STATES):
        assert time.monotonic() < deadline, f"job {job_id} still {state or 'unknown'} after {timeout_s} s"
        time.sleep(POLL_S)
    return state


def sbatch_and_wait(script: Path, cwd: Path, timeout_s: float) -> tuple[str, str]:
    """``sbatch script`` from ``cwd``, wait for its end: (job id, final state)."""
    job_id = sbatch(script, cwd)
    return job_id, wait_job_end(job_id, timeout_s)
