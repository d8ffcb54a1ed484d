"""Test scheduling across pytest-xdist workers (``-n 3 --dist loadgroup``, set in pyproject.toml).

Two rules keep parallel runs correct:

- every test that talks to the real Slurm (marker ``slurm``) runs in ONE group, on one worker, one at a
  time: some of them stop the controller or fill the cluster, which would break the others;
- every other test runs with the rest of its file (``loadfile``-like): the cells of a notebook share one
  kernel and must run in order on one worker.

Without xdist (``-p no:xdist`` or ``-n 0``) the markers are ignored and everything runs in order.

Threads: every process of the run (the workers, the notebooks' kernels and the jobs they start inherit it)
computes with ``cores // workers`` threads, at least one (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``): on CI's
two cores with three workers that is one thread each, as the labs' CPU jobs use; torch's default of one
thread per core would make each thread of a busy process wait for the others. A value set in the environment
(HPC modules and course machines often set ``OMP_NUM_THREADS``) is kept when it fits (value x workers <=
cores) and lowered to the fitting value, with a notice, when it does not: with ``OMP_NUM_THREADS=2`` inherited,
three workers on two cores ran lab 02's sweep 25 times slower and out of its time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

THREADS_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
SLURM_GROUP = "slurm"
INTEGRATION = Path(__file__).resolve().parent / "tests" / "integration"  # its conftest marks all ``slurm``


def _talks_to_slurm(item: pytest.Item) -> bool:
    return item.get_closest_marker("slurm") is not None or INTEGRATION in Path(str(item.fspath)).resolve().parents


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a batch job's cgroup narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_count(config: pytest.Config) -> int:
    """How many pytest processes run tests at once: xdist's workers (``-n``), else this one."""
    if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # set in each xdist worker
        return int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    workers = getattr(config.option, "numprocesses", None)
    if workers in ("auto", "logical"):
        return usable_cores()
    dist = getattr(config.option, "dist", "no")
    return int(workers) if workers and dist != "no" else 1


def threads_per_worker(cores: int, workers: int, given: str | None) -> tuple[int, str | None]:
    """Threads for each worker, and a notice when a given value had to be lowered (module docstring)."""
    fitting = max(1, cores // max(1, workers))
    if not given:
        return fitting, None
    try:
        wanted = int(given)
    except ValueError:
        return fitting, f"OMP_NUM_THREADS={given!r} is not a whole number: the tests use {fitting}"
    if wanted >= 1 and wanted <= fitting:
        return wanted, None
    return fitting, (f"OMP_NUM_THREADS={given} x {workers} test worker(s) does not fit {cores} core(s): "
                     f"the tests use {fitting} thread(s) per worker (run with -n 1 to keep more)")


def pytest_configure(config: pytest.Config) -> None:
    """Threads per process sized from the cores and the workers (see the module docstring)."""
    threads, notice = threads_per_worker(usable_cores(), worker_count(config), os.environ.get("OMP_NUM_THREADS"))
    if notice and not os.environ.get("PYTEST_XDIST_WORKER"):  # said once, by the controller
        config.issue_config_time_warning(pytest.PytestConfigWarning(notice), stacklevel=2)
    for name in THREADS_VARS:
        os.environ[name] = str(threads)


def _long(item: pytest.Item) -> bool:
    """A test of a group that runs long: a notebook's cells, a browser's or a benchmark's run, processes of its own."""
    path = Path(str(item.fspath))
    return (path.suffix == ".ipynb" or item.get_closest_marker("browser") is not None
            or item.get_closest_marker("slow") is not None or bool({"bench", "browser"} & set(path.parts)))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into node-id suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's group (module docstring), and the groups' order: xdist hands groups out in the order of their
    first test (``--no-loadscope-reorder``), so the Slurm group (one worker's long serial chain) goes first, then
    every group with a long test, then the short ones, which fill the workers' last minutes. By default xdist
    sorts groups by their number of tests, which sent the notebooks, the browser and the benchmarks' few long
    tests last, and one worker then ran them alone while the others had nothing left."""
    groups = {}
    for item in items:
        group = SLURM_GROUP if _talks_to_slurm(item) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
        rank = 0 if group == SLURM_GROUP else 1 if _long(item) else 2
        groups[group] = min(groups.get(group, rank), rank)
    first_seen = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.get_closest_marker("xdist_group").args[0], index)
    items.sort(key=lambda item: (groups[item.get_closest_marker("xdist_group").args[0]],
                                 first_seen[item.get_closest_marker("xdist_group").args[0]]))
