"""Experiments: commands, rows from metrics, OOM detection, waiting, and one real local job."""

import shlex
from pathlib import Path

import pytest

from coursekit.labs.kit import experiments, progress
from coursekit.metrics import MetricsWriter, read_metrics
from coursekit.train.config import TrainConfig, parse_args


class StandInJob:
    """Just enough of a Job for the helpers that only read state, logs and metrics."""

    def __init__(self, job_id="1", state="COMPLETED", err="", records=(), done_after=0):
        self.job_id, self._state, self._err, self._records = job_id, state, err, list(records)
        self.scheduler, self.name, self._polls, self._done_after = "local", "t", 0, done_after

    @property
    def state(self):
        return self._state if self.done() else "RUNNING"

    def done(self):
        self._polls += 1
        return self._polls > self._done_after

    def tail(self, n=10, stream="out"):
        return self._err if stream == "err" else ""

    def metrics(self):
        return self._records


def write_run(path, steps=4, epochs=2):
    with MetricsWriter(path) as writer:
        writer.write("start", config={})
        for step in range(1, steps + 1):
            writer.write("step", step=step, epoch=1, loss=1.0 / step, data_time_s=0.01 * step, compute_time_s=0.03,
                         mem_allocated_peak_mb=100.0 + step, images_per_s_global=10.0 * step,
                         images_per_cpu_s=[50.0, 20.0, 40.0, 30.0][(step - 1) % 4])
        for epoch in range(1, epochs + 1):
            writer.write("epoch", epoch=epoch, val_acc=0.5 + 0.1 * epoch, val_loss=1.0, epoch_time_s=1.0)
        writer.write("summary", status="completed", images_per_s=123.0, total_time_s=5.0, val_acc=0.7, val_loss=0.9,
                     device_name="CPU")
    return read_metrics(path)


def test_engine_command_round_trips_through_the_engine_parser():
    config = TrainConfig(model="linear", dataset="line", batch_size=1, lr=0.2, log_params=True, momentum=0.0)
    words = shlex.split(experiments.engine_command(config))
    assert words[:2] == ["-m", "coursekit.train"]
    assert parse_args(words[2:]) == config


def test_varying_fields_in_config_order():
    base = TrainConfig()
    configs = [base.replace(batch_size=b, lr=0.1) for b in (8, 16)] + [base.replace(batch_size=8, lr=0.2)]
    assert experiments.varying_fields(configs) == ["batch_size", "lr"]
    assert experiments.varying_fields(configs[:1]) == []


def test_summarize_run_reads_every_figure(tmp_path):
    run = experiments.summarize_run(write_run(tmp_path))
    assert run["status"] == "completed" and run["val_acc"] == 0.7
    # images / wall time over steps 2..4 (windows of 0.05, 0.06, 0.07 s at 20, 30, 40 img/s), not the summary's 123
    assert run["images_per_s"] == pytest.approx((20 * 0.05 + 30 * 0.06 + 40 * 0.07) / 0.18)
    # the first step record is warm-up: data 0.02+0.03+0.04 over (0.09 + 3 * 0.03)
    assert run["data_fraction"] == pytest.approx(0.09 / 0.18)
    assert run["data_time_s"] == pytest.approx(0.03) and run["step_time_s"] == pytest.approx(0.06)
    assert run["peak_mem_mb"] == 104.0 and run["train_loss"] == 0.25
    assert run["images_per_s_median"] == 30.0  # median of steps 2..4
    assert run["images_per_cpu_s_median"] == 30.0  # per processor-second, median of steps 2..4 (not step 1's 50)
    assert len(run["steps"]) == 4 and len(run["epochs"]) == 2


def test_summarize_run_of_a_run_that_wrote_nothing():
    run = experiments.summarize_run([])
    assert run["status"] is None and run["data_fraction"] is None and run["steps"] == []


