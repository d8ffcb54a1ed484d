"""bench/notebooks_gpu.py's scheduler, with a fake executor: notebooks share the GPUs, each gets its own,
the multi-GPU labs get two, timeouts and the run's time limit are honoured, results are saved as they come."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import notebooks_gpu as gpu_notebooks  # noqa: E402

NAMES = ["00_a.ipynb", "01_b.ipynb", "02_c.ipynb", "03_d.ipynb", "05_e.ipynb", "06_ddp.ipynb", "07_f.ipynb",
         "08_mp.ipynb", "09_g.ipynb"]
TICK_S = 1.0  # seconds, not tenths: the overlaps asserted below must hold on a busy 2-core machine


class FakeClock:
    """Time that passes only when a fake notebook runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeExecutor:
    """Sleeps ``ticks`` x TICK_S per notebook (or moves ``clock`` on by as much) and records which GPUs were in
    use at the same time."""

    def __init__(self, ticks: dict[str, int], clock: FakeClock | None = None) -> None:
        self.ticks, self.lock, self.clock = ticks, threading.Lock(), clock
        self.in_use: set[int] = set()
        self.calls: list[tuple[str, list[int], float]] = []
        self.peak = 0

    def __call__(self, path: Path, gpus: list[int], timeout: float) -> dict:
        with self.lock:
            assert not self.in_use & set(gpus), f"{path.name} got GPUs {gpus} already in use: {self.in_use}"
            self.in_use |= set(gpus)
            self.peak = max(self.peak, len(self.in_use))
            self.calls.append((path.name, gpus, timeout))
        wanted = self.ticks.get(path.name[:2], 1) * TICK_S
        if self.clock is None:
            time.sleep(min(wanted, timeout))
        else:
            self.clock.now += min(wanted, timeout)
        with self.lock:
            self.in_use -= set(gpus)
        if wanted > timeout:
            return {"notebook": path.name, "passed": False, "wall_s": timeout, "claims": [], "error": "timeout"}
        return {"notebook": path.name, "passed": True, "wall_s": wanted, "claims": [], "error": None}


def test_notebooks_share_the_gpus_multi_gpu_labs_get_two_and_start_first():
    fake = FakeExecutor({"06": 4, "08": 4})
    saved: list[dict] = []
    states = gpu_notebooks.run_all([Path(n) for n in NAMES], [0, 1, 2, 3, 4, 5], fake, notebook_timeout_s=10,
                                   time_limit_s=30, on_change=lambda s: saved.append({k: dict(v) for k, v in s.items()}),
                                   clock=FakeClock())  # the time limit never bites (importing the labs takes a while)
    assert all(s["state"] == "finished" and s["passed"] for s in states.values())
    gpus = {name: g for name, g, _ in fake.calls}
    assert len(gpus["06_ddp.ipynb"]) == len(gpus["08_mp.ipynb"]) == 2
    assert all(len(g) == 1 for name, g in gpus.items() if name[:2] not in ("06", "08"))
    assert [name for name, _, _ in fake.calls[:2]] == ["06_ddp.ipynb", "08_mp.ipynb"]
    assert fake.peak == 6  # the GPUs were all busy at once, never over-committed (asserted in the fake)
    # saved whenever a notebook started or ended: a killed run leaves what finished before
    assert any(s["06_ddp.ipynb"]["state"] == "running" for s in saved)
    assert any(s["00_a.ipynb"]["state"] == "finished" and s["06_ddp.ipynb"]["state"] == "running" for s in saved)


def test_one_gpu_runs_notebooks_in_turn_and_a_multi_gpu_lab_on_what_there_is():
    fake = FakeExecutor({})
    gpu_notebooks.run_all([Path(n) for n in ("00_a.ipynb", "06_ddp.ipynb")], [0], fake, 10, 30, clock=FakeClock())
    assert sorted(g for _, gs, _ in fake.calls for g in gs) == [0, 0] and fake.peak == 1


def test_timeouts_and_the_time_limit():
    clock = FakeClock()  # the run's time is the notebooks' time only, whatever the machine's load
    fake = FakeExecutor({"00": 100, "01": 3, "02": 1}, clock)
    states = gpu_notebooks.run_all([Path(n) for n in ("00_a.ipynb", "01_b.ipynb", "02_c.ipynb")], [0], fake,
                                   notebook_timeout_s=2.0, time_limit_s=3.0, clock=clock)
    assert states["00_a.ipynb"]["error"] == "timeout"  # its own timeout: 2 s of its 100 s
    assert fake.calls[0][2] == 2.0 and fake.calls[1][2] == 1.0  # the next gets what is left of the run
    assert states["01_b.ipynb"]["error"] == "timeout"
    assert states["02_c.ipynb"]["state"] == "not run" and "time limit" in states["02_c.ipynb"]["error"]


