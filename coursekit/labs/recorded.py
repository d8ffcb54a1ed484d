"""GPU figures recorded by the engine's benchmark (bench/gpu_ladder.py), shown by the labs on a CPU.

The recording is ``bench/results/gpu_ladder.json`` (``$COURSEKIT_GPU_LADDER`` overrides the path); the
JPEG figures may sit in it under ``"jpeg"`` or in ``gpu_jpeg.json`` beside it. Every table built here
says where its numbers come from: they were measured on a GPU, not in this kernel. When no recording
exists the loaders say so and return None; the labs then skip the recorded plots.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from coursekit.labs.results import ResultsTable

LADDER_ENV = "COURSEKIT_GPU_LADDER"
LADDER_FILE = "gpu_ladder.json"
JPEG_FILE = "gpu_jpeg.json"
RESULTS_SUBDIR = Path("bench") / "results"
REQUIRED_KEYS = ("device", "ladder")
BASELINE_RUNG = "fp32"


def default_ladder_path() -> Path:
    """``$COURSEKIT_GPU_LADDER``, else bench/results/gpu_ladder.json of the source tree holding coursekit."""
    explicit = os.environ.get(LADDER_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path(__file__).resolve().parents[2] / RESULTS_SUBDIR / LADDER_FILE


def _check_shape(data: dict[str, Any], path: Path) -> None:
    for key in REQUIRED_KEYS:
        if key not in data:
            raise ValueError(f"recording {path} has no {key!r}: re-run bench/gpu_ladder.py to rewrite it")
    for row in data["ladder"]:
        if "rung" not in row or "engine_img_s" not in row:
            raise ValueError(f"recording {path}: every ladder row needs 'rung' and 'engine_img_s', got {sorted(row)}")


def load_gpu_ladder(path: str | os.PathLike | None = None, verbose: bool = True) -> dict[str, Any] | None:
    """The recorded GPU ladder, or None (with a message saying why) when there is none."""
    path = Path(path) if path is not None else default_ladder_path()
    if not path.is_file():
        if verbose:
            print(f"No recorded GPU figures at {path}. They are written on a GPU machine by "
                  f"`python bench/gpu_ladder.py --out {RESULTS_SUBDIR / LADDER_FILE}`; "
                  "the recorded plots are skipped.")
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    _check_shape(data, path)
    if "jpeg" not in data and (path.parent / JPEG_FILE).is_file():
        data["jpeg"] = json.loads((path.parent / JPEG_FILE).read_text(encoding="utf-8")).get("jpeg")
    data["_path"] = str(path)
    return data


def describe(recording: dict[str, Any]) -> str:
    """One line naming the machine, the software and the command that recorded the figures."""
    parts = [f"recorded on {recording.get('device', 'an unnamed GPU')}"]
    if recording.get("torch"):
        parts.append(f"torch {recording['torch']}")
    if recording.get("cuda"):
        parts.append(f"CUDA {recording['cuda']}")
    if recording.get("date"):
        parts.append(str(recording["date"])[:10])
    line = ", ".join(parts)
    if recording.get("command"):
        line += f" by `{recording['command']}`"
    return line


def _mean(value: Any) -> float | None:
    if isinstance(value, dict):
        return value.get("mean")
    return value


def _std(value: Any) -> float | None:
    return value.get("std") if isinstance(value, dict) else None


def ladder_table(recording: dict[str, Any]) -> ResultsTable:
    """Rung, img/s (mean, std), speed-up over fp32, TFLOP/s and peak memory of the recorded ladder."""
    rows = recording["ladder"]
    base = next((_mean(r["engine_img_s"]) for r in rows if r["rung"] == BASELINE_RUNG), None)
    table = ResultsTable(title="GPU ladder (" + describe(recording) + ")")
    for row in rows:
        img_s = _mean(row["engine_img_s"])
        table.append({
            "rung": row["rung"],
            "img_s": img_s,
            "img_s_std": _std(row["engine_img_s"]),
            "speedup": img_s / base if base and img_s else None,
            "tflops": row.get("tflops"),
            "peak_mem_gb": row.get("peak_mem_gb"),
            "engine_vs_bare": row.get("ratio"),
        })
    return table


def batch_sweep_table(recording: dict[str, Any]) -> ResultsTable | None:
    """Recorded img/s and peak memory against batch size (rows with ``oom: true`` ran out of memory)."""
    rows = recording.get("batch_sweep")
    if not rows:
        return None
    table = ResultsTable(title="GPU batch sweep (" + describe(recording) + ")")
    for row in rows:
        table.append({
            "batch_size": row["batch_size"],
            "img_s": _mean(row.get("engine_img_s")),
            "img_s_std": _std(row.get("engine_img_s")),
            "peak_mem_gb": row.get("peak_mem_gb"),
            "oom": bool(row.get("oom", False)),
        })
    return table


def jpeg_table(recording: dict[str, Any]) -> ResultsTable | None:
    """Recorded training img/s with PIL decoding on CPU workers, nvjpeg on the GPU, and synthetic data."""
    jpeg = recording.get("jpeg")
    if not jpeg:
        return None
    labels = {"pil_cpu_img_s": "JPEG, PIL on CPU workers", "nvjpeg_gpu_img_s": "JPEG, nvjpeg on the GPU",
              "synthetic_img_s": "synthetic (no decoding)"}
    table = ResultsTable(title="GPU JPEG decoding (" + describe(recording) + ")")
    for key, label in labels.items():
        if key in jpeg:
            table.append({"pipeline": label, "img_s": _mean(jpeg[key]), "img_s_std": _std(jpeg[key])})
    return table
