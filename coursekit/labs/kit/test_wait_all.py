"""labs' ``wait_all`` follows a sweep through the jobs' one state watcher: it and the queue view share the
squeue calls (the watcher's fakes come from coursekit/jobs/test_watcher.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit.jobs import test_watcher
from coursekit.jobs.queue_view import QueueSource
from coursekit.jobs.test_watcher import Clock, FakeSlurm, make_jobs
from coursekit.labs.kit.experiments import wait_all

slurm = test_watcher.slurm  # the watcher tests' fixtures: a fake squeue/sacct and a clock of the watcher's own
clock = test_watcher.clock


def test_wait_all_and_the_queue_view_share_the_calls(tmp_path: Path, slurm: FakeSlurm, clock: Clock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = make_jobs(tmp_path, 16, clock.now)
    slurm.queue = {j.job_id: "RUNNING" for j in jobs}
    source = QueueSource(jobs=jobs)
    source.rows()
    source.rows()
    assert len(slurm.calls) == 1
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # time passes only when wait_all sleeps; the jobs end at +20 s
        slept.append(seconds)
        clock.now += seconds
        if clock.now - 1000.0 > 20:
            slurm.queue = {j.job_id: "COMPLETED" for j in jobs}

    monkeypatch.setattr("coursekit.labs.kit.experiments.time.sleep", sleep)
    monkeypatch.setattr("coursekit.labs.kit.experiments.time.monotonic", clock)
    assert wait_all(jobs, timeout_s=600) == ["COMPLETED"] * 16
    assert len(slurm.calls) <= 7, slurm.calls  # 16 jobs, 20+ s: 0, 1, 2, 4, 8, 16, 32 s at most
    assert all(len(ids) == 16 for _, ids in slurm.calls)
