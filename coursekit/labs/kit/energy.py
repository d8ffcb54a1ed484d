"""Energy beside speed: joules per image and per epoch from a run's step records (labs 02, 04, 06).

The engine adds ``window_energy_j`` (all GPUs' joules since the previous step record, from NVML's
energy counter) and ``window_images`` to each step record where every GPU has the counter; CPUs and
GPUs without it record neither, and the figures here are then None (shown as absent, never guessed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

ENERGY_COLUMNS = ("energy_per_image_j", "energy_per_epoch_j")
GPU_ONLY_NOTE = "Energy is measured on GPUs only, so this table has no energy columns here."


def energy_per_image(timed_steps: Sequence[dict[str, Any]]) -> float | None:
    """Joules per image over the timed step records: their energy summed over the images in them.

    None when any timed record lacks the energy (a CPU, a board without the counter) or no image was counted.
    """
    if not timed_steps:
        return None
    energy, images = 0.0, 0.0
    for record in timed_steps:
        joules, count = record.get("window_energy_j"), record.get("window_images")
        if not isinstance(joules, (int, float)) or not isinstance(count, (int, float)):
            return None
        energy, images = energy + joules, images + count
    return energy / images if images > 0 else None


def energy_figures(timed_steps: Sequence[dict[str, Any]], images_per_epoch: Any) -> dict[str, float | None]:
    """``energy_per_image_j`` and ``energy_per_epoch_j`` (one epoch's images at that cost; None if unknown)."""
    per_image = energy_per_image(timed_steps)
    per_epoch = per_image * images_per_epoch if per_image is not None and isinstance(images_per_epoch, (int, float)) \
        and images_per_epoch > 0 else None
    return {"energy_per_image_j": per_image, "energy_per_epoch_j": per_epoch}


def energy_columns(rows: Iterable[dict[str, Any]], per_epoch: bool = True) -> list[str]:
    """The energy columns to show beside images/s: both when any row measured energy, else none.
    ``per_epoch=False``: energy per image only, for tables whose "epoch" is not one pass over a data set (a fixed
    number of synthetic batches: lab 04's ladder; global batches that grow with the GPUs: lab 06), where energy
    per epoch would read as something it is not."""
    if not any(row.get("energy_per_image_j") is not None for row in rows):
        return []
    return list(ENERGY_COLUMNS) if per_epoch else ["energy_per_image_j"]


def energy_note(rows: Iterable[dict[str, Any]]) -> str:
    """One plain sentence for participants when no row measured energy (a CPU run); empty otherwise."""
    return "" if energy_columns(rows) else GPU_ONLY_NOTE
