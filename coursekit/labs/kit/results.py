"""One results table per lab: a list of rows (dicts) that every plot and every claim reads.

pandas-free on purpose: a participant can print it, filter it, take a column, and nothing else is
needed. Values that are lists or dicts (the step and epoch records of a run) stay in the rows for the
plots but are never printed. In a notebook a table shows as HTML with readable headers
(``column_label``: ``images_per_s_median`` -> "images/s (median)"), the words the plots' axes use too.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

MISSING = "-"
DEFAULT_FLOAT_DIGITS = 3
# Column names -> words with units (plots' axes, HTML headers); other names: see column_label
COLUMN_LABELS = {
    "batch_size": "batch size", "lr": "learning rate", "job_id": "job id", "n_gpu": "GPUs", "oom": "out of memory",
    "images_per_s": "images/s", "images_per_s_median": "images/s (median)",
    "images_per_cpu_s_median": "images per processor-second (median)", "img_s": "images/s",
    "img_s_std": "images/s (std)", "val_acc": "validation accuracy", "val_loss": "validation loss",
    "train_loss": "training loss", "train_acc": "training accuracy", "loss": "training loss",
    "data_fraction": "share of step time waiting for data", "grad_noise_var": "gradient noise variance",
    "tflops": "TFLOP/s", "speedup": "speed-up", "num_workers": "loader workers",
    "activations_mb_per_image": "activations per image (MiB)", "time_to_target_s": "time to target (s)",
    "peak_mem_mb": "peak memory (MiB)", "peak_mem_gb": "peak memory (GiB)", "estimate_mb": "calculator (MiB)",
    "energy_per_image_j": "energy per image (J)", "energy_per_epoch_j": "energy per epoch (J)",
}
# the kit's "_mb" are MiB (2**20 bytes: the engine's memory records, torch's bucket_cap_mb); "_gb" columns are
# decimal GB (10**9 bytes: lab 08's arithmetic, as GPU makers count) except the benchmarks' peak_mem_gb (GiB)
UNIT_SUFFIXES = {"_s": "s", "_ms": "ms", "_mb": "MiB", "_gb": "GB", "_mib": "MiB", "_gib": "GiB", "_bytes": "bytes"}
HEADER_STYLE = "text-align:right;white-space:nowrap;padding:2px 8px"
CELL_STYLE = "text-align:right;white-space:nowrap;padding:2px 8px;font-variant-numeric:tabular-nums"
WRAP_STYLE = "text-align:left;white-space:normal;min-width:20em;padding:2px 8px"  # a column of sentences


def column_label(name: str) -> str:
    """Words with units for a column name: ``COLUMN_LABELS``, else ``gradients_mb`` -> "gradients (MiB)"."""
    if name in COLUMN_LABELS:
        return COLUMN_LABELS[name]
    for suffix, unit in UNIT_SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name.removesuffix(suffix).replace('_', ' ')} ({unit})"
    return name.replace("_", " ")


def _is_scalar(value: Any) -> bool:
    """Printable in a table cell (a tuple such as a shape is; lists of records and arrays are not)."""
    return not isinstance(value, (list, dict, set)) and not getattr(value, "shape", ())


def format_value(value: Any, digits: int = DEFAULT_FLOAT_DIGITS) -> str:
    """Short text for a table cell: floats with `digits` significant digits, None as '-'."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 10 ** (digits + 2) or abs(value) < 10 ** -(digits + 1)):
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"
    return str(value)


class ResultsTable:
    """Rows of measurements; ``table.column("images_per_s")``, ``table.where(batch_size=64)``, ``print(table)``."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), columns: Sequence[str] | None = None,
                 title: str = "", wrap: Sequence[str] = ()) -> None:
        self.rows: list[dict[str, Any]] = [dict(r) for r in rows]
        self.title = title
        self._columns = list(columns) if columns is not None else None
        self.wrap = tuple(wrap)  # columns of sentences: left-aligned and wrapped in HTML, not one long line

    # --- shape -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    @property
    def columns(self) -> list[str]:
        """The printed columns: the chosen ones, else every scalar key in first-seen order."""
        if self._columns is not None:
            return list(self._columns)
        seen: dict[str, None] = {}
        for row in self.rows:
            for key, value in row.items():
                if _is_scalar(value):
                    seen.setdefault(key, None)
        return list(seen)

    # --- building ----------------------------------------------------------------------------
    def append(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.append(row)

    def with_columns(self, *columns: str, title: str | None = None) -> ResultsTable:
        """The same rows, printed with only these columns."""
        return ResultsTable(self.rows, columns=columns, title=self.title if title is None else title, wrap=self.wrap)

    def add_column(self, name: str, fn: Callable[[dict[str, Any]], Any]) -> ResultsTable:
        """Compute a new column from each row (in place) and return the table."""
        for row in self.rows:
            row[name] = fn(row)
        if self._columns is not None and name not in self._columns:
            self._columns.append(name)
        return self

    # --- reading -----------------------------------------------------------------------------
    def column(self, name: str, default: Any = None) -> list[Any]:
        if self.rows and all(name not in row for row in self.rows):
            raise KeyError(f"no column {name!r}; columns are {self.columns}")
        return [row.get(name, default) for row in self.rows]

    def where(self, predicate: Callable[[dict[str, Any]], bool] | None = None, **equals: Any) -> ResultsTable:
        """Rows matching a predicate and/or column == value pairs."""
        rows = [r for r in self.rows
                if all(r.get(k) == v for k, v in equals.items()) and (predicate is None or predicate(r))]
        return ResultsTable(rows, columns=self._columns, title=self.title, wrap=self.wrap)

    def sorted_by(self, name: str, reverse: bool = False) -> ResultsTable:
        rows = sorted(self.rows, key=lambda r: (r.get(name) is None, r.get(name)), reverse=reverse)
        return ResultsTable(rows, columns=self._columns, title=self.title, wrap=self.wrap)

    def one(self, **equals: Any) -> dict[str, Any]:
        """The single row matching column == value pairs (ValueError when there are 0 or several)."""
        found = self.where(**equals).rows
        if len(found) != 1:
            raise ValueError(f"expected one row with {equals}, found {len(found)}")
        return found[0]

    # --- printing ----------------------------------------------------------------------------
    def to_text(self, digits: int = DEFAULT_FLOAT_DIGITS) -> str:
        columns = self.columns
        cells = [[format_value(row.get(c), digits) for c in columns] for row in self.rows]
        widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
        lines = []
        if self.title:
            lines.append(self.title)
        lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
        return "\n".join(lines)

    def to_html(self, digits: int = DEFAULT_FLOAT_DIGITS) -> str:
        """An HTML table (headers in words, ``column_label``; every cell escaped), the title as its caption."""
        columns = self.columns
        head = "".join(f"<th style='{HEADER_STYLE}' title='{html.escape(c)}'>{html.escape(column_label(c))}</th>"
                       for c in columns)
        styles = [WRAP_STYLE if c in self.wrap else CELL_STYLE for c in columns]
        body = "".join("<tr>" + "".join(f"<td style='{style}'>{html.escape(format_value(row.get(c), digits))}</td>"
                                        for c, style in zip(columns, styles, strict=True)) + "</tr>"
                       for row in self.rows)
        caption = f"<caption style='text-align:left'><b>{html.escape(self.title)}</b></caption>" if self.title else ""
        return (f"<table style='border-collapse:collapse'>{caption}<thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>")

    def _repr_html_(self) -> str:
        return self.to_html()

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return self.to_text()
