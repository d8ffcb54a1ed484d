"""The root conftest sizes torch's threads per test worker from the cores and the workers."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("cores", "workers", "given", "threads", "lowered"), [
    (2, 3, None, 1, False),  # CI: three workers on two cores
    (2, 1, None, 2, False),  # one notebook at a time
    (16, 3, None, 5, False),
    (2, 3, "2", 1, True),  # an HPC module's OMP_NUM_THREADS=2 under three workers: lowered, said
    (2, 1, "2", 2, False),  # it fits: kept
    (16, 3, "4", 4, False),  # fewer than would fit: kept
    (2, 3, "lots", 1, True),
    (2, 3, "0", 1, True),
])
def test_threads_per_worker(root_conftest, cores, workers, given, threads, lowered):
    got, notice = root_conftest.threads_per_worker(cores, workers, given)
    assert got == threads
    assert (notice is not None) == lowered
    if lowered:
        assert "OMP_NUM_THREADS" in notice


def test_this_run_fits_its_cores(root_conftest):
    """Whatever this run inherited, its processes together ask for no more threads than there are cores."""
    import os

    threads = int(os.environ["OMP_NUM_THREADS"])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    assert threads == 1 or threads * workers <= root_conftest.usable_cores()
