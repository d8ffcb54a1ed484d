"""How the model is spread over the processes of a run: one file per strategy, each ``apply(model, ctx, cfg)``.

``context.py`` holds the :class:`ParallelContext` (a ``DeviceMesh`` with named dimensions dp, pp, tp) and
the validation of ``--parallel/--tp/--pp``; ``ddp.py`` is data parallelism with
``DistributedDataParallel``; ``overlap.py`` measures how much of the gradient all-reduce gradient buckets
hide behind the backward pass. ``coursekit.distributed`` keeps what the launcher says (ranks, device,
process group); this package builds on it. With one process every strategy degenerates to plain
training (pipeline/tensor/FSDP on a mesh of one).

The command-line contract (lab 08 consumes it; ``python -m coursekit.train --help``)
-------------------------------------------------------------------------------------
Model and data: ``--model gpt --dataset tokens`` with ``--gpt-layers L --gpt-dim D --gpt-heads H
--seq-len T --vocab-size V`` (a pre-LayerNorm GPT, ``coursekit/train/models/gpt.py``; the token task of
``data.py``: the next token follows a hidden seeded rule, so the loss falls). The model's tensor-parallel
plan and pipeline split points live in its :class:`coursekit.train.models.ModelSpec`.

``--parallel`` (``config.PARALLEL_STRATEGIES``; module in this package):

=========  ==========  =====================================================================================
ddp        ddp.py      DistributedDataParallel (the default; mesh {"dp": N})
zero1      zero.py     DDP + ``ZeroRedundancyOptimizer`` (optimizer state sharded over dp)
zero2      fsdp.py     FSDP2 ``fully_shard(reshard_after_forward=False)`` (gradients + optimizer state sharded)
zero3      fsdp.py     FSDP2 ``fully_shard`` (parameters too)
tensor     tensor.py   ``parallelize_module`` with the spec's column/row-wise plan (Megatron MLP + attention);
                       mesh {"dp": N / tp, "tp": tp}; dp > 1 averages gradients over dp
fsdp_tp    fsdp.py     2-D mesh {"dp": N / tp, "tp": tp}: TP inside, FSDP2 over dp
pipeline   pipeline.py ``torch.distributed.pipelining``: one ``PipelineStage`` per rank, ``ScheduleGPipe`` or
                       ``Schedule1F1B``; mesh {"dp": N / pp, "pp": pp}
naive      naive.py    one process, the layers split over the visible GPUs (on a CPU: 2 "cpu" stages); one
                       stage works at a time, the others idle (measured)
=========  ==========  =====================================================================================

Options: ``--tp N`` (default: every process for tensor, 2 for fsdp_tp), ``--pp N`` (default: every process
for pipeline; naive: the visible GPUs, at least 2), dp = world_size / (tp * pp);
``--pipeline-schedule {gpipe,1f1b}``, ``--microbatches M`` (pipeline only; divides the batch),
``--stage-delay-ms X`` (CPU *emulation* of stage compute: every stage's forward sleeps X ms and its
backward 2X ms per micro-batch, so that 2 cores do not distort the bubble), ``--activation-checkpointing``
and ``--accumulation-steps`` work with every strategy, ``--save-weights PATH`` writes the full (gathered,
unsharded) model state dict (``torch.save``, keys as in the serial model) from the rank that holds it.
Impossible layouts are a ``ConfigError`` (exit code 2) naming the option, before any work
(``context.parallel_problems``).

The summary record gains a ``parallel`` block (``summary.parallel_summary``)::

    {"strategy": "zero3", "mesh": {"dp": 2}, "dp": 2, "tp": 1, "pp": 1, "world_size": 2,
     "microbatches": 1, "pipeline_schedule": None, "stage_delay_ms": 0.0,
     "ranks": [{"rank": 0, "coords": {"dp": 0}, "param_bytes": ..., "grad_bytes": ...,
                "optimizer_bytes": ..., "peak_memory_bytes": None (CPU) or max_memory_allocated}, ...],
     "samples_per_s": ..., "tokens_per_s": ... (None for non-token data), "step_time_s": ...,
     "final_loss": ...,  # the last step record's loss
     "bubble_fraction": ..., "bubble_fraction_theory": (p-1)/(m+p-1),  # pipeline and naive, else None
     "stage_busy_s": [...], "schedule_wall_s": ...,                     # pipeline and naive, else None
     "weights_file": PATH or None}

Byte counts are of the local tensors this rank holds (a DTensor's local shard), measured after the last
backward (gradients) and the last optimizer step (optimizer state). The bubble is measured per stage as
1 - busy / wall over the schedule steps after the first (busy: the stage's forward and backward chunks;
wall: the slowest stage's time in the schedule's step, summed over steps), then averaged over stages; the
theory assumes backward = 2 x forward. Measured here (2 gloo processes, --stage-delay-ms 10, GPipe,
m = 4): 0.22 vs theory 0.20 (a few ms of send/recv per micro-batch). The naive split (2 CPU stages): 0.5.
Tokens/s = samples/s x seq_len; ``final_loss`` is the last epoch's mean training loss (``train_loss``); the
step records hold every step's loss. A pipeline has no validation pass (``val_loss`` None).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from coursekit.train.parallel.context import DIMENSIONS, ParallelContext, build_context, mesh_sizes

STRATEGY_MODULES = {"ddp": "ddp", "naive": "naive", "pipeline": "pipeline", "tensor": "tensor", "zero1": "zero",
                    "zero2": "fsdp", "zero3": "fsdp", "fsdp_tp": "fsdp"}


def strategy_module(name: str) -> ModuleType:
    """The module that implements ``--parallel name``."""
    if name not in STRATEGY_MODULES:
        raise ValueError(f"parallel={name!r} is unknown; use one of {', '.join(STRATEGY_MODULES)}")
    return importlib.import_module(f"coursekit.train.parallel.{STRATEGY_MODULES[name]}")


__all__ = ["DIMENSIONS", "STRATEGY_MODULES", "ParallelContext", "build_context", "mesh_sizes", "strategy_module"]
