"""The state watcher: one squeue for every job followed, at a pace that slows as jobs age; UNKNOWN when
squeue cannot answer; used by Job.state, Job.wait, Job.__repr__, labs' wait_all (tested in labs/kit/test_wait_all.py) and the queue view."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit import slurm_cli
from coursekit.jobs import watcher
from coursekit.jobs.handle import Job
from coursekit.jobs.watcher import StateWatcher
from coursekit.slurm_cli import SlurmError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeSlurm:
    """squeue/sacct answers, every call counted; ``down`` = the controller does not answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.queue: dict[str, str] = {}
        self.accounting: dict[str, str] = {}
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.down = False
        monkeypatch.setattr(slurm_cli, "squeue", self.squeue)
        monkeypatch.setattr(slurm_cli, "sacct", self.sacct)
        monkeypatch.setattr(slurm_cli, "accounting_enabled", lambda: True)

    def squeue(self, job_ids: list[str]) -> list[dict[str, str]]:
        self.calls.append(("squeue", tuple(job_ids)))
        if self.down:
            raise SlurmError("Unable to contact slurm controller (connect failure)", ["squeue"], 1)
        return [{"job_id": j, "state": s, "reason": "Resources" if s == "PENDING" else "None"}
                for j, s in self.queue.items() if j in job_ids]

    def sacct(self, job_ids: list[str]) -> list[dict[str, str]]:
        self.calls.append(("sacct", tuple(job_ids)))
        return [{"job_id": j, "state": s, "exit_code": "3:0" if s == "FAILED" else "0:0"}
                for j, s in self.accounting.items() if j in job_ids]


@pytest.fixture()
def slurm(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    return FakeSlurm(monkeypatch)


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Clock:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    clock = Clock()
    monkeypatch.setattr(watcher, "_watcher", StateWatcher(clock=clock))
    return clock


def make_jobs(tmp_path: Path, count: int, submitted_at: float) -> list[Job]:
    jobs = []
    for i in range(count):
        folder = tmp_path / "jobs" / "sweep" / str(100 + i)
        folder.mkdir(parents=True)
        jobs.append(Job(str(100 + i), "sweep", folder, submitted_at=submitted_at))
    return jobs


def test_many_jobs_many_reads_one_squeue(tmp_path: Path, slurm: FakeSlurm, clock: Clock) -> None:
    jobs = make_jobs(tmp_path, 32, clock.now)
    slurm.queue = {j.job_id: "PENDING" for j in jobs}
    states = [job.state for job in jobs for _ in range(3)] + [repr(job) for job in jobs]
    assert states[:96] == ["PENDING"] * 96 and "state='PENDING'" in states[-1]
    assert slurm.calls == [("squeue", tuple(j.job_id for j in jobs))]  # 32 jobs x 4 reads: one call
    assert jobs[0].state_reason == "Resources"


def test_calls_back_off_as_jobs_age(tmp_path: Path, slurm: FakeSlurm, clock: Clock) -> None:
    jobs = make_jobs(tmp_path, 8, clock.now)
    slurm.queue = {j.job_id: "RUNNING" for j in jobs}
    start, calls_at = clock.now, []
    while clock.now - start < 600:
        before = len(slurm.calls)
        [job.state for job in jobs]  # noqa: B018 - a reader asking as often as it likes (every 0.1 s)
        if len(slurm.calls) > before:
            calls_at.append(round(clock.now - start, 1))
        clock.now += 0.1
    gaps = [b - a for a, b in zip(calls_at, calls_at[1:], strict=False)]
    assert calls_at[:5] == pytest.approx([0.0, 1.0, 2.0, 4.0, 8.0], abs=0.15)  # 1 s, then half the jobs' age
    assert all(b >= a - 0.15 for a, b in zip(gaps, gaps[1:], strict=False)), gaps  # never faster again
    assert max(gaps) == pytest.approx(watcher.MAX_DELAY_S, abs=0.15)
    assert len(calls_at) / 600 <= 0.6 / 5  # well below one call per 5 s over ten minutes
    assert {c[0] for c in slurm.calls} == {"squeue"}


def test_ended_jobs_are_not_asked_again_and_sacct_once_for_those_that_left(
        tmp_path: Path, slurm: FakeSlurm, clock: Clock) -> None:
    done, gone, running = make_jobs(tmp_path, 3, clock.now)
    slurm.queue = {done.job_id: "COMPLETED", running.job_id: "RUNNING"}
    slurm.accounting = {gone.job_id: "FAILED"}
    assert [done.state, gone.state, running.state] == ["COMPLETED", "FAILED", "RUNNING"]
    assert slurm.calls == [("squeue", ("100", "101", "102")), ("sacct", ("101",))]
    clock.now += 60
    assert running.state == "RUNNING"
    assert slurm.calls[-1] == ("squeue", ("102",))  # only the job that has not ended
    assert gone.exit_code == 3


def test_controller_down_is_unknown_with_why_never_a_stale_accounting_state(
        tmp_path: Path, slurm: FakeSlurm, clock: Clock) -> None:
    (job,) = make_jobs(tmp_path, 1, clock.now)
    slurm.queue = {job.job_id: "RUNNING"}
    assert job.state == "RUNNING"
    slurm.down, slurm.accounting = True, {job.job_id: "PENDING"}  # accounting lags behind the controller
    clock.now += 60
    assert job.state == "UNKNOWN"
    assert "Unable to contact slurm controller" in job.state_reason
    assert ("sacct", ("100",)) not in slurm.calls
    slurm.down = False
    clock.now += 60
    assert job.state == "RUNNING" and job.state_reason == ""


def test_a_cancel_makes_the_watcher_ask_again_soon(tmp_path: Path, slurm: FakeSlurm, clock: Clock,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (job,) = make_jobs(tmp_path, 1, clock.now - 3600)  # an old job: asked about every MAX_DELAY_S
    slurm.queue = {job.job_id: "RUNNING"}
    assert job.state == "RUNNING"
    monkeypatch.setattr(slurm_cli, "scancel", lambda ids: slurm.queue.update({job.job_id: "CANCELLED"}))
    job.cancel()
    clock.now += watcher.MIN_DELAY_S + 0.1
    assert job.state == "CANCELLED"


def test_a_written_result_makes_the_watcher_ask_again_soon_once(tmp_path: Path, slurm: FakeSlurm,
                                                                clock: Clock) -> None:
    (job,) = make_jobs(tmp_path, 1, clock.now - 3600)  # an old job: asked about every MAX_DELAY_S
    slurm.queue = {job.job_id: "RUNNING"}
    assert job.state == "RUNNING"
    assert watcher.watcher().next_update_in() == pytest.approx(watcher.MAX_DELAY_S)
    job.paths.result_pickle.write_bytes(b"")  # task 0 has returned: the job is ending
    clock.now += 0.5
    assert job.state == "RUNNING"  # the cached row; the file hurries the next call
    assert watcher.watcher().next_update_in() == pytest.approx(watcher.MIN_DELAY_S - 0.5)
    slurm.queue = {job.job_id: "COMPLETING"}
    clock.now += watcher.MIN_DELAY_S
    assert job.state == "COMPLETING"
    clock.now += 3 * watcher.MAX_DELAY_S
    assert job.state == "COMPLETING"
    calls = len(slurm.calls)
    clock.now += watcher.MIN_DELAY_S + 0.5  # hurried once only: the file does not hurry it again
    assert job.state == "COMPLETING" and len(slurm.calls) == calls
    slurm.queue, slurm.accounting = {}, {job.job_id: "COMPLETED"}
    clock.now += watcher.MAX_DELAY_S
    assert job.state == "COMPLETED"
