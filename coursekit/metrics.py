"""The one module that writes and reads coursekit's JSON-lines metrics.

A run directory holds ``metrics.jsonl``: one JSON object per line, each with a ``kind``:

- ``"start"``: run begins (``config``, ``world_size``, ``device``).
- ``"step"``: written every ``log_every`` optimisation steps (``step``, ``epoch`` (from 1), ``loss`` and
  throughput over the window since the last record: ``images_per_s`` (per GPU), ``images_per_s_global``,
  ``data_time_s`` / ``compute_time_s`` (per-step means in the window), ``window_steps``, ``window_time_s``
  (the window's wall time: data + compute), ``lr``; optional ``loss_scale``,
  ``skipped_steps`` (fp16), ``mem_allocated_peak_mb``, ``mem_reserved_peak_mb`` (CUDA), ``params``
  (``--log-params``), ``grad_noise_var``, ``grad_sq``, ``trace_sigma``, ``b_simple`` (``--grad-noise-batches``),
  ``trust_ratios``: per layer ``w_norm``, ``g_norm`` (``--trust-ratio-every``); with NVML on every GPU:
  ``window_energy_j`` (all GPUs' joules since the last record) and ``window_images``, and
  ``gpu_util_pct`` (rank 0's GPU at its last sample)).
- ``"epoch"``: end of an epoch (``epoch``, ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``,
  ``images_per_s``, ``images_per_s_global``, ``epoch_time_s``).
- ``"event"``: ``event`` = ``"nan_loss"`` | ``"resumed"`` | ``"stopped"`` (a requeue: no summary follows,
  the resumed run goes on in the same file).
- ``"summary"``: the last record of a run (``status`` = ``"completed"`` | ``"nan"`` | ``"failed"``,
  ``config``, ``device_name``, ``torch_version``, ``cuda_version``, ``total_time_s``, ``images_per_s``
  (global) ± ``images_per_s_std``, ``images_per_s_per_gpu``, ``data_fraction`` (all three: see "Throughput and
  the data share" below), ``images_per_epoch``, ``memory_estimate``, peak
  memory, ``gpu`` (utilisation, power, energy with nvidia-ml-py), ``profile_dir``).

Every record also has ``time`` (Unix seconds). Only rank 0 writes.

Beside it, on a GPU with NVML, ``gpu_samples.jsonl`` (``GPU_SAMPLES_FILE``): the GPU of the rank that writes the
metrics, sampled every 0.5 s while the run trains, one JSON object a line: ``time``, ``util_pct``, ``mem_used_mib``,
``mem_total_mib`` (the board's memory in use, every process's, as nvidia-smi and nvitop show it) and ``power_w``
(None where the board lacks a counter). :func:`read_gpu_samples` reads it, a running job's too. No file on CPUs.

Throughput and the data share (one definition, :func:`step_figures`; the engine's summary, the labs' tables,
the demo and the benchmarks all use it):

- the **measured windows** are the step records whose window starts after the first ``WARMUP_STEPS`` steps
  (compilation, cuDNN autotuning, the loader's first batch), or after the first quarter of a run shorter than
  ``4 x WARMUP_STEPS`` steps (at least the first step); a run too short for that drops its first record;
- ``images_per_s`` = images processed / wall time, both summed over the measured windows (what a reader gets
  by dividing images by seconds; a mean of per-window rates would weight a fast short window like a slow long
  one and overstate it); ``images_per_s_std`` is the spread of the per-window rates, reported beside it;
- ``data_fraction`` = time waiting for data / wall time over the same windows; ``data_time_mean_s`` and
  ``compute_time_mean_s`` are the per-step means over the same steps, so
  ``data_fraction == data_time_mean_s / (data_time_mean_s + compute_time_mean_s)`` and a stacked bar of the
  means and a bar of the share cannot disagree;
- ``data_time_s``, ``compute_time_s``, ``step_time_s`` are per-step *medians* over the same windows: the
  typical step, robust to one slow step of a busy machine. A loader that is slow every k-th step shows a small
  median wait and a large share; that difference is information, not an error.
- ``images_per_s_median`` is the median of the per-window rates over the same windows, always shown under its
  own name ("images/s (median)"), never as throughput: the typical window's rate, for comparing runs on a
  shared machine where one window slowed by a neighbour moves images / wall time (labs 02 and 06);
  ``images_per_cpu_s_median`` is the same per processor-second (CPU runs, whose wall time other processes
  stretch).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
GPU_SAMPLES_FILE = "gpu_samples.jsonl"  # the engine's NVML samples (train/profiling.py GpuMonitor)
RUN_ROOT_ENV = "COURSEKIT_RUN_ROOT"
RECORD_KINDS = ("start", "step", "epoch", "summary", "event")
_RAISE = object()


def _json_safe(value: Any) -> Any:
    """Turn NaN/inf into strings JSON can hold, and unknown objects into their repr."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return repr(value)


