"""GPU figures recorded by the benchmarks in ``bench/``, shown by the labs where this kernel has no GPU.

``load_recording(name)`` reads one recording, shipped with coursekit as package data in
``coursekit/labs/recordings/<name>.json``; ``$COURSEKIT_…`` (see ``RECORDINGS``) points it at another file,
for instance one just written by the benchmark on the course's own GPUs. Every table built from a
recording names the machine, date and command of the run behind its numbers — they were measured on a
GPU, not in this kernel. When the file is missing the loader says so once and returns None; the labs
then skip the recorded plots.

=====================  ==========================  ================================  ======================
name                   labs                        written by                        override
=====================  ==========================  ================================  ======================
``gpu_ladder``         02 (sweep), 03, 04, 05      ``bench/ladder_gpu.py``           ``$COURSEKIT_GPU_LADDER``
``ddp_gpu``            06                          ``bench/ddp_gpu.py``              ``$COURSEKIT_DDP_GPU``
``model_parallel_gpu`` 08                          ``bench/model_parallel_gpu.py``   ``$COURSEKIT_MODEL_PARALLEL_GPU``
``large_batch_gpu``    07                          ``bench/large_batch_gpu.py``      ``$COURSEKIT_LARGE_BATCH_GPU``
=====================  ==========================  ================================  ======================

A packaged recording is made from the benchmark's results by ``publish`` — one explicit command per
recording, naming every file that goes into it (nothing is picked up from the folder)::

    python -m coursekit.labs.kit.recorded gpu_ladder bench/results/gpu_ladder.json \
        --part batch_sweep=bench/results/gpu_batch_sweep.json --part jpeg=bench/results/gpu_jpeg.json
    python -m coursekit.labs.kit.recorded ddp_gpu bench/results/ddp_gpu.json \
        --log node=bench/results/ddp_gpu_logs/busbw_node_2.log --log task=bench/results/ddp_gpu_logs/busbw_task_2.log
    python -m coursekit.labs.kit.recorded model_parallel_gpu bench/results/model_parallel_gpu.json
    python -m coursekit.labs.kit.recorded large_batch_gpu bench/results/large_batch_gpu.json

``--part KEY=FILE`` takes ``KEY`` from another run (``bench/ladder_gpu.py --only sweep`` and ``--only jpeg``
write the batch sweep and the JPEG figures separately) and records that run's device, date and command in
``sources[KEY]``; ``--log NAME=FILE`` stores a text log under ``logs[NAME]`` (lab 06 shows NCCL's log of the
binding comparison). The packaged ``gpu_ladder.json`` is the ladder of 2026-11-26 01:12 UTC with the batch
sweep of 02:15 and the JPEG figures of 01:43 (one H100 each); ``ddp_gpu.json`` carries its two NCCL logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable

PACKAGE_FOLDER = "recordings"  # inside coursekit.labs
META_KEYS = ("device", "torch", "cuda", "date", "command")
LADDER_PARTS = ("ladder", "batch_sweep", "jpeg")
BASELINE_RUNG = "fp32"
NO_GPU_FIGURES = "no GPU figures recorded yet"


@dataclass(frozen=True)
class Recording:
    """What the labs know about one recording: the variable that overrides its file, who writes it, and the
    keys it must have."""

    env: str
    bench: str
    required: tuple[str, ...] = ()


RECORDINGS = {
    "gpu_ladder": Recording("COURSEKIT_GPU_LADDER", "bench/ladder_gpu.py", ("device", "ladder")),
    "ddp_gpu": Recording("COURSEKIT_DDP_GPU", "bench/ddp_gpu.py"),
    "model_parallel_gpu": Recording("COURSEKIT_MODEL_PARALLEL_GPU", "bench/model_parallel_gpu.py"),
    "large_batch_gpu": Recording("COURSEKIT_LARGE_BATCH_GPU", "bench/large_batch_gpu.py", ("cells",)),
}


def _spec(name: str) -> Recording:
    if name not in RECORDINGS:
        raise ValueError(f"name={name!r} is not a recording: use one of {', '.join(RECORDINGS)}")
    return RECORDINGS[name]


def packaged_path(name: str) -> Path:
    """The recording shipped with coursekit (``coursekit/labs/recordings/<name>.json``)."""
    _spec(name)
    return Path(str(resources.files("coursekit.labs") / PACKAGE_FOLDER / f"{name}.json"))


def recording_path(name: str) -> Path:
    """``$COURSEKIT_…`` of this recording when set, else the packaged file."""
    explicit = os.environ.get(_spec(name).env)
    return Path(explicit).expanduser() if explicit else packaged_path(name)


def _check_shape(name: str, data: Any, path: Path) -> None:
    spec = _spec(name)
    if not isinstance(data, dict):
        raise ValueError(f"recording {path} is not a JSON object: re-run {spec.bench} to rewrite it")
    for key in spec.required:
        if key not in data:
            raise ValueError(f"recording {path} has no {key!r}: re-run {spec.bench} to rewrite it")
    for row in data.get("ladder") or []:
        if "rung" not in row or "engine_img_s" not in row:
            raise ValueError(f"recording {path}: every ladder row needs 'rung' and 'engine_img_s', got {sorted(row)}")


def load_recording(name: str, path: str | os.PathLike | None = None, verbose: bool = True) -> dict[str, Any] | None:
    """Recording ``name`` (see ``RECORDINGS``) from ``path``, ``$COURSEKIT_…`` or the package; None, said once,
    when the file is missing. ``data["_path"]`` is the file it came from."""
    spec = _spec(name)
    source = Path(path) if path is not None else recording_path(name)
    if not source.is_file():
        if verbose:
            why = (f"${spec.env} points there" if path is None and os.environ.get(spec.env)
                   else "not in this installation of coursekit" if path is None else "no such file")
            print(f"{NO_GPU_FIGURES} ({name}): {source} does not exist ({why}). It is written on a GPU machine by "
                  f"`python {spec.bench}` and packaged with `python -m coursekit.labs.kit.recorded {name} FILE`; "
                  "the recorded figures are skipped.")
        return None
    data = json.loads(source.read_text(encoding="utf-8"))
    _check_shape(name, data, source)
    data["_path"] = str(source)
    return data


def _meta(data: dict[str, Any]) -> dict[str, Any]:
    return {key: data.get(key) for key in META_KEYS}


def publish(name: str, source: str | os.PathLike, parts: dict[str, str | os.PathLike] | None = None,
            logs: dict[str, str | os.PathLike] | None = None, out: str | os.PathLike | None = None) -> Path:
    """Write recording ``name`` (default: into the package) from the benchmark's result ``source``, with
    ``parts`` (key -> the result file that holds it) and text ``logs`` (name -> file) merged in; its path."""
    data = json.loads(Path(source).read_text(encoding="utf-8"))
    data.pop("_path", None)
    if parts:
        sources = {key: _meta(data) for key in LADDER_PARTS if data.get(key)} if name == "gpu_ladder" else {}
        for key, part_file in parts.items():
            other = json.loads(Path(part_file).read_text(encoding="utf-8"))
            if not other.get(key):
                raise ValueError(f"{part_file} has no {key!r} to merge into {name}")
            data[key], sources[key] = other[key], _meta(other)
        data["sources"] = sources
    if logs:
        data["logs"] = {log: Path(file).read_text(encoding="utf-8", errors="replace") for log, file in logs.items()}
    target = Path(out) if out is not None else packaged_path(name)
    _check_shape(name, data, target)
    target.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return target


def describe(recording: dict[str, Any]) -> str:
    """One line naming the machine, the software and the date of the figures (the command that recorded
    them is in the benchmark's report, not in the lab)."""
    parts = [f"recorded on {recording.get('device', 'an unnamed GPU')}"]
    if recording.get("torch"):
        parts.append(f"torch {recording['torch']}")
    if recording.get("cuda"):
        parts.append(f"CUDA {recording['cuda']}")
    if recording.get("date"):
        parts.append(str(recording["date"])[:10])
    return ", ".join(parts)


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


def _pairs(values: list[str], option: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, file = value.partition("=")
        if not sep or not key or not file:
            raise SystemExit(f"{option} {value!r}: write {option} KEY=FILE")
        pairs[key] = file
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.labs.kit.recorded",
                                     description="package a benchmark's result as a lab recording")
    parser.add_argument("name", choices=sorted(RECORDINGS))
    parser.add_argument("source", type=Path, help="the benchmark's JSON result")
    parser.add_argument("--part", action="append", default=[], metavar="KEY=FILE",
                        help="take KEY from another result file (its device, date and command go into sources)")
    parser.add_argument("--log", action="append", default=[], metavar="NAME=FILE", help="store a text log")
    parser.add_argument("--out", type=Path, default=None, help="default: coursekit/labs/recordings/NAME.json")
    args = parser.parse_args(argv)
    path = publish(args.name, args.source, _pairs(args.part, "--part"), _pairs(args.log, "--log"), args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
