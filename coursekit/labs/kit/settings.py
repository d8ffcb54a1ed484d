"""What every lab's numbers are made of: ``Settings`` (what ``profile.settings("02")`` returns), the job
options of a lab, the workshop budget, the CIFAR-10 stand-in switch.

Each lab's own numbers live in its module (``coursekit.labs.lab02_batch_size.settings(profile)``):
``cpu``: seconds per job on two cores, generated data, tiny models, so that CI runs every notebook.
``gpu``: the course on a GPU cluster: CIFAR-10 (``COURSEKIT_DATA_DIR``), ResNets, full sweeps.
Every base configuration is a :class:`~coursekit.train.config.TrainConfig`; a lab varies one or two
options of it, so the notebook shows exactly what changes between two runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from coursekit.labs.kit.datasets import real_or_standin
from coursekit.train.config import TrainConfig

QUIET = {"progress": "off"}
# cpu profile: one compute thread per job, so that jobs sharing the cores time-slice instead of making
# their OpenMP threads spin against each other (which can slow tiny runs down tenfold).
CPU_JOB_ENV = {"OMP_NUM_THREADS": "1"}


# A workshop: ROOM participants share a partition of PARTITION_GPUS GPUs for a lab's LAB_SLOT_MINUTES; each
# participant's jobs must fit in an equal share of it. Each lab's gpu settings carry a ``budget``: its jobs,
# their estimated GPU-minutes each (H100, start-up included), and the total per participant and per room.
ROOM = 20
PARTITION_GPUS = 8
LAB_SLOT_MINUTES = 90
GPU_MINUTES_PER_PARTICIPANT = PARTITION_GPUS * LAB_SLOT_MINUTES / ROOM  # 36


def workshop_budget(jobs: dict[str, tuple[int, float]],
                    room_jobs: dict[str, tuple[int, float]] | None = None) -> dict[str, Any]:
    """``{"what": (jobs, GPU-minutes each)}`` -> the lab's GPU budget per participant and for the room;
    ``room_jobs``: the jobs the room runs once, not each participant (lab 09's `instructor race verify`), in
    the room's GPU-hours and said apart (``room_gpu_minutes``, ``room_estimate``)."""
    minutes = sum(count * each for count, each in jobs.values())
    once = sum(count * each for count, each in (room_jobs or {}).values())
    budget = {"participants": ROOM, "jobs": sum(count for count, _ in jobs.values()),
              "gpu_minutes_per_participant": round(minutes, 1),
              "gpu_hours_room": round((ROOM * minutes + once) / 60, 1),
              "share_of_partition": round(minutes / GPU_MINUTES_PER_PARTICIPANT, 2),
              "estimate": ", ".join(f"{what}: {count} x {each:g} min" for what, (count, each) in jobs.items())}
    if room_jobs:
        budget["room_gpu_minutes"] = round(once, 1)
        budget["room_estimate"] = ", ".join(f"{what}: {count} x {each:g} min" for what, (count, each)
                                            in room_jobs.items())
    return budget


def on_cifar10(values: dict[str, Any], *names: str, image_size: int | None = None) -> dict[str, Any]:
    """Put the named cifar10 configurations on Fashion-MNIST, else on the generated stand-in, where CIFAR-10
    is not staged; the notice goes into the settings (printed first). ``image_size``: the side the configurations
    keep (a cpu profile's small images), where the fallbacks would take CIFAR-10's 32 pixels."""
    notice = None
    for name in names:
        values[name], notice = real_or_standin(values[name])
        if image_size is not None:
            values[name] = values[name].replace(image_size=image_size)
    values["dataset_notice"] = notice
    return values


def job_options(profile: str, time_max: str) -> dict[str, Any]:
    """Keyword arguments of every submission in a lab: ``submit_jobs(..., **s.job)``."""
    return {"time_max": time_max, "env": dict(CPU_JOB_ENV) if profile == "cpu" else {}}


class Settings(Mapping[str, Any]):
    """Read-only named values (``s.batch_sizes`` or ``s["batch_sizes"]``) that print one per line."""

    def __init__(self, lab: str, profile: str, values: dict[str, Any]) -> None:
        self._lab, self._profile, self._values = lab, profile, dict(values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"lab {self._lab} has no setting {name!r}; it has {sorted(self._values)}") from None

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        lines = [f"Lab {self._lab} settings ({self._profile} profile):"]
        notice = self._values.get("dataset_notice")
        if notice:
            lines.append(notice)
        budget = self._values.get("budget")
        ours = isinstance(budget, dict) and "gpu_minutes_per_participant" in budget  # lab 06 has its own
        if ours:
            lines.append(f"  workshop budget: {budget['gpu_minutes_per_participant']:g} GPU-minutes per participant "
                         f"({budget['jobs']} job{'s' if budget['jobs'] != 1 else ''}; {budget['estimate']}), {budget['gpu_hours_room']:g} GPU-hours for "
                         f"{budget['participants']} participants"
                         + (f", {budget['room_gpu_minutes']:g} GPU-minutes of them run once for the room "
                            f"({budget['room_estimate']})" if budget.get("room_gpu_minutes") else ""))
        for name, value in self._values.items():
            if name == "dataset_notice" or (name == "budget" and ours):
                continue
            if isinstance(value, TrainConfig):
                value = "python -m coursekit.train " + " ".join(value.to_args())
            lines.append(f"  {name} = {value}")
        return "\n".join(lines)
