"""Test scheduling across pytest-xdist workers (``-n 3 --dist loadgroup``, set in pyproject.toml).

Two rules keep parallel runs correct:

- every test that talks to the real Slurm (marker ``slurm``) runs in ONE group, on one worker, one at a
  time: some of them stop the controller or fill the cluster, which would break the others;
- every other test runs with the rest of its file (``loadfile``-like): the cells of a notebook share one
  kernel and must run in order on one worker.

The groups start longest first (xdist keeps their order: ``--no-loadscope-reorder``): the Slurm group,
which one worker works through alone while the others share the rest, then the files that take longest
(``LONGEST_FIRST``, from CI's --durations), then the others in collection order. A long file started last
would keep one worker busy while the others idle.

Without xdist (``-p no:xdist`` or ``-n 0``) the markers are ignored and everything runs in collection order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLURM_GROUP = "slurm"
# the files that took longest in CI (2026-11-27, 2 cores, -n 3: 40-90 s each), longest first
LONGEST_FIRST = (
    "notebooks/08_model_parallelism.ipynb",
    "tests/bench/test_ddp_gpu.py",
    "coursekit/labs/lab06_data_parallel/test_ddp_check.py",
    "notebooks/02_batch_size.ipynb",
    "notebooks/07_large_batch.ipynb",
    "notebooks/04_mixed_precision.ipynb",
    "notebooks/03_gpu_memory.ipynb",
    "coursekit/train/test_parallel_strategies.py",
    "tests/browser/test_participant_race.py",
    "coursekit/train/test_parallel.py",
    "tests/browser/test_jupyterlab.py",
    "notebooks/05_data_loading_profiler.ipynb",
    "coursekit/labs/lab08_model_parallel/test_fsdp_check.py",
    "coursekit/labs/lab08_model_parallel/test_pipeline_check.py",
    "notebooks/09_race.ipynb",
    "tests/bench/test_race_gpu.py",
    "coursekit/test_demo.py",
    "notebooks/01_gd_vs_sgd.ipynb",
)
INTEGRATION = Path(__file__).resolve().parent / "tests" / "integration"  # its conftest marks all ``slurm``


def _talks_to_slurm(item: pytest.Item) -> bool:
    return item.get_closest_marker("slurm") is not None or INTEGRATION in Path(str(item.fspath)).resolve().parents


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into node-id suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        group = SLURM_GROUP if _talks_to_slurm(item) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
        groups[item.nodeid] = group
    if config.getoption("dist", "no") == "no":
        return  # one process: the collection's order
    rank = {SLURM_GROUP: -1, **{path: i for i, path in enumerate(LONGEST_FIRST)}}
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(LONGEST_FIRST)))  # stable: cells stay in order
