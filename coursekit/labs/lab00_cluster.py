"""Lab 00 (the cluster from the notebook): submit a job, watch it, read its logs, cancel one, run a sweep.

The notebook calls the jobs API (``coursekit.submit_jobs``, ``Job``) and the shared helpers of ``labs.kit``;
this module holds the lab's numbers and its exit ticket's questions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.settings import QUIET, job_options, on_cifar10, workshop_budget
from coursekit.labs.kit.ticket import Question, as_number
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="00", slug="lab00_cluster", title="The cluster from the notebook",
          notebook="00_cluster.ipynb", gpus=1)

# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile


def settings(profile: str) -> dict[str, Any]:
    """Lab 00's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("00")`` shows them."""
    if profile == "cpu":
        first = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16,
                            batch_size=50, epochs=4, lr=0.05, **QUIET)
        return {"first_job": first, "long_job": first.replace(epochs=1000),
                "sweep_lrs": [0.01, 0.05, 0.2], "job": job_options(profile, "00:10:00"), "timeout_s": 300}
    first = TrainConfig(model="resnet18", dataset="cifar10", data_dir=data_dir(), batch_size=256, epochs=2,
                        lr=0.1, workers=8, pin_memory=True, persistent_workers=True, non_blocking=True,
                        precision="bf16", channels_last=True, **QUIET)
    values = {"first_job": first, "long_job": first.replace(epochs=200),
              "sweep_lrs": [0.02, 0.1, 0.5], "job": job_options(profile, "00:30:00"), "timeout_s": 1800,
              "budget": workshop_budget({"first job": (1, 1.0), "cancelled job": (1, 0.5), "lr sweep": (3, 1.0)})}
    values = on_cifar10(values, "first_job", "long_job")
    return values


# ----------------------------------------------------------------- the sweep, read against the first job

REPEAT_EXACT = 0.0005  # two accuracies closer than this print alike (3 decimals): the run repeated exactly
FILLS_MORE = 1.1  # the sweep's images/s over the first job's beyond which one job had left part of the GPU idle


def repeat_note(first_acc: float, repeat_acc: float, lr: float, on_gpu: bool) -> str:
    """The sweep's job with the first job's settings (seed included) against the first job: their gap is noise."""
    gap = abs(repeat_acc - first_acc)
    causes = ("a tiny difference at the start, from kernels that add in another order from run to run or from "
              "cuDNN's autotuner choosing other kernels on a shared GPU, which a few epochs at a large learning rate "
              "amplify")
    head = (f"The lr={lr:g} job repeats the first job (same settings, same seed): they ended at validation accuracy "
            f"{first_acc:.3f} and {repeat_acc:.3f}, {gap:.3f} apart. ")
    if gap >= REPEAT_EXACT:
        return head + (f"That is run-to-run noise: {causes}. One short run per learning rate ranks only the gaps "
                       "larger than that.")
    if on_gpu:
        return head + (f"Here the two ended alike; on a GPU they need not: {causes}. One short run per learning "
                       "rate ranks only the gaps larger than such a difference.")
    return head + (f"Here a run repeats exactly. On a GPU two such runs differ: {causes}. One short run per "
                   "learning rate ranks only the gaps larger than that difference.")


def sharing_note(first_images_per_s: float | None, sweep_images_per_s: Iterable[float | None]) -> str:
    """What the sweep's jobs, run at once on one GPU, did against the first job, which had the GPU to itself."""
    text = ("The three jobs ran at the same time on this machine's one GPU, each with a share of it, so each ran "
            "slower than the first job, which had the GPU to itself: compare their images/s and total times with "
            "the first job's.")
    speeds = list(sweep_images_per_s)
    if not first_images_per_s or not speeds or None in speeds:
        return text
    together = sum(speeds) / first_images_per_s
    if together > FILLS_MORE:
        return text + (f" Together they processed {together:.1f}× the first job's images/s: one small job does not "
                       "fill this GPU.")
    return text + (f" Together they processed {together:.1f}× the first job's images/s, not clearly more than it "
                   "alone: one job already kept this GPU busy, and the three only shared it.")


# ----------------------------------------------------------------- the exit ticket

END_STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT")  # the choices for the long job's final state
# the transfer question: an array of ARRAY_JOBS one-GPU jobs of JOB_MINUTES each, at most GPU_LIMIT GPUs at once
ARRAY_JOBS, JOB_MINUTES, GPU_LIMIT = 12, 10, 4


def array_minutes(jobs: int = ARRAY_JOBS, minutes: float = JOB_MINUTES, gpus: int = GPU_LIMIT) -> float:
    """When the last job of an array of one-GPU jobs ends, at the earliest: the jobs run in waves of ``gpus``."""
    return -(-jobs // gpus) * minutes


def ticket_questions(first_job_id: Any, long_state: Any, sweep: Iterable[dict[str, Any]]) -> dict[str, Question]:
    """The exit ticket's questions, each answered from the participant's own jobs. A fact that is missing (a job
    id that is not a plain number, a state outside the choices, a sweep without accuracies) is still asked but
    not counted, so the ticket never stops the notebook."""
    rows = [r for r in sweep if as_number(r.get("val_acc")) is not None and as_number(r.get("lr")) is not None]
    best_lr = as_number(max(rows, key=lambda r: as_number(r["val_acc"]))["lr"]) if rows else None
    return {
        "first_job_id": Question("What was the id of your first job?",
                                 int(first_job_id) if str(first_job_id).isdigit() else None),
        "long_state": Question("In which state did your long job end?",
                               long_state if long_state in END_STATES else None, choices=END_STATES),
        "best_lr": Question("Which learning rate of the sweep reached the highest validation accuracy?", best_lr),
        "array_minutes": Question(
            f"A sweep of {ARRAY_JOBS} runs goes in as one job array; each run needs one GPU for {JOB_MINUTES} minutes, "
            f"and your account may hold {GPU_LIMIT} GPUs at once. How many minutes after the array starts does its "
            "last run end, at the earliest?", array_minutes(), unit="min", computed=True),
    }
