"""``coursekit instructor results``: each participant's finished runs (their metrics.jsonl) in one CSV table."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from coursekit.instructor.common import csv_cell, path_owner

DEFAULT_RESULTS = "results.csv"
RESULT_FIELDS = ("participant", "user", "experiment", "job_name", "job_id", "status", "model", "dataset", "batch_size",
                 "precision", "world_size", "steps", "val_acc", "images_per_s", "total_time_s", "time_to_target_s",
                 "device_name", "run_dir")


def participant_of(job_name: str, prefix: str | None) -> tuple[str, str]:
    """``<prefix>-<pseudonym>-<experiment>`` -> (pseudonym, experiment)."""
    name = job_name[len(prefix) + 1:] if prefix and job_name.startswith(prefix + "-") else job_name
    who, _, experiment = name.partition("-")
    return who, experiment


def gather_results(roots: list[Path], prefix: str | None, warnings: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per finished run under the job folders ``<root>/<job name>/<job id>/metrics.jsonl``. A folder or
    file that cannot be read is left out and said in ``warnings`` (when a list is given; else it raises)."""
    from coursekit.metrics import read_metrics, summary

    rows = []
    for root in roots:
        if warnings is not None:
            try:
                with os.scandir(root):
                    pass
            except FileNotFoundError:
                warnings.append(f"{root}: no such folder; no run read from it")
                continue
            except OSError as error:
                warnings.append(f"{root}: cannot read it ({error.strerror or error}); its runs are not in the table")
                continue
        found = [*Path(root).glob("*/*/metrics.jsonl"), *Path(root).glob(f"*/*/{SWEEP_RUN_GLOB}/metrics.jsonl")]
        for path in sorted(found):
            job_folder = path.parent if path.parent.parent.parent == Path(root) else path.parent.parent
            job_name, job_id = job_folder.parent.name, job_folder.name
            if prefix and not job_name.startswith(prefix + "-"):
                continue
            try:
                records = read_metrics(path.parent)
            except OSError as error:
                if warnings is None:
                    raise
                warnings.append(f"{path}: cannot read it ({error.strerror or error}); that run is not in the table "
                                "(run this as a user who can read the participants' job folders)")
                continue
            final = summary(records) or {}
            if not final:
                continue
            config = final.get("config") or {}
            who, experiment = participant_of(job_name, prefix)
            row = {"participant": who, "user": path_owner(path), "experiment": experiment, "job_name": job_name,
                   "job_id": job_id,
                   **{k: final.get(k) for k in RESULT_FIELDS if k in final},
                   **{k: config.get(k) for k in ("model", "dataset", "batch_size", "precision")},
                   "run_dir": str(path.parent)}
            rows.append(row)
    return rows


SWEEP_RUN_GLOB = "run[0-9][0-9][0-9]"  # one run of a job making several (labs' one_job sweeps: run000, run001...)


def write_results(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({key: csv_cell(value) for key, value in row.items()} for row in rows)
