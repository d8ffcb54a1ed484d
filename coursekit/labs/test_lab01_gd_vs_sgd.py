"""Lab 01 helpers: the surface is the engine's, paths come from step records."""

import numpy as np
import pytest

from coursekit.labs import lab01_gd_vs_sgd as gd
from coursekit.labs.kit import experiments, failures
from coursekit.labs.kit.results import ResultsTable
from coursekit.train.config import TrainConfig


def test_line_points_are_the_engines_and_the_fit_finds_the_line():
    x, y = gd.line_points(TrainConfig(dataset="line", model="linear", num_samples=500))
    assert x.shape == y.shape == (500,)
    w, b = gd.best_fit(x, y)
    assert w == pytest.approx(10, abs=0.5) and b == pytest.approx(2, abs=0.3)
    assert gd.mse(x, y, w, b) < gd.mse(x, y, w + 1, b) and gd.mse(x, y, w, b) < gd.mse(x, y, w, b - 1)


def test_mse_broadcasts_over_grids():
    x, y = np.array([0.0, 1.0]), np.array([1.0, 3.0])
    grid = gd.mse(x, y, np.array([[2.0, 0.0]]), np.array([[1.0, 0.0]]))
    assert grid.shape == (1, 2) and grid[0, 0] == 0.0 and grid[0, 1] == pytest.approx(5.0)


def test_paths_and_noise_rows_from_step_records():
    steps = [{"step": i, "params": {"weight": [float(i)], "bias": [0.5]}, "grad_noise_var": 4.0 / (i + 1)}
             for i in range(3)]
    row = {"batch_size": 2, "steps": steps, "job_id": "1", "state": "COMPLETED", "config": TrainConfig(batch_size=2)}
    table = gd.add_paths(ResultsTable([row]),
                         np.array([1.0]), np.array([1.5]))
    assert table[0]["path"].tolist() == [[0.0, 0.5], [1.0, 0.5], [2.0, 0.5]]
    assert table[0]["path_loss"].tolist() == [1.0, 0.0, 1.0]
    assert table[0]["final_loss"] == 1.0
    noise = gd.noise_rows(table)[0]
    assert noise["grad_noise_var"] == 4.0 and noise["batch_size"] == 2  # the first measurement


def test_without_replacement_factor():
    assert gd.without_replacement_factor(1, 100) == 1.0
    assert gd.without_replacement_factor(100, 100) == 0.0


# ------------------------------------------------------------------ tiny runs in one job (labs 01, 02, 05)


class OneJob:
    """Just enough of a Job: a folder, a final state, a stderr."""

    scheduler, name = "local", "t"

    def __init__(self, run_dir, state="COMPLETED", job_id="7"):
        self.run_dir, self.state, self.job_id = run_dir, state, job_id

    def done(self):
        return True

    def tail(self, n=10, stream="out"):
        return "coursekit: the command exited with code 1" if stream == "err" else ""


def write_run(folder, status="completed"):
    from coursekit.metrics import MetricsWriter

    with MetricsWriter(folder) as writer:
        writer.write("start", config={})
        writer.write("step", step=1, epoch=1, loss=1.0, data_time_s=0.01, compute_time_s=0.02)
        if status:
            writer.write("summary", status=status, total_time_s=1.0)


def fake_submit_jobs(monkeypatch, job):
    import coursekit.jobs

    submitted = []
    monkeypatch.setattr(coursekit.jobs, "submit_jobs",
                        lambda command, **options: submitted.append((command, options)) or [job])
    return submitted


def test_one_job_makes_every_run_with_the_engines_sweep_command(tmp_path, monkeypatch):
    import shlex

    from coursekit.train import sweep
    from coursekit.train.config import parse_args

    submitted = fake_submit_jobs(monkeypatch, OneJob(tmp_path))
    first, second = [TrainConfig(batch_size=b) for b in (1, 2, 3)], [TrainConfig(lr=0.5, log_params=True)]
    a, b = gd.submit_sweeps([first, second], names=["ada-gd", "ada-noise"], one_job=True, one_at_a_time=True,
                            timeout_s=9, time_max="00:05:00", env={"OMP_NUM_THREADS": "1"})
    (command, options), = submitted
    words = shlex.split(command)
    assert words[:2] == ["-m", "coursekit.train.sweep"] and experiments.SWEEP_SEPARATOR == sweep.SEPARATOR
    assert [parse_args(group) for group in sweep.split_groups(words[2:])] == first + second
    assert options == {"n_gpu": 1, "name": "ada-gd", "time_max": "00:05:00", "env": {"OMP_NUM_THREADS": "1"}}
    assert (a.name, a.configs, b.name, b.configs) == ("ada-gd", first, "ada-noise", second)
    assert [run.run_dir for run in a.jobs + b.jobs] == [sweep.run_folder(tmp_path, i) for i in range(4)]
    assert {run.job_id for run in a.jobs + b.jobs} == {"7"}
    with pytest.raises(ValueError, match="one name each"):
        gd.submit_sweeps([first, second], names=["ada-gd"])


