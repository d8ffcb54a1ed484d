"""The local nbval run leaves six notebooks to tests that run them as a participant does
(notebooks/conftest.py, RUN_ELSEWHERE): each of those tests must really open that notebook."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_notebook_left_out_of_nbval_is_run_by_the_test_named_for_it() -> None:
    spec = importlib.util.spec_from_file_location("notebooks_conftest", ROOT / "notebooks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = conftest  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(conftest)
    finally:
        del sys.modules[spec.name]
    assert set(conftest.RUN_ELSEWHERE) == {"00_cluster.ipynb", "04_mixed_precision.ipynb",
                                           "05_data_loading.ipynb", "06_data_parallel.ipynb",
                                           "09_race.ipynb", "10_resilience.ipynb"}
    for notebook, test in conftest.RUN_ELSEWHERE.items():
        assert f'"{notebook}"' in (ROOT / test).read_text(), f"{test} does not open {notebook}"
    # 06's kernels send their jobs to the real Slurm (00's server is a Slurm job of the hub's batchspawner)
    assert 'return "slurm"' in (ROOT / conftest.RUN_ELSEWHERE["06_data_parallel.ipynb"]).read_text()
