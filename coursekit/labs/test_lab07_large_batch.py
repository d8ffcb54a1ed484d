import shlex

import pytest

from coursekit.labs import lab07_large_batch as lb
from coursekit.labs import lab_settings
from coursekit.labs.kit.results import ResultsTable
from coursekit.metrics import read_metrics, summary
from coursekit.train.config import TrainConfig, parse_args
from coursekit.train.sweep import main as sweep_main
from coursekit.train.sweep import run_folder, split_groups


def test_steps_to_loss_averages_over_a_window_of_samples():
    records = [{"step": i + 1, "loss": loss} for i, loss in enumerate([2.0, 1.0, 0.6, 0.9, 0.5, 0.5])]
    assert lb.steps_to_loss(records, batch=256, target=0.6) == 3  # window of one step at batch 256
    assert lb.steps_to_loss(records, batch=128, target=0.6) == 6  # two steps: (0.6+0.9)/2 > 0.6 at step 4
    assert lb.steps_to_loss(records, batch=256, target=0.1) is None


def test_the_critical_batch_fit_recovers_known_parameters():
    curve = ResultsTable([{"batch_size": b, "steps_to_target": 100 * (1 + 300 / b)} for b in (16, 64, 256, 1024)])
    fit = lb.fit_critical_batch(curve)
    assert fit["s_min"] == pytest.approx(100) and fit["b_crit"] == pytest.approx(300)
    perfect = ResultsTable([{"batch_size": b, "steps_to_target": 1000 / b} for b in (16, 32, 64)])
    assert lb.fit_critical_batch(perfect)["b_crit"] > 1e6 or lb.fit_critical_batch(perfect)["s_min"] <= 1e-9
    assert lb.fit_critical_batch(ResultsTable([{"batch_size": 16, "steps_to_target": 5}])) is None


def test_b_simple_is_the_median_up_to_the_target():
    series = [{"step": 1, "loss": 2.0, "b_simple": 10.0}, {"step": 2, "loss": 1.0, "b_simple": 1000.0},
              {"step": 3, "loss": 0.5, "b_simple": 30.0}, {"step": 4, "loss": 0.4, "b_simple": 5000.0}]
    assert lb.b_simple_at_loss(series, 0.6) == 30.0
    assert lb.b_simple_at_loss(series, 0.1) == pytest.approx((30.0 + 1000.0) / 2)
    assert lb.b_simple_at_loss([], 0.6) is None


def _row(method, batch, seed, acc, budget="epochs"):
    return {"experiment": "table", "method": method, "batch_size": batch, "budget": budget, "seed": seed,
            "status": "completed", "val_acc": acc, "total_time_s": 1.0}


def test_cells_are_mean_and_std_over_seeds_and_pairs_go_seed_by_seed():
    table = ResultsTable([_row("sgd", 16, 0, 0.7), _row("sgd", 16, 1, 0.8), _row("sgd", 16, 2, 0.9),
                          _row("sgd", 256, 0, 0.5), _row("sgd", 256, 1, 0.7), _row("sgd", 256, 2, 0.6)])
    cells = lb.cells(table)
    small = lb.cell(cells, "sgd", 16)
    assert small["val_acc"] == pytest.approx(0.8) and small["val_acc_std"] == pytest.approx(0.1)
    assert small["seeds"] == 3 and small["diverged"] == 0
    gap, std = lb.paired(table, {"batch_size": 16}, {"batch_size": 256})
    assert gap == pytest.approx(0.2) and std == pytest.approx(0.1)