def test_one_job_gives_a_row_per_run_each_with_its_own_state(tmp_path, monkeypatch):
    write_run(tmp_path / "run000")
    write_run(tmp_path / "run001", status="failed")  # the job failed because its second run did
    fake_submit_jobs(monkeypatch, OneJob(tmp_path, state="FAILED"))
    table = gd.run_sweep([TrainConfig(batch_size=4), TrainConfig(batch_size=8), TrainConfig(batch_size=16)],
                         name="ada-bs", title="sweep", one_job=True, timeout_s=5)
    assert table.title == "sweep" and table.column("batch_size") == [4, 8, 16]  # the varied option first
    assert table.column("state") == ["COMPLETED", "FAILED", "FAILED"]
    assert table.column("status") == ["completed", "failed", None] and len(table[0]["steps"]) == 1
    assert table[0]["config"] == TrainConfig(batch_size=4) and table.column("job_id") == ["7"] * 3
    assert [f.state for f in failures.report_failures(table)] == ["FAILED", "FAILED"]


def test_without_one_job_each_run_is_a_job_of_labs_submit_sweep(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(experiments, "submit_sweep", lambda configs, **options: calls.append((configs, options)) or "a sweep")
    first, second = [TrainConfig(batch_size=1)], [TrainConfig(lr=0.5)]
    assert gd.submit_sweeps([first, second], names=["ada-gd", "ada-noise"], one_at_a_time=True) == ["a sweep"] * 2
    assert calls == [(first, {"name": "ada-gd", "one_at_a_time": True}),
                     (second, {"name": "ada-noise", "one_at_a_time": True})]


def test_labs_01_02_and_05_share_the_kits_one_job_sweeps():
    from coursekit.labs import lab02_batch_size, lab05_data_loading

    for lab in (gd, lab02_batch_size, lab05_data_loading):
        assert (lab.SweepRun, lab.submit_sweeps, lab.run_sweep) == (
            experiments.SweepRun, experiments.submit_sweeps, experiments.run_sweep)
    assert experiments.SWEEP_RUN_FOLDER.format(3) == "run003"


def test_writing_the_command_imports_no_engine_into_the_kernel():
    import subprocess
    import sys

    code = ("import sys; from coursekit.labs import lab01_gd_vs_sgd as gd, lab02_batch_size, lab05_data_loading; "
            "import coursekit.jobs; gd.SweepRun(type('J', (), {'run_dir': '.'})(), 1).run_dir; gd.settings('cpu'); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_runs_in_words_come_from_the_settings():
    for profile in ("cpu", "gpu"):
        s = gd.settings(profile)
        text = gd.batch_sizes_text(s["points"], s["batch_sizes"])
        mini = [b for b in s["batch_sizes"] if 1 < b < s["points"]]
        assert f"B = n = {s['points']}" in text and text.endswith(", ".join(f"B = {b}" for b in mini))


def test_gpu_jobs_run_on_the_gpu_they_hold_and_cpu_jobs_on_the_cpu():
    assert gd.settings("gpu")["base"].device == gd.settings("gpu")["noise_base"].device == "auto"
    assert gd.settings("cpu")["base"].device == "cpu"


def test_the_step_time_model_goes_through_both_measurements():
    fixed, per_point = gd.step_time_model(t_full=2.26e-3, t_one=0.34e-3, points=512)
    assert fixed + per_point == pytest.approx(0.34e-3) and fixed + 512 * per_point == pytest.approx(2.26e-3)


def test_the_gpu_budget_gives_the_b1_run_its_minutes():
    """B = 1 makes n steps per epoch: on a GPU, where every step pays a fixed cost, it is the long run."""
    s = gd.settings("gpu")
    assert "B = 1 path: 1 x 2 min" in s["budget"]["estimate"]
    assert s["budget"]["jobs"] == len(s["batch_sizes"]) + len(s["noise_batch_sizes"]) + 1


def test_the_least_squares_star_is_drawn_above_the_paths():
    x, y = np.array([0.0, 1.0, 2.0]), np.array([2.0, 12.0, 22.0])
    path = np.array([[0.0, 0.0], [10.0, 2.0]])
    figure = gd.surface_figure(x, y, ResultsTable([{"batch_size": 1, "path": path}]))
    lines = {line.get_label(): line for line in figure.axes[0].get_lines()}
    assert lines["least squares"].get_zorder() > lines["batch_size=1"].get_zorder()
