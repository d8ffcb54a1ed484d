"""Integration tests against the real local Slurm (slurm/cluster.sh). Every test here is marked
``slurm``; when the cluster is not up they FAIL (never skip): CI must not pass without Slurm."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from coursekit.sites import SITE_ENV

HERE = Path(__file__).resolve().parent
CHECK_TIMEOUT_S = 30
START_HINT = "start it with `bash slurm/cluster.sh start` (as root), then `bash slurm/cluster.sh status`"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


def _check(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.fail(f"the local Slurm is not usable: `{' '.join(command)}` failed ({error}); {START_HINT}")
    if done.returncode != 0:
        pytest.fail(f"the local Slurm is not usable: `{' '.join(command)}` said: "
                    f"{(done.stderr or done.stdout).strip()}; {START_HINT}")
    return done.stdout


@pytest.fixture(scope="session", autouse=True)
def slurm_cluster() -> dict[str, int]:
    """The cluster answers (sinfo), has a GPU partition with a usable node, and keeps accounts (sacct): its
    GPUs per node, CPUs per node and number of nodes."""
    rows = [line.split("|") for line in _check(["sinfo", "-h", "-o", "%P|%G|%T|%c"]).split()]
    usable = [r for r in rows if r[1].startswith("gpu:") and r[2].rstrip("*~#") in ("idle", "mixed", "allocated")]
    if not usable:
        pytest.fail(f"the local Slurm has no usable GPU node (sinfo: {rows}); {START_HINT}")
    _check(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now"])
    nodes = set(_check(["sinfo", "-h", "-N", "-o", "%N"]).split())  # node1, node2 (slurm/README.md)
    return {"gpus_per_node": int(usable[0][1].split(":")[-1].split("(")[0]), "cpus": int(usable[0][3]),
            "nodes": len(nodes)}


@pytest.fixture()
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh course folder; jobs go to the generic ``slurm`` site (it learns the node from sinfo)."""
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv(SITE_ENV, "slurm")
    return tmp_path

