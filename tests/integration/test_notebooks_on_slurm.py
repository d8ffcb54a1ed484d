"""Notebooks 00 and 06 run against the real local Slurm in CI, not in the local nbval run (notebooks/conftest.py,
ON_SLURM): 00 in a participant's JupyterLab spawned by the workshop's JupyterHub as a Slurm job
(tests/hub/test_hub_browser.py: Run All in the browser, its jobs submitted from the node; it replaced 00's
nbval run here), 06 as a participant's copy in the browser (tests/browser/test_participant_ddp.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_IN_THE_HUB_ON_SLURM = ("00_cluster_from_the_notebook.ipynb",)  # tests/hub/test_hub_browser.py
RUN_IN_THE_BROWSER_ON_SLURM = ("06_data_parallelism.ipynb",)  # tests/browser/test_participant_ddp.py


def test_the_local_nbval_run_leaves_these_notebooks_to_the_slurm_runs() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("notebooks_conftest", ROOT / "notebooks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert tuple(conftest.ON_SLURM) == RUN_IN_THE_HUB_ON_SLURM + RUN_IN_THE_BROWSER_ON_SLURM
    hub_test = (ROOT / "tests" / "hub" / "test_hub_browser.py").read_text()
    assert all(f'NOTEBOOK = "{name}"' in hub_test for name in RUN_IN_THE_HUB_ON_SLURM)
    browser_test = (ROOT / "tests" / "browser" / "test_participant_ddp.py").read_text()
    assert all(f'NOTEBOOK = "{name}"' in browser_test for name in RUN_IN_THE_BROWSER_ON_SLURM)
    assert 'return "slurm"' in browser_test