def test_the_plan_has_every_cell_with_three_seeds_and_equal_steps():
    s = lab_settings("07", "cpu")
    runs = lb.plan(s)
    keys = [tuple(r.tags[t] for t in lb.TAGS) for r in runs]
    assert len(keys) == len(set(keys))
    table_runs = [r for r in runs if r.tags["experiment"] == "table"]
    assert len(table_runs) == len(s.methods) * 3 * len(s.seeds)
    small_steps = s.base.epochs * -(-lb.train_samples(s.base) // s.small_batch)
    assert {r.config.steps for r in table_runs if r.tags["budget"] == "steps"} == {small_steps}
    assert all(r.config.batch_size == s.large_batch for r in table_runs if r.tags["budget"] == "steps")
    assert sum(r.config.grad_noise_batches > 0 for r in runs) == 1


def test_a_sweep_command_parses_back_to_the_configs():
    configs = [TrainConfig(batch_size=16, lr=0.1), TrainConfig(batch_size=256, optimizer="lars", seed=2)]
    words = shlex.split(lb.sweep_command(configs))
    assert words[:2] == ["-m", "coursekit.train.sweep"]
    assert [parse_args(group) for group in split_groups(words[2:])] == configs


def test_the_sweep_entry_point_runs_each_group_into_its_folder(tmp_path):
    tiny = ["--num-samples", "64", "--image-size", "4", "--num-classes", "2", "--batch-size", "16", "--steps", "2",
            "--device", "cpu", "--progress", "off", "--out", str(tmp_path)]
    assert sweep_main([*tiny, "--next", *tiny, "--seed", "1"]) == 0
    for index in (0, 1):
        assert summary(read_metrics(run_folder(tmp_path, index)))["status"] == "completed"
    assert sweep_main([*tiny, "--next", *tiny, "--lr", "-1"]) == 2  # checked before any run
    assert not run_folder(tmp_path / "x", 0).exists()


def test_the_lab_names_separator_and_run_folders_as_the_sweep_engine_does(tmp_path):
    from coursekit.train import sweep

    assert lb.SEPARATOR == sweep.SEPARATOR
    assert lb.run_folder(tmp_path, 7) == sweep.run_folder(tmp_path, 7)


def test_planning_the_labs_jobs_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from coursekit import labs; from coursekit.labs import lab07_large_batch as lb; "
            "lb.sweep_command([r.config for r in lb.plan(labs.lab_settings('07', 'cpu'))]); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0


def test_runs_are_dealt_so_that_the_jobs_cost_alike_in_the_plans_order():
    assert lb.deal([5, 1, 1, 1, 1, 1], 2) == [[0], [1, 2, 3, 4, 5]]
    assert lb.deal([1, 1, 1], 5) == [[0], [1], [2]]  # no empty job
    for profile in ("cpu", "gpu"):
        s = lab_settings("07", profile)
        runs = lb.plan(s)
        costs = [lb.run_cost(r.config) for r in runs]
        chunks = lb.deal(costs, -(-len(runs) // s.runs_per_job))
        assert sorted(i for chunk in chunks for i in chunk) == list(range(len(runs)))
        assert all(chunk == sorted(chunk) for chunk in chunks)
        loads = [sum(costs[i] for i in chunk) for chunk in chunks]
        assert max(loads) <= 1.05 * min(loads), loads


def test_a_runs_cost_grows_with_its_steps_batch_and_noise_probes():
    s = lab_settings("07", "cpu")
    runs = {(r.tags["experiment"], r.tags["batch_size"], r.tags["budget"]): r.config for r in lb.plan(s)}
    small, large = runs["table", s.small_batch, "epochs"], runs["table", s.large_batch, "epochs"]
    steps, noise = runs["table", s.large_batch, "steps"], runs["noise", s.small_batch, "epochs"]
    assert lb.run_cost(large) < lb.run_cost(small) < lb.run_cost(steps)  # 20, 150 and 150 large steps
    assert lb.run_cost(noise) > 2 * lb.run_cost(small)


class FolderJob:
    def __init__(self, job_id, run_dir):
        self.job_id, self.run_dir, self.scheduler, self.state = job_id, run_dir, "local", "COMPLETED"

    def done(self):
        return True


def test_results_read_every_run_of_every_job_into_one_row(tmp_path):
    from coursekit.metrics import MetricsWriter

    runs = [lb.Run({"experiment": "table", "method": "sgd", "batch_size": 16, "budget": "epochs", "seed": seed},
                   TrainConfig(seed=seed)) for seed in range(3)]
    jobs = [FolderJob("1", tmp_path / "1"), FolderJob("2", tmp_path / "2")]
    where = [(0, 0), (1, 0), (0, 1)]
    for seed, (job, position) in enumerate(where):
        with MetricsWriter(lb.run_folder(jobs[job].run_dir, position)) as writer:
            writer.write("summary", status="completed", val_acc=0.5 + seed / 10, total_time_s=1.0)
    table = lb.results(lb.LabSweep(runs, jobs, where), timeout_s=5)
    assert table.column("seed") == [0, 1, 2] and table.column("job_id") == ["1", "2", "1"]
    assert table.column("val_acc") == [0.5, 0.6, 0.7]
