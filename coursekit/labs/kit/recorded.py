"""GPU figures recorded by the engine's benchmark (bench/gpu_ladder.py), shown by the labs on a CPU.

The recording is ``bench/results/gpu_ladder.json`` (``$COURSEKIT_GPU_LADDER`` overrides the path). The
batch sweep and the JPEG figures may sit in it or in other recordings beside it (``bench/gpu_ladder.py
--only sweep jpeg`` writes them separately): the newest recording that has them is used, and every
table names the machine, date and command of the run its numbers come from — they were measured on a
GPU, not in this kernel. When no recording exists the loader says so and returns None; the labs then
skip the recorded plots.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable

LADDER_ENV = "COURSEKIT_GPU_LADDER"
LADDER_FILE = "gpu_ladder.json"
PARTS = ("ladder", "batch_sweep", "jpeg")
META_KEYS = ("device", "torch", "cuda", "date", "command")
RESULTS_SUBDIR = Path("bench") / "results"
REQUIRED_KEYS = ("device", "ladder")
BASELINE_RUNG = "fp32"


def default_ladder_path() -> Path:
    """``$COURSEKIT_GPU_LADDER``, else bench/results/gpu_ladder.json of the source tree holding coursekit."""
    explicit = os.environ.get(LADDER_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path(__file__).resolve().parents[3] / RESULTS_SUBDIR / LADDER_FILE


def _check_shape(data: dict[str, Any], path: Path) -> None:
    for key in REQUIRED_KEYS:
        if key not in data:
            raise ValueError(f"recording {path} has no {key!r}: re-run bench/gpu_ladder.py to rewrite it")
    for row in data["ladder"]:
        if "rung" not in row or "engine_img_s" not in row:
            raise ValueError(f"recording {path}: every ladder row needs 'rung' and 'engine_img_s', got {sorted(row)}")


def _meta(data: dict[str, Any]) -> dict[str, Any]:
    return {key: data.get(key) for key in META_KEYS}


def _siblings(path: Path) -> list[dict[str, Any]]:
    """Other recordings in the same folder, newest first."""
    found = []
    for other in path.parent.glob("*.json"):
        if other.resolve() == path.resolve():
            continue
        try:
            data = json.loads(other.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "device" in data:
            found.append(data)
    return sorted(found, key=lambda d: str(d.get("date", "")), reverse=True)


def load_gpu_ladder(path: str | os.PathLike | None = None, verbose: bool = True) -> dict[str, Any] | None:
    """The recorded GPU figures, or None (with a message saying why) when there are none.

    ``data["sources"][part]`` holds device, date and command of the run behind each part
    (``ladder``, ``batch_sweep``, ``jpeg``)."""
    path = Path(path) if path is not None else default_ladder_path()
    if not path.is_file():
        if verbose:
            print(f"No recorded GPU figures at {path}. They are written on a GPU machine by "
                  f"`python bench/gpu_ladder.py --out {RESULTS_SUBDIR / LADDER_FILE}`; "
                  "the recorded plots are skipped.")
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    _check_shape(data, path)
    data["sources"] = {part: _meta(data) for part in PARTS if data.get(part)}
    for part in PARTS[1:]:
        if not data.get(part):
            other = next((d for d in _siblings(path) if d.get(part)), None)
            if other is not None:
                data[part] = other[part]
                data["sources"][part] = _meta(other)
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


def _source(recording: dict[str, Any], part: str) -> dict[str, Any]:
    return recording.get("sources", {}).get(part) or recording


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
    table = ResultsTable(title="GPU ladder (" + describe(_source(recording, "ladder")) + ")")
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
    table = ResultsTable(title="GPU batch sweep (" + describe(_source(recording, "batch_sweep")) + ")")
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
    table = ResultsTable(title="GPU JPEG decoding (" + describe(_source(recording, "jpeg")) + ")")
    for key, label in labels.items():
        if key in jpeg:
            table.append({"pipeline": label, "img_s": _mean(jpeg[key]), "img_s_std": _std(jpeg[key])})
    return table
