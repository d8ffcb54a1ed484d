"""The one module that writes and reads coursekit's JSON-lines metrics.

A run directory holds ``metrics.jsonl``: one JSON object per line, each with a ``kind``:

- ``"start"``: run begins (``config``, ``world_size``, ``device``).
- ``"step"``: written every ``log_every`` optimisation steps (``step``, ``epoch`` (from 1), ``loss`` and
  throughput over the window since the last record: ``images_per_s`` (per GPU), ``images_per_s_global``,
  ``data_time_s`` / ``compute_time_s`` (per-step means), ``lr``; optional ``loss_scale``,
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
  (steady state, global) ± ``images_per_s_std``, ``images_per_s_per_gpu``, ``images_per_epoch``, ``memory_estimate``, peak
  memory, ``gpu`` (utilisation, power, energy with nvidia-ml-py), ``profile_dir``).

Every record also has ``time`` (Unix seconds). Only rank 0 writes.
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
    path = metrics_path(run_dir_or_file)
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
