"""Test scheduling across pytest-xdist workers (``-n 3 --dist loadgroup``, set in pyproject.toml).

Two rules keep parallel runs correct:

- every test that talks to the real Slurm (marker ``slurm``) runs in ONE group, on one worker, one at a
  time: some of them stop the controller or fill the cluster, which would break the others;
- every other test runs with the rest of its file (``loadfile``-like): the cells of a notebook share one
  kernel and must run in order on one worker.

Without xdist (``-p no:xdist`` or ``-n 0``) the markers are ignored and everything runs in order.

Every process of the run computes with one torch thread (``OMP_NUM_THREADS=1``, inherited by the notebooks'
kernels and the jobs they start), as the labs' CPU jobs do: three workers, kernels and jobs share CI's two
cores, and torch's default of one thread per core makes each thread of a busy process wait for the others.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

THREADS_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SLURM_GROUP = "slurm"
INTEGRATION = Path(__file__).resolve().parent / "tests" / "integration"  # its conftest marks all ``slurm``


def _talks_to_slurm(item: pytest.Item) -> bool:
    return item.get_closest_marker("slurm") is not None or INTEGRATION in Path(str(item.fspath)).resolve().parents


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per process (see the module docstring); a value the caller set is kept."""
    for name, value in THREADS_ENV.items():
        os.environ.setdefault(name, value)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into node-id suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = SLURM_GROUP if _talks_to_slurm(item) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
