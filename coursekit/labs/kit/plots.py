"""Plots of the labs, drawn from results tables (matplotlib's object API: safe under Agg and in a kernel).

Every function returns the ``Figure``; in a notebook the last expression of a cell displays it. Figures
of recorded (not measured here) numbers carry the word "recorded" and the machine in their title. Axes
are labelled in words with units (``results.column_label``); legends sit beside the axes, never on a curve.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.figure import Figure

from coursekit.labs.kit.results import ResultsTable, column_label

FIGSIZE = (6.4, 4.0)
WIDE_FIGSIZE = (11.0, 4.0)
DPI = 80
RECORDED_COLOR = "tab:gray"
OOM_COLOR = "tab:red"
LEGEND_ANCHOR = (1.02, 1.0)  # just right of the axes, top-aligned (constrained layout makes room)
# tick labels whose longest line times their number passes this are crowded: at a shallow angle they would cross
# each other, so they are drawn steeper, each anchored at its tick (measured: nine DDP-step names at 20 degrees)
CROWDED_CHARS = 200
STEEP_ROTATION = 35


def new_figure(ncols: int = 1, figsize: tuple[float, float] | None = None) -> tuple[Figure, Any]:
    """A figure with ``ncols`` axes side by side (no pyplot state, so nothing leaks between cells)."""
    figure = Figure(figsize=figsize or (FIGSIZE if ncols == 1 else WIDE_FIGSIZE), dpi=DPI, layout="constrained")
    axes = figure.subplots(1, ncols)
    return figure, axes


def set_tick_labels(ax: Any, labels: Sequence[str], rotation: float = 20) -> None:
    """Category labels under the bars at ``rotation`` degrees, or steeper where they would cross each other."""
    longest = max((len(line) for label in labels for line in str(label).splitlines()), default=0)
    crowded = longest * len(labels) > CROWDED_CHARS
    ax.set_xticks(list(range(len(labels))), labels, rotation=STEEP_ROTATION if crowded else rotation, ha="right",
                  rotation_mode="anchor" if crowded else "default", fontsize="small")


def label_of(row: dict[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={row.get(k)}" for k in keys)


def outside_legend(ax: Any) -> None:
    """The axes' legend beside them (right, top-aligned), where it covers no curve."""
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=LEGEND_ANCHOR, borderaxespad=0.0)


def _plain_log2_ticks(ax: Any, xs: Sequence[float]) -> None:
    """Ticks at the values measured, written 64 rather than 2^6."""
    values = sorted({x for x in xs if x})
    if values:
        ax.set_xticks(values, [f"{x:g}" for x in values])
        ax.minorticks_off()


def curves(table: ResultsTable, records: str, x: str, y: str, label_keys: Sequence[str], ax: Any = None,
           title: str = "", logy: bool = False, x_fn: Callable[[dict[str, Any], dict[str, Any]], float] | None = None
           ) -> Figure:
    """One line per row: ``y`` against ``x`` from the row's list of ``records`` ("steps" or "epochs")."""
    figure = None
    if ax is None:
        figure, ax = new_figure()
    for row in table:
        points = [r for r in row.get(records) or [] if r.get(y) is not None]
        xs = [x_fn(row, r) if x_fn else r[x] for r in points]
        ax.plot(xs, [r[y] for r in points], label=label_of(row, label_keys), marker="." if len(points) < 30 else None)
    ax.set_xlabel(column_label(x))
    ax.set_ylabel(column_label(y))
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    outside_legend(ax)
    return figure or ax.figure


def scatter_line(table: ResultsTable, x: str, y: str, ax: Any = None, title: str = "", logx: bool = False,
                 logy: bool = False, label: str | None = None, color: str | None = None,
                 errors: str | None = None) -> Figure:
    """``y`` against ``x`` across the rows (one point per run), optionally with error bars from ``errors``."""
    figure = None
    if ax is None:
        figure, ax = new_figure()
    rows = [r for r in table if r.get(x) is not None and r.get(y) is not None]
    xs, ys = [r[x] for r in rows], [r[y] for r in rows]
    if errors:
        ax.errorbar(xs, ys, yerr=[r.get(errors) or 0 for r in rows], marker="o", capsize=3, label=label, color=color)
    else:
        ax.plot(xs, ys, marker="o", label=label, color=color)
    if logx:
        ax.set_xscale("log", base=2)
        _plain_log2_ticks(ax, xs)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(column_label(x))
    ax.set_ylabel(column_label(y))
    if title:
        ax.set_title(title)
    if label:
        outside_legend(ax)
    return figure or ax.figure


def bars(labels: Sequence[str], values: Sequence[float], ax: Any = None, title: str = "", ylabel: str = "",
         errors: Sequence[float] | None = None, color: str | None = None, annotate: str = "{:.0f}") -> Figure:
    """A bar per label, with its value written above it."""
    figure = None
    if ax is None:
        figure, ax = new_figure()
    positions = range(len(labels))
    drawn = ax.bar(positions, values, yerr=errors, capsize=3, color=color)
    set_tick_labels(ax, labels)
    for bar, value in zip(drawn, values, strict=True):
        if value is not None:
            ax.annotate(annotate.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize="small")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return figure or ax.figure


def stacked_bars(labels: Sequence[str], parts: dict[str, Sequence[float]], ax: Any = None, title: str = "",
                 ylabel: str = "", limit: float | None = None, limit_label: str = "") -> Figure:
    """Bars made of named parts stacked on each other, with an optional horizontal limit (a GPU's memory)."""
    figure = None
    if ax is None:
        figure, ax = new_figure()
    bottoms = [0.0] * len(labels)
    positions = list(range(len(labels)))
    for name, values in parts.items():
        ax.bar(positions, values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    if limit is not None:
        ax.axhline(limit, color=OOM_COLOR, linestyle="--", label=limit_label or f"limit {limit:g}")
    set_tick_labels(ax, labels, rotation=15)
    ax.set_ylabel(ylabel)
    outside_legend(ax)
    if title:
        ax.set_title(title)
    return figure or ax.figure
