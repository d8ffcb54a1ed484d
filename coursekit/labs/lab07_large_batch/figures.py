"""Lab 07's five figures, one per question: A's accuracies (``accuracy_figure``) and its LR grid per optimizer
(``grid_figure``), B's early loss (``spike_figure``), C's steps and samples to the target with the fit
(``critical_figure``), D's noise scale along the reference run (``noise_figure``). Matplotlib is imported only
when a figure is drawn."""

from __future__ import annotations

import math
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab07_large_batch.analysis import SPIKE_STEPS, best_of_grid, cells
from coursekit.labs.lab07_large_batch.settings import GRID_FACTORS, _without_batch


def accuracy_figure(summary: ResultsTable) -> Any:
    """Final accuracy of each arm of A (mean ± std over seeds), grouped by batch."""
    from coursekit.labs.kit.plots import WIDE_FIGSIZE, new_figure, set_tick_labels

    figure, ax = new_figure(figsize=WIDE_FIGSIZE)
    rows = list(summary)
    ax.bar(range(len(rows)), [r["val_acc"] for r in rows], yerr=[r["val_acc_std"] or 0.0 for r in rows], capsize=3,
           color=[f"C{sorted({r['batch_size'] for r in rows}).index(r['batch_size'])}" for r in rows])
    labels = [f"{_without_batch(r['arm'])}\nB={r['batch_size']}, lr {r['lr']:g}" for r in rows]
    set_tick_labels(ax, labels, rotation=30)
    finite = [r["val_acc"] for r in rows if r["val_acc"] == r["val_acc"]]
    if finite:
        ax.set_ylim(max(0.0, min(finite) - 0.05), min(1.0, max(finite) + 0.02))
    ax.set_ylabel("test accuracy (mean ± std over seeds)")
    ax.set_title("A. the gap at equal epochs, and what wins it back")
    return figure


def grid_figure(grid: ResultsTable, reference_acc: float | None = None) -> Any:
    """Final accuracy against the LR (as a multiple of each optimizer's grid centre), one line per optimizer, its
    best point ringed; the reference batch's accuracy as a line."""
    from coursekit.labs.kit.plots import new_figure, outside_legend

    figure, ax = new_figure()
    for index, optimizer in enumerate(dict.fromkeys(grid.column("optimizer"))):
        points = grid.where(optimizer=optimizer)
        centre = points[0]["lr"] / points[0]["lr_multiple"]
        ax.errorbar(points.column("lr_multiple"), points.column("val_acc"), yerr=[std or 0.0 for std in points.column("val_acc_std")],
                    marker="o", capsize=3, color=f"C{index}", label=f"{optimizer.upper()} (centre lr {centre:g})")
        best = best_of_grid(points)[optimizer]
        ax.scatter([best["lr_multiple"]], [best["val_acc"]], s=150, facecolors="none", edgecolors=f"C{index}")
    if reference_acc is not None:
        ax.axhline(reference_acc, color="grey", linestyle=":", label="reference batch")
    ax.set_xscale("log", base=2)
    ax.set_xticks(GRID_FACTORS, [f"{factor:g}" for factor in GRID_FACTORS])
    ax.set_xlabel("peak LR / the optimizer's grid centre")
    ax.set_ylabel("final test accuracy")
    ax.set_title(grid.title or "A. the LR grid")
    outside_legend(ax)
    return figure


def spike_figure(table: ResultsTable, steps: int = 3 * SPIKE_STEPS) -> Any:
    """Left: the training loss of the first ``steps`` steps of each B arm (seed 0); right: final accuracy."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    summary = cells(table, "B")
    for index, cell in enumerate(summary):
        row = table.where(part="B", arm=cell["arm"])[0]
        points = [r for r in row["steps"] if r["step"] <= steps]
        left.plot([r["step"] for r in points], [r["loss"] for r in points], label=cell["arm"],
                  color=f"C{index // 2}", linestyle="-" if index % 2 == 0 else "--")
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_ylabel("training loss (every step)")
    left.set_title(f"B. the first steps at batch {table.where(part='B')[0]['batch_size']}")
    left.legend(fontsize="small")
    rows = list(summary)
    right.bar(range(len(rows)), [r["val_acc"] for r in rows], yerr=[r["val_acc_std"] or 0.0 for r in rows], capsize=3,
              color=[f"C{i // 2}" for i in range(len(rows))])
    right.set_xticks(range(len(rows)), [r["arm"] for r in rows], rotation=20, fontsize="small")
    right.set_ylabel("final test accuracy")
    return figure


def critical_figure(curve: ResultsTable, fit: dict[str, float] | None, b_simple: float | None = None) -> Any:
    """Left: steps S(B) to the target; right: samples E(B) = S B; both with the fit and B_crit (and B_simple)."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    reached = [r for r in curve if r["steps_to_target"]]
    xs = [r["batch_size"] for r in reached]
    left.plot(xs, [r["steps_to_target"] for r in reached], marker="o", label="measured (best LR)")
    right.plot(xs, [r["samples_to_target"] for r in reached], marker="o", label="measured (best LR)")
    if fit and 0 < fit["b_crit"] < math.inf:
        grid = [r["batch_size"] for r in curve]
        left.plot(grid, [fit["s_min"] * (1 + fit["b_crit"] / b) for b in grid], linestyle="--",
                  label="fit: S = S_min (1 + B_crit / B)")
        right.plot(grid, [fit["e_min"] * (1 + b / fit["b_crit"]) for b in grid], linestyle="--",
                   label="fit: E = E_min (1 + B / B_crit)")
        for ax in (left, right):
            ax.axvline(fit["b_crit"], color="grey", linestyle=":", label=f"B_crit ≈ {fit['b_crit']:.0f} (the fit)")
    if b_simple:
        for ax in (left, right):
            ax.axvline(b_simple, color="black", linestyle="-.", label=f"B_simple ≈ {b_simple:.0f}")
    for ax, what in ((left, "steps S"), (right, "samples E = S x B")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"{what} to the target")
        ax.legend(fontsize="small")
    left.set_title("C. perfect scaling, then diminishing returns")
    return figure


def noise_figure(series: list[dict[str, Any]], b_crit: float | None, at_step: int | None) -> Any:
    """B_simple along the reference run, with B_crit and the step where C's reference batch reached the target."""
    from coursekit.labs.kit.plots import new_figure

    figure, ax = new_figure()
    ax.plot([p["step"] for p in series], [p["b_simple"] for p in series], label="B_simple (moving averages)")
    if b_crit and 0 < b_crit < math.inf:
        ax.axhline(b_crit, color="grey", linestyle=":", label=f"B_crit from C ≈ {b_crit:.0f}")
    if at_step:
        ax.axvline(at_step, color="black", linestyle="-.", label=f"C's reference reaches the target (step {at_step})")
    ax.set_yscale("log")
    ax.set_xlabel("step of the reference run")
    ax.set_ylabel("B_simple = tr(Σ) / |G|²")
    ax.set_title("D. the noise scale grows as the loss falls")
    ax.legend(fontsize="small")
    return figure