def test_gpus_needed_and_cpu_share():
    assert gpu_notebooks.gpus_needed(Path("06_x.ipynb"), 8) == 2
    assert gpu_notebooks.gpus_needed(Path("06_x.ipynb"), 1) == 1
    assert gpu_notebooks.gpus_needed(Path("03_x.ipynb"), 8) == 1
    share = gpu_notebooks.cpu_share([0], 2)
    assert share and set(share) <= set(gpu_notebooks.os.sched_getaffinity(0))


def test_claims_are_read_in_the_labs_words_and_only_a_failed_one_fails(capsys):
    from coursekit.labs.kit import claims

    claims.check_claim("a", True, "1")
    claims.check_claim("b", False, "2", strict=False)
    claims.check_claim("c", False, "", applies=False, why_not="no GPU")
    try:
        claims.check_claim("d", False, "4")
    except AssertionError:
        pass
    read = gpu_notebooks.read_claims(capsys.readouterr().out.splitlines())
    assert [(c["verdict"], c["statement"]) for c in read] == [
        (claims.HOLDS, "a"), (claims.NOT_SEEN, "b"), (claims.NOT_CHECKED, "c"), (claims.FAILS, "d")]
    assert set(gpu_notebooks.VERDICTS) == {claims.HOLDS, claims.FAILS, claims.NOT_CHECKED, claims.NOT_SEEN}
    assert [c["statement"] for c in read if c["verdict"] == gpu_notebooks.FAILED_VERDICT] == ["d"]


def job_log(course, job_folder, name):
    """The path of a job's log in a course folder, its folder made."""
    path = course / "jobs" / job_folder / name
    path.parent.mkdir(parents=True)
    return path


def test_the_stderr_of_a_failed_job_is_kept_and_a_clean_one_is_not(tmp_path):
    """A crashed loader worker's message comes before the traceback's last lines that the notebook shows."""
    course = tmp_path / "course"
    failed, clean = job_log(course, "ada-load", "2153_0_log.err"), job_log(course, "ada-prof", "2154_0_log.err")
    failed.write_text("x" * 50_000 + "terminate called after throwing an instance of 'c10::Error'\n"
                      "RuntimeError: DataLoader worker (pid 2534) is killed by signal: Aborted.\n")
    clean.write_text("coursekit.train: completed after 40 steps\n")
    text = gpu_notebooks.failed_job_logs(course)
    assert text.count("--- failed job's stderr") == 1 and "jobs/ada-load/2153_0_log.err" in text
    assert "terminate called" in text and "ada-prof" not in text
    assert text.count("x") < gpu_notebooks.KEPT_LOG_BYTES < 50_000  # the end only
    assert gpu_notebooks.failed_job_logs(tmp_path / "nothing") == ""


def test_a_job_log_that_cannot_be_read_is_named_and_the_others_still_read(tmp_path):
    course = tmp_path / "course"
    unreadable, failed = job_log(course, "ada-a", "1_0_log.err"), job_log(course, "ada-b", "2_0_log.err")
    unreadable.mkdir()  # a folder where a file is expected: open() raises, as for a file removed meanwhile
    failed.write_text("Traceback (most recent call last):\nValueError: bad\n")
    text = gpu_notebooks.failed_job_logs(course)
    assert "jobs/ada-a/1_0_log.err: not read" in text and "ValueError: bad" in text


def test_a_run_longer_than_seven_minutes_is_said_to_be_over_its_budget(tmp_path):
    record = tmp_path / "gpu_notebooks_09.json"
    machine = {"gpus": 1, "gpu_name": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0"}
    runs = [{"notebook": name, "wall_s": wall, "passed": True, "error": None, "claims": []}
            for name, wall in (("09_race.ipynb", 430.0), ("02_batch_size.ipynb", 312.5))]
    record.write_text(json.dumps({"machine": machine, "command": "x", "date": "2026-11-29", "notebooks": runs}))
    report = tmp_path / "REPORT.md"
    gpu_notebooks.write_report([record], report)
    rows = {line.split(" | ")[0]: line for line in report.read_text().splitlines() if line.startswith("| 0")}
    assert "7.2 min (over the 7-min budget)" in rows["| 09_race.ipynb"]
    assert "over" not in rows["| 02_batch_size.ipynb"]