@pytest.mark.parametrize("state, err, oom", [
    ("OUT_OF_MEMORY", "", True),
    ("FAILED", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
    ("FAILED", "ValueError: bad config", False),
    ("COMPLETED", "", False),
])
def test_is_oom_reads_state_and_err(state, err, oom):
    assert experiments.is_oom(StandInJob(state=state, err=err)) is oom


def test_job_row_has_varied_options_first(tmp_path):
    config = TrainConfig(batch_size=32)
    row = experiments.job_row(StandInJob(job_id="7", records=write_run(tmp_path)), config, ["batch_size"])
    assert list(row)[:4] == ["batch_size", "job_id", "state", "oom"]
    assert row["batch_size"] == 32 and row["config"] is config


def test_wait_all_polls_until_done_and_times_out():
    jobs = [StandInJob(done_after=2), StandInJob(done_after=0)]
    assert experiments.wait_all(jobs, timeout_s=10) == ["COMPLETED", "COMPLETED"]
    with pytest.raises(TimeoutError, match="still running"):
        experiments.wait_all([StandInJob(done_after=10**6)], timeout_s=0.3)


def test_wait_until_training_raises_when_the_job_ends_first():
    with pytest.raises(RuntimeError, match="ended"):
        experiments.wait_until_training(StandInJob(records=[]), timeout_s=5)


def test_bad_sweeps_submit_nothing():
    with pytest.raises(ValueError, match="configs is empty"):
        experiments.submit_sweep([], name="x")
    with pytest.raises(ValueError, match=r"configs\[1\] is a dict"):
        experiments.submit_sweep([TrainConfig(), {"lr": 1}], name="x")
    with pytest.raises(ValueError, match="name is empty"):
        experiments.submit_sweep([TrainConfig()], name="")
    with pytest.raises(ValueError, match="differ in length"):
        experiments.collect([StandInJob()], [])


def test_a_real_local_job_becomes_a_row(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    config = TrainConfig(model="linear", dataset="line", num_samples=32, batch_size=16, epochs=1, progress="off")
    table = experiments.run_sweep([config, config.replace(batch_size=8)], name="labs-test", timeout_s=120)
    assert table.column("batch_size") == [16, 8]
    assert table.column("state") == ["COMPLETED", "COMPLETED"]
    assert table.column("status") == ["completed", "completed"]
    assert [len(row["steps"]) for row in table] == [2, 4]


def test_a_sweep_on_the_local_site_of_a_gpu_machine_runs_one_job_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.labs.kit import experiments

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU, as the local site sees it
    assert experiments.jobs_share_gpus("local")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not experiments.jobs_share_gpus("local")  # CPU jobs may share the cores (the cpu profile)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert not experiments.jobs_share_gpus("slurm")  # a cluster gives every job its own GPUs


class RunsJob(StandInJob):
    """A job making several runs one after the other: each poll ends its next run (writes its summary)."""

    def __init__(self, folders, **kwargs):
        super().__init__(**kwargs)
        self.folders, self.ended = list(folders), 0

    def done(self):
        if self.ended < len(self.folders):
            with MetricsWriter(self.folders[self.ended]) as writer:
                writer.write("start", config={})
                writer.write("summary", status="completed")
            self.ended += 1
        return self.ended == len(self.folders) and super().done()


def test_run_ended_reads_the_summary_record(tmp_path):
    assert not experiments.run_ended(tmp_path / "none")
    with MetricsWriter(tmp_path / "running") as writer:
        writer.write("start", config={})
    assert not experiments.run_ended(tmp_path / "running")
    write_run(tmp_path / "ended")
    assert experiments.run_ended(tmp_path / "ended")


def test_wait_runs_counts_runs_as_they_end_while_the_jobs_still_run(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "LOCAL_POLL_S", 0.001)
    monkeypatch.setattr(experiments, "METRICS_POLL_S", 0.0)
    seen = []

    class Recording(experiments.RunsBar):
        def done(self, count):
            seen.append(count)
            super().done(count)

    monkeypatch.setattr(experiments, "RunsBar", Recording)
    folders = [[tmp_path / f"job{j}" / f"run{i}" for i in range(3)] for j in range(2)]
    jobs = [RunsJob(folders[0], job_id="1"), RunsJob(folders[1], job_id="2")]
    assert experiments.wait_runs(jobs, folders[0] + folders[1], timeout_s=10, desc="lab") == ["COMPLETED"] * 2
    assert seen == sorted(seen) and seen[-1] == 6
    assert {2, 4} <= set(seen)  # counted run by run while neither job had ended, not job by job


def test_wait_runs_ends_full_when_the_jobs_end_without_every_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "LOCAL_POLL_S", 0.001)
    bars = []
    monkeypatch.setattr(experiments, "RunsBar",
                        lambda total, desc: bars.append(experiments.JobsBar(total, desc)) or bars[-1])
    killed = StandInJob(state="FAILED", done_after=1)  # its runs wrote nothing
    assert experiments.wait_runs([killed], [tmp_path / "a", tmp_path / "b"], timeout_s=10) == ["FAILED"]
    assert bars[0].total == 2 and bars[0].count == 2


def test_runs_bar_counts_runs(monkeypatch):
    monkeypatch.setattr(progress, "redraws_seen", lambda: True)  # as in a notebook: pytest's stderr is no tty
    with experiments.RunsBar(4, "lab 07") as bar:
        assert bar._bar is not None and bar._bar.unit == experiments.RUN_UNIT
        bar.done(3)
        assert bar._bar.n == 3
    assert experiments.RunsBar(2, enabled=False)._bar is None


def test_one_job_per_gpu_count_makes_every_run_in_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu profile of lab 06's scaling sweep: one job per GPU count, each making every configuration's run,
    one job at a time; one row per (count, configuration), GPU counts outer, as submit_sweep's."""
    import json

    import coursekit.jobs

    submitted: list[tuple[int, bool]] = []  # (GPU count, the job before it was waited for)
    jobs: list = []

    class Job:
        def __init__(self, number: int) -> None:
            self.job_id, self.run_dir, self.state, self.scheduler = str(number), tmp_path / str(number), "COMPLETED", "local"
            self.asked = 0

        def done(self) -> bool:
            self.asked += 1
            return True

        def metrics(self) -> list:
            return []

        def tail(self, *_: object, **__: object) -> str:
            return ""

    def submit_jobs(command: str, n_gpu: int, **options: object) -> list[Job]:
        submitted.append((n_gpu, bool(jobs) and jobs[-1].asked > 0))
        jobs.append(Job(len(jobs) + 1))
        for index in range(2):  # what the engine's sweep writes for each run
            folder = Path(jobs[-1].run_dir) / experiments.SWEEP_RUN_FOLDER.format(index)
            folder.mkdir(parents=True)
            (folder / "metrics.jsonl").write_text(json.dumps({"kind": "summary", "status": "completed"}) + "\n")
        assert command.startswith(experiments.SWEEP_ENGINE) and command.count(experiments.SWEEP_SEPARATOR) == 1
        return jobs[-1:]

    monkeypatch.setattr(coursekit.jobs, "submit_jobs", submit_jobs)
    table = experiments.run_sweep([TrainConfig(batch_size=16), TrainConfig(batch_size=32)], name="ada-scale",
                                  n_gpu=[1, 2], one_job=True, one_at_a_time=True, timeout_s=5)
    assert submitted == [(1, False), (2, True)]  # the 2-process job started once the first had ended
    assert [(r["n_gpu"], r["batch_size"], r["job_id"], r["state"]) for r in table] == [
        (1, 16, "1", "COMPLETED"), (1, 32, "1", "COMPLETED"), (2, 16, "2", "COMPLETED"), (2, 32, "2", "COMPLETED")]
    with pytest.raises(ValueError, match="n_gpu"):
        experiments.run_sweep([TrainConfig()], name="ada-scale", n_gpu=[0], one_job=True)


def test_a_run_of_a_one_job_sweep_is_done_when_its_run_ends_while_the_job_goes_on(tmp_path, monkeypatch):
    """Lab 02 puts its batch sweep and its memory sweep into one job: the batch sweep's results come while the
    job makes the memory runs, and only the run that ran out of memory is marked so (the job's .err holds it)."""
    monkeypatch.setattr(experiments, "METRICS_POLL_S", 0.0)
    job = StandInJob(state="FAILED", err="torch.OutOfMemoryError: CUDA out of memory.", done_after=10**6)
    job.run_dir = tmp_path
    runs = [experiments.SweepRun(job, index) for index in range(3)]
    write_run(runs[0].run_dir)
    with MetricsWriter(runs[1].run_dir) as writer:
        writer.write("summary", status="failed", error="OutOfMemoryError: CUDA out of memory. Tried to allocate 8 GiB")
    assert [run.done() for run in runs] == [True, True, False]  # the third has not ended: the job still runs
    assert [run.state for run in runs] == ["COMPLETED", "FAILED", "RUNNING"]
    assert [experiments.is_oom(run) for run in runs] == [False, True, False]  # the third: no OOM state while running
    job._done_after = 0  # the job ends (FAILED: a run failed) before the third run wrote anything (killed)
    assert runs[2].done() and runs[2].state == "FAILED" and runs[0].state == "COMPLETED"
    assert experiments.is_oom(runs[2])  # no record of its own: the job's .err says it


def test_a_sweep_in_one_job_counts_its_runs_as_they_end(tmp_path, monkeypatch):
    monkeypatch.setattr(experiments, "LOCAL_POLL_S", 0.001)
    monkeypatch.setattr(experiments, "METRICS_POLL_S", 0.0)
    folders = [tmp_path / experiments.SWEEP_RUN_FOLDER.format(i) for i in range(4)]

    class SlowRunsJob(RunsJob):  # ends its next run every third poll
        def done(self):
            self._polls += 1
            return super().done() if self._polls % 3 == 0 else False

    job = SlowRunsJob(folders, job_id="1")
    job.run_dir = tmp_path
    seen = []

    class Recording(experiments.RunsBar):
        def done(self, count):
            seen.append(count)
            super().done(count)

    monkeypatch.setattr(experiments, "RunsBar", Recording)
    first = experiments.Sweep("ada-bs", [TrainConfig()] * 2, [experiments.SweepRun(job, i) for i in range(2)])
    assert first.wait(timeout_s=10) == ["COMPLETED", "COMPLETED"]
    assert 1 in seen and job.ended == 2  # the bar moved run by run; its runs ended before the job's next two


def test_runs_that_ended_before_the_wait_count_but_not_in_the_rate(monkeypatch):
    """A sweep collected late (its runs went while the participant read): the time left is that of the runs that
    end during the wait, not of the three that had ended before it (which would make it look near 0)."""
    monkeypatch.setattr(progress, "redraws_seen", lambda: True)
    with experiments.RunsBar(4, "memory") as bar:
        bar.done(3)
        assert bar._bar.n == bar._bar.initial == 3
        bar.done(4)
        assert bar._bar.n == 4 and bar._bar.initial == 3
    with experiments.RunsBar(4, "memory") as bar:
        bar.done(0)
        bar.done(2)
        assert bar._bar.n == 2 and bar._bar.initial == 0
