"""Lab 06, section 6: strong and weak scaling read from ONE sweep of per-GPU batch sizes x GPU counts
(``submit_sweep(configs, n_gpu=[1, 2, 4])``), their figure, and tables a notebook shows as HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coursekit.labs.kit.energy import energy_columns
from coursekit.labs.kit.results import ResultsTable, format_value


def scaling_batches(n_gpus: Sequence[int], batch_per_gpu: int, global_batch: int) -> list[int]:
    """Per-GPU batch sizes of one sweep that holds weak scaling (``batch_per_gpu`` on every count) and
    strong scaling (``global_batch`` split over every count), ascending."""
    for n in n_gpus:
        if global_batch % n:
            raise ValueError(f"global_batch={global_batch} does not split over n_gpu={n}: choose a multiple of "
                             f"{', '.join(str(c) for c in n_gpus)}")
    return sorted({batch_per_gpu, *(global_batch // n for n in n_gpus)})


def usable_gpu_counts(wanted: Sequence[int], site: Any) -> list[int]:
    """The GPU counts of ``wanted`` this site can run: all of them on a cluster (the submitter checks the
    nodes), those up to the GPUs (or CPU processes) of this machine on the local site."""
    if not getattr(site, "is_local", False):
        return list(wanted)
    most = site.node_shape().gpus_per_node
    usable = [n for n in wanted if n <= most]
    if len(usable) < len(wanted):
        print(f"this machine runs at most {most} processes per job: GPU counts {[n for n in wanted if n > most]} left out")
    return usable


def two_node_options(site: Any) -> dict[str, int] | None:
    """Submit options of a job of 2 processes on 2 nodes (one task per node holding all its GPUs), or
    None where there is a single machine (the local site) or a single node."""
    if getattr(site, "is_local", True):
        return None
    node = site.node_shape()
    if node.max_nodes is not None and node.max_nodes < 2:
        return None
    return {"n_gpu": 2 * node.gpus_per_node, "n_gpu_per_task": node.gpus_per_node}


def _img_s(row: dict[str, Any]) -> float | None:
    return row.get("images_per_s_median") or row.get("images_per_s")


def _with_speedup(rows: list[dict[str, Any]], title: str) -> ResultsTable:
    rows = sorted(rows, key=lambda r: r["n_gpu"])
    base = rows[0] if rows else None
    table = ResultsTable(title=title, columns=["n_gpu", "batch_per_gpu", "global_batch", "img_s", "speedup",
                                               "efficiency", *energy_columns(rows), "step_time_s"])
    for row in rows:
        speedup = row["img_s"] / base["img_s"] if base and base["img_s"] and row["img_s"] else None
        ideal = row["n_gpu"] / base["n_gpu"] if base else None
        table.append({**row, "speedup": speedup, "efficiency": speedup / ideal if speedup and ideal else None})
    return table


def scaling_tables(table: ResultsTable, batch_per_gpu: int, global_batch: int) -> tuple[ResultsTable, ResultsTable]:
    """(strong, weak) from one sweep's table (columns ``n_gpu``, ``batch_size``, images/s): speed-up and
    efficiency against the smallest GPU count. Strong: the global batch fixed; weak: the batch per GPU."""
    rows = [{"n_gpu": r["n_gpu"], "batch_per_gpu": r["batch_size"], "global_batch": r["n_gpu"] * r["batch_size"],
             "img_s": _img_s(r), "step_time_s": r.get("step_time_s"), "state": r.get("state"),
             "energy_per_image_j": r.get("energy_per_image_j"), "energy_per_epoch_j": r.get("energy_per_epoch_j")}
            for r in table]
    strong = [r for r in rows if r["global_batch"] == global_batch]
    weak = [r for r in rows if r["batch_per_gpu"] == batch_per_gpu]
    return (_with_speedup(strong, f"strong scaling: global batch {global_batch}"),
            _with_speedup(weak, f"weak scaling: batch {batch_per_gpu} per GPU"))


def scaling_figure(strong: ResultsTable, weak: ResultsTable, unit: str = "GPUs", title: str = "") -> Any:
    """Images/s (left) and efficiency (right) against the number of GPUs, strong and weak."""
    from coursekit.labs.kit.plots import new_figure

    figure, (left, right) = new_figure(ncols=2)
    for table, label, marker in ((strong, "strong (fixed global batch)", "o"), (weak, "weak (fixed batch per GPU)", "s")):
        rows = [r for r in table if r["img_s"]]
        left.plot([r["n_gpu"] for r in rows], [r["img_s"] for r in rows], marker=marker, label=label)
        right.plot([r["n_gpu"] for r in rows], [r["efficiency"] for r in rows], marker=marker, label=label)
    counts = sorted({r["n_gpu"] for r in (*strong, *weak)})
    if counts:
        base = [r for r in weak if r["n_gpu"] == counts[0] and r["img_s"]]
        if base:
            left.plot(counts, [base[0]["img_s"] * c / counts[0] for c in counts], linestyle=":", color="gray",
                      label="perfect (weak)")
        right.axhline(1.0, linestyle=":", color="gray")
    for ax in (left, right):
        ax.set_xlabel(f"number of {unit}")
        ax.set_xticks(counts)
        ax.legend(fontsize="small")
    left.set_ylabel("images/s (all processes)")
    right.set_ylabel("efficiency = speed-up / ideal speed-up")
    right.set_ylim(0, 1.15)
    if title:
        figure.suptitle(title)
    return figure


@dataclass
class RichTable:
    """A results table that a notebook shows as HTML (and a terminal as text)."""

    table: ResultsTable
    note: str = ""

    def __repr__(self) -> str:
        return self.table.to_text() + (f"\n{self.note}" if self.note else "")

    def _repr_html_(self) -> str:
        columns = self.table.columns
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(format_value(row.get(c)))}</td>" for c in columns) + "</tr>"
                       for row in self.table)
        caption = f"<caption>{html.escape(self.table.title)}</caption>" if self.table.title else ""
        note = f"<p><small>{html.escape(self.note)}</small></p>" if self.note else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


def rich(table: ResultsTable, note: str = "") -> RichTable:
    return RichTable(table, note)
