"""The queue table as pure functions: rows -> plain text or HTML, metrics -> progress, log -> last line.

Used by ``display_slurm_queue`` (coursekit/jobs/queue_view.py) and ``coursekit queue``; no I/O here.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coursekit.jobs.logs import is_chatter
from coursekit.metrics import epochs, of_kind, steps, summary
from coursekit.slurm_cli import TERMINAL_STATES, SlurmError

LAST_LINE_CHARS = 70
COLUMNS = ("job id", "name", "state", "elapsed", "node", "progress", "GPU use", "last log line")
UNKNOWN = "—"  # no GPU utilisation recorded (a CPU run, no NVML, no step record yet)
STATE_COLOURS = {"RUNNING": "#1a7f37", "PENDING": "#9a6700", "COMPLETED": "#57606a", "FAILED": "#cf222e",
                 "CANCELLED": "#8250df", "TIMEOUT": "#cf222e", "OUT_OF_MEMORY": "#cf222e", "VANISHED": "#cf222e",
                 "NODE_FAIL": "#cf222e"}


@dataclass(frozen=True)
class QueueRow:
    """One line of the queue table."""

    job_id: str
    name: str
    state: str
    elapsed_s: float | None = None
    node: str = ""
    progress: str = ""
    last_line: str = ""
    gpu_util: str = UNKNOWN

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    def cells(self) -> tuple[str, ...]:
        return (self.job_id, self.name, self.state, format_duration(self.elapsed_s), self.node, self.progress,
                self.gpu_util, self.last_line)


def format_duration(seconds: float | None) -> str:
    """Slurm's style: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``; empty when unknown."""
    if seconds is None:
        return ""
    total = int(max(0.0, seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_text(records: Sequence[dict[str, Any]]) -> str:
    """``step 40/100 (40%) · epoch 2/5`` from a run's metrics; the summary's status once it ended."""
    if not records:
        return ""
    start = next(iter(of_kind(records, "start")), {})
    config = start.get("config") or {}
    end = summary(records)
    if end is not None:
        accuracy = end.get("val_acc", end.get("final_val_acc"))
        return f"{end.get('status', 'ended')}" + (f" · val_acc {accuracy:.3f}" if isinstance(accuracy, float) else "")
    last_step, last_epoch = (steps(records) or [None])[-1], (epochs(records) or [None])[-1]
    total_steps = start.get("total_steps") or config.get("test_steps") or config.get("steps")
    total_epochs = None if config.get("test_steps") or config.get("steps") else config.get("epochs")
    parts = []
    if last_step is not None and "step" in last_step:
        step = last_step["step"]
        parts.append(f"step {step}/{total_steps} ({100 * step / total_steps:.0f}%)" if total_steps else f"step {step}")
    epoch = (last_step or last_epoch or {}).get("epoch")
    if epoch is not None:
        parts.append(f"epoch {epoch}/{total_epochs}" if total_epochs else f"epoch {epoch}")
    return " · ".join(parts) or ("started" if start else "")


def gpu_util_text(records: Sequence[dict[str, Any]]) -> str:
    """The job's latest GPU utilisation (``87%``) from its step records; once it ended without one, the
    summary's mean; ``—`` where nothing records it (CPU runs, no NVML)."""
    for record in reversed(steps(records)):
        value = record.get("gpu_util_pct")
        if isinstance(value, (int, float)):
            return f"{value:.0f}%"
    mean = ((summary(records) or {}).get("gpu") or {}).get("gpu_util_mean_pct")
    return f"{mean:.0f}%" if isinstance(mean, (int, float)) else UNKNOWN


def last_log_line(lines: Iterable[str], width: int = LAST_LINE_CHARS) -> str:
    """The last meaningful line (the part after a progress bar's last ``\\r``; submitit's own log lines
    and srun's notes skipped), cut to ``width``."""
    for line in reversed(list(lines)):
        text = line.rsplit("\r", 1)[-1].strip()
        if text and not is_chatter(text):
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""


def rows_to_text(rows: Sequence[QueueRow], message: str = "") -> str:
    """A plain table, columns padded to their widest cell."""
    if not rows:
        return message or "no jobs"
    table = [COLUMNS, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip() for line in table]
    return "\n".join([*lines, *([message] if message else [])])


def rows_to_html(rows: Sequence[QueueRow], message: str = "") -> str:
    """An HTML table (every cell escaped), states coloured, ``message`` under it."""
    head = "".join(f"<th style='text-align:left;padding:2px 8px'>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        cells = [html.escape(cell) for cell in row.cells()]
        colour = STATE_COLOURS.get(row.state, "inherit")
        cells[2] = f"<b style='color:{colour}'>{cells[2]}</b>"
        body.append("<tr>" + "".join(f"<td style='padding:2px 8px'>{cell}</td>" for cell in cells) + "</tr>")
    if not rows:
        body.append(f"<tr><td colspan='{len(COLUMNS)}'><i>no jobs</i></td></tr>")
    footer = f"<div style='font-size:90%;color:#57606a'>{html.escape(message)}</div>" if message else ""
    return (f"<table style='border-collapse:collapse;font-family:monospace;white-space:nowrap'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>{footer}")


def status_message(rows: Sequence[QueueRow], error: SlurmError | None, clock: Callable[[], float] = time.time
                   ) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    summary_text = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    stamp = time.strftime("%H:%M:%S", time.localtime(clock()))
    warning = f" · Slurm unreachable: {error.message}" if error is not None else ""
    return f"{summary_text or 'no jobs'} · {stamp}{warning}"