class MetricsWriter:
    """Appends records to ``<run_dir>/metrics.jsonl``; a disabled writer (rank > 0) does nothing."""

    def __init__(self, run_dir: str | os.PathLike, enabled: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.path = self.run_dir / METRICS_FILE
        self._file = None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)

    def write(self, kind: str, **fields: Any) -> None:
        if kind not in RECORD_KINDS:
            raise ValueError(f"metrics kind {kind!r} is not one of {RECORD_KINDS}")
        if self._file is None:
            return
        record = {"kind": kind, "time": time.time(), **fields}
        self._file.write(json.dumps(_json_safe(record)) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metrics_path(run_dir_or_file: str | os.PathLike) -> Path:
    path = Path(run_dir_or_file)
    return path if path.suffix == ".jsonl" else path / METRICS_FILE


def read_metrics(run_dir_or_file: str | os.PathLike) -> list[dict[str, Any]]:
    """All complete records of a run; a half-written last line (job still running) is skipped."""
    return _read_lines(metrics_path(run_dir_or_file))


def read_gpu_samples(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The GPU samples of a run (module docstring), a running one's so far; [] where there are none (a CPU run)."""
    return _read_lines(Path(run_dir) / GPU_SAMPLES_FILE)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, a half-written last line skipped; [] when there is no file."""
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def of_kind(records: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == kind]


def steps(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return of_kind(records, "step")


def epochs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return of_kind(records, "epoch")


def summary(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    found = of_kind(records, "summary")
    return found[-1] if found else None


def mean_std(values: Iterable[float], empty: Any = _RAISE) -> tuple[Any, Any]:
    """Mean and sample standard deviation (0 for a single value): a result's ± over seeds or repeats, the one
    definition the labs, the race's leaderboard and the benchmarks use. No value: ``(empty, empty)`` when
    ``empty`` is given (``None``: "nothing to average"), else ValueError."""
    values = list(values)
    if not values:
        if empty is _RAISE:
            raise ValueError("mean_std needs at least one value")
        return empty, empty
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


WARMUP_STEPS = 5  # steps whose windows are left out of throughput and timing (see "Throughput and the data share")


def measured_windows(step_records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step records that count (module docstring), each with ``window_steps`` and ``window_time_s`` filled in.

    Records written before the engine wrote these two (older recordings) get them from their ``step`` numbers and
    ``(data_time_s + compute_time_s) x steps`` (the engine's window wall time is exactly data + compute)."""
    windows = with_window_fields(step_records)
    if not windows:
        return []
    skip = max(1, min(WARMUP_STEPS, int(windows[-1].get("step", 0)) // 4))
    return [w for w in windows if w["first_step"] > skip] or windows[1:] or windows


def with_window_fields(step_records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the step records with ``window_steps``, ``window_time_s`` and ``first_step`` (older records: from
    their step numbers and data + compute times)."""
    windows, previous = [], 0
    for record in step_records:
        n = record.get("window_steps") or max(int(record.get("step", 0)) - previous, 1)
        previous = int(record.get("step", previous + n))
        seconds = record.get("window_time_s")
        if seconds is None and record.get("data_time_s") is not None and record.get("compute_time_s") is not None:
            seconds = n * (record["data_time_s"] + record["compute_time_s"])
        windows.append({**record, "window_steps": n, "window_time_s": seconds,
                        "first_step": record.get("step", previous) - n + 1})
    return windows


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def throughput(windows: Iterable[dict[str, Any]], rate_key: str = "images_per_s_global", skip: int = 0,
               ) -> tuple[float | None, float | None]:
    """Images / wall time over these step records but the first ``skip``, and the spread (sample std) of their
    per-window rates: the definition of the module docstring for a benchmark that chooses its own timed windows
    (a longer warm-up). ``(None, None)`` without a timed window."""
    timed = [w for w in with_window_fields(windows)[skip:] if w["window_time_s"] and w.get(rate_key) is not None]
    seconds = sum(w["window_time_s"] for w in timed)
    if not timed or seconds <= 0:
        return None, None
    rates = [w[rate_key] for w in timed]
    return (sum(r * w["window_time_s"] for r, w in zip(rates, timed, strict=True)) / seconds,
            statistics.stdev(rates) if len(rates) > 1 else 0.0)


def step_figures(step_records: Iterable[dict[str, Any]], rate_key: str = "images_per_s_global") -> dict[str, Any]:
    """Throughput, its spread, the data share, the per-step means and medians and the median window rate of a
    run, all over the same measured windows (module docstring: the one definition). ``rate_key``
    ``"images_per_s"``: per GPU."""
    windows = measured_windows(step_records)
    timed = [w for w in windows if w["window_time_s"] and w.get(rate_key) is not None]
    rate, spread = throughput(timed, rate_key)
    split = [w for w in windows if w.get("data_time_s") is not None and w.get("compute_time_s") is not None]
    n_steps = sum(w["window_steps"] for w in split)
    data = sum(w["data_time_s"] * w["window_steps"] for w in split)
    compute = sum(w["compute_time_s"] * w["window_steps"] for w in split)
    data_times = [w["data_time_s"] for w in split]
    compute_times = [w["compute_time_s"] for w in split]
    return {
        "images_per_s": rate, "images_per_s_std": spread,
        "measured_steps": sum(w["window_steps"] for w in timed),
        "measured_time_s": sum(w["window_time_s"] for w in timed),
        "data_fraction": data / (data + compute) if data + compute > 0 else None,
        "data_time_mean_s": data / n_steps if n_steps else None,
        "compute_time_mean_s": compute / n_steps if n_steps else None,
        "data_time_s": _median(data_times), "compute_time_s": _median(compute_times),
        "step_time_s": _median([d + c for d, c in zip(data_times, compute_times, strict=True)]),
        "images_per_s_median": _median([w[rate_key] for w in windows if w.get(rate_key)]),
        "images_per_cpu_s_median": _median([w["images_per_cpu_s"] for w in windows if w.get("images_per_cpu_s")]),
    }


def current_job_id() -> str | None:
    """The scheduler's id for the running job (array jobs as ``<array>_<task>``), or None."""
    try:  # submitit knows both Slurm and its local executor
        import submitit

        env = submitit.JobEnvironment()
        return str(env.job_id)
    except Exception:  # noqa: BLE001 - not inside a submitit job
        pass
    array_id, task_id = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_id and task_id:
        return f"{array_id}_{task_id}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")


def run_dir_for(run_root: str | os.PathLike, job_id: str) -> Path:
    """Where a job submitted by coursekit keeps its metrics: ``<run_root>/<job_id>``."""
    return Path(run_root) / str(job_id)


def default_run_dir() -> Path | None:
    """The run directory a job submitted by coursekit should use, from ``COURSEKIT_RUN_ROOT``."""
    root = os.environ.get(RUN_ROOT_ENV)
    job_id = current_job_id()
    if root and job_id:
        return run_dir_for(root, job_id)
    return None
