"""Lab 06: the GPU figures recorded by ``bench/ddp_gpu.py`` (``labs.load_recording("ddp_gpu")``) as the
lab's tables: scaling, all-reduce bus bandwidth, and NCCL's log of the binding comparison."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab06_data_parallel.buckets import MB
from coursekit.labs.lab06_data_parallel.scaling import _with_speedup


def describe_recording(recording: dict[str, Any]) -> str:
    """One line naming the machine, the software and the date of the figures (how they were made is in
    the benchmark's report, not in the lab)."""
    machine = recording.get("machine") or {}
    gpus = machine.get("gpus")
    parts = [f"recorded on {f'{gpus} x ' if gpus else ''}{machine.get('device_name') or 'an unnamed machine'}"]
    parts += [f"{name} {machine[key]}" for name, key in (("torch", "torch"), ("CUDA", "cuda"), ("NCCL", "nccl"))
              if machine.get(key)]
    if recording.get("date"):
        parts.append(str(recording["date"])[:10])
    line = ", ".join(parts)
    return line


def recorded_scaling_table(recording: dict[str, Any]) -> ResultsTable | None:
    """The recorded scaling runs (mode, GPUs, batch per GPU, img/s, speed-up, efficiency), when present."""
    rows = [r for r in recording.get("scaling") or [] if r.get("ok", True)]
    if not rows:
        return None
    table = ResultsTable(title="GPU scaling, " + describe_recording(recording),
                         columns=["mode", "n_gpu", "batch_per_gpu", "global_batch", "img_s", "speedup", "efficiency"])
    for row in rows:
        img_s = row.get("img_s")
        table.append({**row, "n_gpu": row.get("n_gpu", row.get("world_size")),
                      "img_s": img_s.get("mean") if isinstance(img_s, dict) else img_s})
    return table


def recorded_scaling_tables(recording: dict[str, Any]) -> tuple[ResultsTable, ResultsTable] | None:
    """(strong, weak) of the recorded scaling runs, in the shape of :func:`scaling_tables`."""
    table = recorded_scaling_table(recording)
    if table is None:
        return None
    rows = [{"n_gpu": r["n_gpu"], "batch_per_gpu": r.get("batch_per_gpu"), "global_batch": r.get("global_batch"),
             "img_s": r["img_s"], "step_time_s": None, "mode": r.get("mode")} for r in table]
    weak = [r for r in rows if r["mode"] == "weak"]
    strong = [r for r in weak if r["n_gpu"] == 1] + [r for r in rows if r["mode"] == "strong"]
    note = describe_recording(recording)
    return _with_speedup(strong, f"strong scaling, {note}"), _with_speedup(weak, f"weak scaling, {note}")


def recorded_busbw_table(recording: dict[str, Any], sizes_mib: Sequence[float] = (1, 16, 256, 1024)) -> ResultsTable | None:
    """Recorded NCCL all-reduce bus bandwidth (GB/s) at a few message sizes, per number of GPUs."""
    table = ResultsTable(title="all-reduce bus bandwidth (GB/s), " + describe_recording(recording))
    for run in recording.get("busbw") or []:
        by_size = {r["bytes"] / MB: r.get("busbw_gbs") for r in run.get("rows", [])}
        row = {"n_gpu": run.get("world_size"), "binding": run.get("binding")}
        row.update({f"{size:g} MiB": by_size.get(size) for size in sizes_mib})
        table.append(row)
    return table if len(table) else None


def recorded_nccl_logs(recording: dict[str, Any]) -> dict[str, str]:
    """The recorded ``NCCL_DEBUG=INFO`` logs of the binding comparison: {"node": text, "task": text}.

    A packaged recording carries them (``logs``, see ``coursekit.labs.kit.recorded``); a result file of
    ``bench/ddp_gpu.py`` named by ``$COURSEKIT_DDP_GPU`` has them in the ``<name>_logs/`` folder beside it."""
    embedded = recording.get("logs") or {}
    path = Path(recording.get("_path") or "recording.json")
    folder = path.with_name(f"{path.stem}_logs")
    found = {}
    for binding, result in (recording.get("binding") or {}).items():
        name = ((result or {}).get("busbw") or {}).get("log") if isinstance(result, dict) else None
        if binding in embedded:
            found[binding] = embedded[binding]
        elif name and (folder / name).is_file():
            found[binding] = (folder / name).read_text(encoding="utf-8", errors="replace")
    return found
