"""Lab 08's strategies and their arithmetic: :data:`STRATEGIES` (each lab strategy's engine options and the
formula's sharding), the training state of a named model per GPU (:func:`seven_billion`, section 1), a strategy's
engine configuration and job shape (:func:`strategy_config`, :func:`job_shape`) and the pipeline bubble's theory
(:func:`bubble_theory`, :func:`bubble_configs`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.train.config import TrainConfig
from coursekit.train.memory import sharded_memory, sharding_table

# lab name -> (engine options, the formula's strategy in coursekit.train.memory)
STRATEGIES: dict[str, tuple[dict[str, Any], str]] = {
    "serial": ({"parallel": "ddp"}, "ddp"),
    "ddp": ({"parallel": "ddp"}, "ddp"),
    "naive": ({"parallel": "naive"}, "ddp"),  # one process holds every layer (over its devices)
    "gpipe": ({"parallel": "pipeline", "pipeline_schedule": "gpipe"}, "pp"),
    "1f1b": ({"parallel": "pipeline", "pipeline_schedule": "1f1b"}, "pp"),
    "tensor": ({"parallel": "tensor"}, "tp"),
    "zero1": ({"parallel": "zero1"}, "zero1"),
    # FSDP2's ZeRO-2 (reshard_after_forward=False) holds the gathered weights only from forward to backward:
    # between steps, where the engine measures, it holds ZeRO-3's shares (DeepSpeed's ZeRO-2 keeps them whole)
    "zero2": ({"parallel": "zero2"}, "zero3"),
    "zero3": ({"parallel": "zero3"}, "zero3"),
    "fsdp_tp": ({"parallel": "fsdp_tp"}, "zero3"),
    # not a parallel strategy: serial training that recomputes each block in the backward (section 5), with
    # the weights of serial training too
    "checkpointed": ({"parallel": "ddp", "activation_checkpointing": True}, "ddp"),
}
PIPELINES = ("gpipe", "1f1b")
SINGLE_PROCESS = ("serial", "naive", "checkpointed")
STATE_KEYS = ("param_bytes", "grad_bytes", "optimizer_bytes")
KEY_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")
GB = 1e9  # section 1's arithmetic counts as GPU makers do (an "80 GB" H100: 80e9 bytes); measured tables use MIB
# The engine trains bf16/fp16 under autocast: weights, gradients and optimizer state stay fp32 whatever
# --precision says, so the per-rank state is the fp32 formula's (2xH100: ZeRO-1 776 MiB measured = fp32's
# 12 bytes per parameter, not mixed precision's 10)
STATE_PRECISION = "fp32"
MIB = 2**20


# --- section 1: the arithmetic -------------------------------------------------------------------

def seven_billion(num_parameters: int = 7_000_000_000, n: int = 8, optimizer: str = "adamw",
                  precision: str = "bf16", gpu_gb: float = 80.0) -> ResultsTable:
    """Training state per GPU of a ``num_parameters`` model on ``n`` GPUs, and whether it fits ``gpu_gb``."""
    rows = [{**r, "fits_gpu": r["total_gb"] <= gpu_gb}
            for r in [*sharding_table(num_parameters, 1, optimizer, precision, ("ddp",)),
                      *sharding_table(num_parameters, n, optimizer, precision)]]
    return ResultsTable(rows, title=f"{num_parameters / 1e9:g}B parameters, {optimizer}, {precision}: "
                                    f"training state per GPU (no activations), {gpu_gb:g} GB GPUs, 1 GB = 10⁹ bytes")


def lowest_fitting_stage(num_parameters: int, n: int, gpu_bytes: float, optimizer: str = "adamw",
                         precision: str = "bf16", headroom: float = 0.0) -> int | None:
    """The lowest ZeRO stage (0: plain data parallelism, then 1, 2, 3) whose training state per GPU fits
    ``gpu_bytes`` minus ``headroom`` on ``n`` GPUs; None when not even ZeRO-3 fits (the exit ticket's transfer
    question: 13B parameters on 8 x 80 GB)."""
    usable = gpu_bytes * (1 - headroom)
    for stage, strategy in enumerate(("ddp", "zero1", "zero2", "zero3")):
        if sharded_memory(num_parameters, strategy, n, optimizer, precision).total_bytes <= usable:
            return stage
    return None


# --- sections 2-6: the strategies as engine runs --------------------------------------------------

def data_parallel_size(strategy: str, n: int) -> int:
    """How many copies of the data-parallel group see different data: N for ddp and ZeRO, N / 2 for the
    fsdp_tp mesh (tp = 2), 1 where the processes share one batch (tensor, pipelines, serial, naive)."""
    if strategy in ("ddp", "zero1", "zero2", "zero3"):
        return n
    return max(n // 2, 1) if strategy == "fsdp_tp" else 1


def strategy_config(base: TrainConfig, strategy: str, weights_dir: str | os.PathLike | None = None,
                    n: int = 1, **options: Any) -> TrainConfig:
    """``base`` run with ``strategy`` (a key of ``STRATEGIES``) on ``n`` processes, writing its final weights
    to ``weights_dir``. ``base.batch_size`` is the global batch: data-parallel ranks get their share of it,
    so that every strategy takes the steps serial training takes."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is unknown; choose one of {', '.join(STRATEGIES)}")
    dp = data_parallel_size(strategy, n)
    if base.batch_size % dp:
        raise ValueError(f"batch_size={base.batch_size} does not split over {dp} data-parallel ranks ({strategy}): "
                         f"choose a multiple of {dp}")
    engine_options = dict(STRATEGIES[strategy][0], batch_size=base.batch_size // dp)
    if weights_dir is not None:
        engine_options["save_weights"] = str(Path(weights_dir) / f"{strategy}.pt")
    return base.replace(**engine_options, **options)


def processes(strategy: str, n: int) -> int:
    """Processes a strategy runs on: 1 for serial, checkpointed and naive (one process, layers over its
    devices), else ``n``."""
    return 1 if strategy in SINGLE_PROCESS else n


def job_shape(strategy: str, n: int, naive_gpus: int = 1) -> dict[str, int]:
    """``submit_jobs`` shape of a strategy's job: ``n`` processes, serial 1, naive one process of ``naive_gpus``."""
    if strategy == "naive":
        return {"n_gpu": naive_gpus, "n_gpu_per_task": naive_gpus}
    return {"n_gpu": processes(strategy, n)}


# --- section 2: the pipeline bubble ----------------------------------------------------------------

def bubble_theory(stages: int, microbatches: int) -> float:
    """The idle share of a GPipe or 1F1B step: (p − 1) / (m + p − 1)."""
    if stages < 1 or microbatches < 1:
        raise ValueError(f"stages={stages} and microbatches={microbatches} must be >= 1")
    return (stages - 1) / (microbatches + stages - 1)


def bubble_configs(base: TrainConfig, microbatches: Sequence[int], stages: int,
                   schedules: Sequence[str] = PIPELINES) -> list[TrainConfig]:
    """One pipeline run per (schedule, m); 1F1B only where m >= p (it refuses fewer micro-batches)."""
    for m in microbatches:
        if base.batch_size % m:
            raise ValueError(f"microbatches={m} does not divide batch_size={base.batch_size}: choose divisors")
    return [strategy_config(base, schedule, n=stages, microbatches=m, pp=stages)
            for schedule in schedules for m in microbatches if schedule != "1f1b" or m >= stages]
