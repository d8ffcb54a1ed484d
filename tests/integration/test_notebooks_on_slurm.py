"""Notebook 00 and lab 06 under nbval with their jobs sent to the real local Slurm (not the local executor).

These are their nbval runs in CI: a run of the whole notebooks/ folder on the local site leaves them to this
test (notebooks/conftest.py, ON_SLURM), which must name the same two."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# 00: the job layer from the notebook; 06: multi-process jobs, the two-node sweep (02 ran here too: its
# Slurm path is the same as 00's, and CI time is better spent on 06)
NOTEBOOKS_ON_SLURM = ("00_cluster_from_the_notebook.ipynb", "06_data_parallelism.ipynb")
NBVAL_TIMEOUT_S = 600


def test_the_local_nbval_run_leaves_these_notebooks_to_this_test() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_conftest", ROOT / "notebooks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert tuple(conftest.ON_SLURM) == NOTEBOOKS_ON_SLURM


@pytest.mark.parametrize("notebook", NOTEBOOKS_ON_SLURM)
def test_notebook_passes_nbval_against_slurm(notebook: str, tmp_path: Path) -> None:
    env = {**os.environ, "COURSEKIT_SITE": "slurm", "COURSEKIT_COURSE_DIR": str(tmp_path), "MPLBACKEND": "Agg"}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
               "-c", str(ROOT / "pyproject.toml"), str(ROOT / "notebooks" / notebook)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=NBVAL_TIMEOUT_S)
    assert done.returncode == 0, f"nbval on Slurm failed for {notebook}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    submitted = list((tmp_path / "jobs").glob("*/*/*_submission.sh"))
    assert submitted, "the notebook sent no job to Slurm (no submission script in the course folder)"
    assert any("#SBATCH" in path.read_text() for path in submitted)
