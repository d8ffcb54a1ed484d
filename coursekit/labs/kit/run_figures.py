"""The figures of one run of the engine, from its metrics records: one definition of throughput, the share of
step time spent waiting for data, per-step means and medians, accuracy, memory and energy, recomputed from the step
records (``coursekit/metrics.py``), so that every results table (``kit/experiments.py``) shows the same figures."""

from __future__ import annotations

from typing import Any

from coursekit.labs.kit.energy import energy_figures
from coursekit.metrics import epochs, measured_windows, step_figures, steps, summary


def summarize_run(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one run from its metrics records (None where the run did not record them)."""
    step_records = steps(records)
    epoch_records = epochs(records)
    final = summary(records) or {}
    timed = measured_windows(step_records)  # the one definition of the measured steps (coursekit/metrics.py)
    figures = step_figures(step_records)
    last_epoch = epoch_records[-1] if epoch_records else {}
    peaks = [r["mem_allocated_peak_mb"] for r in step_records if r.get("mem_allocated_peak_mb") is not None]
    return {
        "status": final.get("status"),
        # throughput, data share, per-step means and medians: one definition, recomputed from the step records
        # (so an older run's summary, written with another definition, does not leak into a table)
        "images_per_s": figures["images_per_s"] if figures["images_per_s"] is not None else final.get("images_per_s"),
        "images_per_s_std": figures["images_per_s_std"],
        # the median window rate, and on a CPU per second of processor time: on a shared machine other processes
        # take turns with the run and stretch its wall time, not the processor time its steps cost
        "images_per_s_median": figures["images_per_s_median"],
        "images_per_cpu_s_median": figures["images_per_cpu_s_median"],
        "total_time_s": final.get("total_time_s"),
        "val_acc": final.get("val_acc", last_epoch.get("val_acc")),
        "val_loss": final.get("val_loss", last_epoch.get("val_loss")),
        "train_loss": step_records[-1].get("loss") if step_records else None,
        **{key: figures[key] for key in ("data_fraction", "data_time_mean_s", "compute_time_mean_s", "data_time_s",
                                         "compute_time_s", "step_time_s")},
        "peak_mem_mb": final.get("mem_allocated_peak_mb") or (max(peaks) if peaks else None),
        **energy_figures(timed, final.get("images_per_epoch")),  # None on CPUs: energy is measured on GPUs only
        "device": final.get("device_name"),
        "steps": step_records,
        "epochs": epoch_records,
        "summary": final,
    }
