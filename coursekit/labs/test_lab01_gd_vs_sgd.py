"""Lab 01 helpers: the surface is the engine's, paths come from step records."""

import numpy as np
import pytest

from coursekit.labs import lab01_gd_vs_sgd as gd
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
