"""Plots are drawn from tables without pyplot state."""

import numpy as np

from coursekit.labs import (
    lab01_gd_vs_sgd as gradient_descent,
)
from coursekit.labs import (
    lab02_batch_size as batch_size,
)
from coursekit.labs import (
    lab03_gpu_memory as anatomy,
)
from coursekit.labs.kit import plots
from coursekit.labs.kit.results import ResultsTable
from coursekit.train.config import TrainConfig
from coursekit.train.memory import estimate_memory
from coursekit.train.models import build_model


def sweep_table():
    steps = [{"step": s, "loss": 1 / s, "params": {"weight": [s / 10], "bias": [0.1]}} for s in range(1, 6)]
    epochs = [{"epoch": e, "val_acc": 0.2 * e, "epoch_time_s": 1.0} for e in (1, 2)]
    return ResultsTable([{"batch_size": b, "images_per_s": 100.0 * b, "steps": steps, "epochs": epochs,
                          "peak_mem_gb": b / 10, "oom": b > 16} for b in (4, 16, 64)])


def test_generic_plots_return_figures_with_their_lines():
    table = sweep_table()
    figure = plots.curves(table, "steps", "step", "loss", ["batch_size"])
    assert len(figure.axes[0].lines) == 3
    figure = plots.scatter_line(table, "batch_size", "images_per_s", logx=True)
    assert figure.axes[0].get_xscale() == "log"
    assert len(plots.bars(["a", "b"], [1.0, 2.0]).axes[0].patches) == 2
    figure = plots.stacked_bars(["x"], {"p": [1.0], "q": [2.0]}, limit=4.0)
    assert len(figure.axes[0].patches) == 2 and len(figure.axes[0].lines) == 1


def test_lab_figures():
    table = sweep_table()
    gradient_descent.add_paths(table, np.array([0.0, 1.0]), np.array([2.0, 12.0]))
    assert gradient_descent.surface_figure(np.array([0.0, 1.0]), np.array([2.0, 12.0]), table).axes
    figure = batch_size.memory_figure(table.add_column("peak_mem_gib", lambda r: r["peak_mem_gb"]), "memory")
    assert [line.get_label() for line in figure.axes[0].lines] == [
        "measured peak", "in proportion to the batch", "out of memory (where the line would be)"]
    assert figure.axes[0].get_xscale() == figure.axes[0].get_yscale() == "log"  # proportional growth: a line
    batch_size.add_time_to_accuracy(table, 0.3)
    assert len(batch_size.accuracy_figure(table, 0.3).axes) == 2
    model = build_model(TrainConfig(model="mlp", image_size=4), 2, (3, 4, 4))
    estimates = [estimate_memory(model, "sgd", "fp32", b, (3, 4, 4)) for b in (1, 2)]
    assert len(anatomy.fill_figure(estimates, ["1", "2"], 80).axes[0].patches) == 12  # 6 parts x 2 bars


def test_axes_speak_words_with_units_and_legends_sit_beside_the_curves():
    table = sweep_table()
    axes = plots.scatter_line(table, "batch_size", "images_per_s", logx=True, label="measured").axes[0]
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("batch size", "images/s")
    assert [t.get_text() for t in axes.get_xticklabels()] == ["4", "16", "64"]
    legend = axes.get_legend()
    assert legend._loc == 2 and tuple(legend.get_bbox_to_anchor()._bbox.bounds[:2]) == plots.LEGEND_ANCHOR
    axes = plots.curves(table, "epochs", "epoch", "val_acc", ["batch_size"]).axes[0]
    assert axes.get_ylabel() == "validation accuracy" and axes.get_legend() is not None
    figure = batch_size.accuracy_figure(batch_size.add_time_to_accuracy(sweep_table(), 0.3), 0.3)
    assert figure.axes[0].get_legend()._loc == 2


def test_crowded_bar_labels_are_drawn_steeper_and_anchored_so_that_they_do_not_cross():
    long = [f"{n} micro-batches, no_sync until the last (one bucket)" for n in range(9)]
    crowded = plots.bars(long, list(range(9))).axes[0].get_xticklabels()
    assert {(t.get_rotation(), t.get_rotation_mode()) for t in crowded} == {(plots.STEEP_ROTATION, "anchor")}
    short = plots.bars(["fp32", "tf32", "bf16"], [1, 2, 3]).axes[0].get_xticklabels()
    assert {(t.get_rotation(), t.get_rotation_mode()) for t in short} == {(20, "default")}
