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
    """``bash slurm/cluster.sh <action>`` (stop-controller, start-controller), which must succeed."""
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), action], capture_output=True, text=True,
                          timeout=CLUSTER_ACTION_TIMEOUT_S)
    assert done.returncode == 0, f"cluster.sh {action} failed:\n{done.stdout}\n{done.stderr}"
