"""How the model is spread over the processes of a run: one file per strategy, each owning its rules.

``process_group.py`` joins the run's processes (ranks from ``coursekit.launch``, device, NCCL/gloo, the
collectives); ``context.py`` holds the :class:`ParallelContext` (a ``DeviceMesh`` with named dimensions
dp, pp, tp); ``ddp.py`` is data parallelism with ``DistributedDataParallel``; ``overlap.py`` measures how
much of the gradient all-reduce gradient buckets hide behind the backward pass. With one process every
strategy degenerates to plain training (pipeline/tensor/FSDP on a mesh of one).

A strategy module
-----------------
Every module of this package that defines ``STRATEGIES`` is a strategy module; this file finds them and
builds the registry (:data:`STRATEGY_MODULES`, ``--parallel`` name -> module). Adding a strategy is one
file here plus its name in ``coursekit.train.config.PARALLEL_STRATEGIES`` (a test keeps the two equal).
A strategy module defines:

- ``STRATEGIES``: the ``--parallel`` names it implements;
- ``apply(model, ctx, cfg)``: the model spread over the mesh of ``ctx`` (a :class:`ParallelContext`);

and, where it differs from plain data parallelism:

- ``OPTIONS``: ``{name: options}``, the layout options of ``LAYOUT_OPTIONS`` the strategy takes (any other
  one set on the command line is refused, naming the strategies that take it);
- ``SHARDED``: the names whose parameters are sharded over processes (checkpoints through
  ``torch.distributed.checkpoint``: ``checkpoint.save_sharded``);
- ``sizes(cfg, world_size)``: the mesh (default ``{"dp": world_size}``);
- ``problems(cfg, world_size=None, device_type=None)``: what makes the layout impossible, before any work
  (without ``world_size``: the checks that need no world size; with it: only those that do);
- ``build_data(cfg, shard)``, ``wrap_optimizer(optimizer, ctx)``: the engine's data and optimizer;
- ``summary_extras(cfg, pctx, ranks)``, ``before_summary(model)``, ``full_state(model, pctx)``: the
  summary's ``parallel`` block and ``--save-weights`` (``summary.py``).

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
(:func:`parallel_problems`).

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
theory holds whatever the ratio of backward to forward time. Measured here (2 gloo processes,
--stage-delay-ms 10, GPipe, m = 4): 0.22 vs theory 0.20 (a few ms of send/recv per micro-batch). The naive
split (2 CPU stages): 0.5.
Tokens/s = samples/s x seq_len; ``final_loss`` is the last epoch's mean training loss (``train_loss``); the
step records hold every step's loss. A pipeline has no validation pass (``val_loss`` None).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

from coursekit.train.config import PARALLEL_STRATEGIES
from coursekit.train.parallel.context import DIMENSIONS, ParallelContext, build_context

# options that only some strategies take: option -> (is it set?, what to say where it is not taken)
LAYOUT_OPTIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tp": (lambda cfg: cfg.tp not in (None, 1), "tp={value} applies to parallel {takers}, not {strategy!r}"),
    "pp": (lambda cfg: cfg.pp not in (None, 1), "pp={value} applies to parallel {takers}, not {strategy!r}"),
    "microbatches": (lambda cfg: cfg.microbatches != 1, "microbatches={value} applies to parallel {takers} "
                     "(for other strategies use --accumulation-steps)"),
    "stage_delay_ms": (lambda cfg: bool(cfg.stage_delay_ms),
                       "stage_delay_ms emulates pipeline stages: use it with {takers}, not {strategy!r}"),
    "sync_batchnorm": (lambda cfg: bool(cfg.sync_batchnorm),
                       "sync_batchnorm applies to parallel {takers}, not {strategy!r}"),
}


@functools.cache
def _registry() -> dict[str, ModuleType]:
    """``--parallel`` name -> strategy module, in the order of ``config.PARALLEL_STRATEGIES``; built on first
    use (the strategy modules import the models, torchvision among them: ``process_group`` alone need not)."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith(("test_", "_")):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in getattr(module, "STRATEGIES", ()):
            if name in found:
                raise ValueError(f"parallel={name!r} is claimed by {found[name].__name__} and {module.__name__}")
            found[name] = module
    order = {name: index for index, name in enumerate(PARALLEL_STRATEGIES)}
    return dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order))))


def __getattr__(name: str) -> Any:
    if name == "STRATEGY_MODULES":
        return dict(_registry())
    if name == "SHARDED_STRATEGIES":  # parameters sharded over processes: checkpoints through DCP
        return tuple(n for n, module in _registry().items() if n in getattr(module, "SHARDED", ()))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def strategy_module(name: str) -> ModuleType:
    """The module that implements ``--parallel name``."""
    registry = _registry()
    if name not in registry:
        raise ValueError(f"parallel={name!r} is unknown; use one of {', '.join(registry)}")
    return registry[name]


def takes(strategy: str, option: str) -> bool:
    """Whether ``--parallel strategy`` takes the layout option ``option`` (see ``LAYOUT_OPTIONS``)."""
    return option in getattr(strategy_module(strategy), "OPTIONS", {}).get(strategy, ())


def mesh_sizes(cfg: Any, world_size: int) -> dict[str, int]:
    """The mesh of ``cfg.parallel`` on ``world_size`` processes (check ``parallel_problems`` first)."""
    sizes = getattr(strategy_module(cfg.parallel), "sizes", None)
    return sizes(cfg, world_size) if sizes is not None else {"dp": world_size}


def _option_problems(cfg: Any) -> list[str]:
    problems = []
    for option, (is_set, message) in LAYOUT_OPTIONS.items():
        if is_set(cfg) and not takes(cfg.parallel, option):
            takers = [name for name in _registry() if takes(name, option)]
            named = " or ".join(repr(name) for name in takers) + (" only" if len(takers) == 1 else "")
            problems.append(message.format(value=getattr(cfg, option), takers=named, strategy=cfg.parallel))
    return problems


def parallel_problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    """What makes ``cfg``'s parallel layout impossible; with ``world_size``: what is impossible on that many
    processes (the checks that need no world size are not repeated)."""
    problems = getattr(strategy_module(cfg.parallel), "problems", None)
    if world_size is not None:
        return problems(cfg, world_size, device_type) if problems is not None else []
    return _option_problems(cfg) + (problems(cfg) if problems is not None else [])


__all__ = ["DIMENSIONS", "LAYOUT_OPTIONS", "SHARDED_STRATEGIES", "STRATEGY_MODULES", "ParallelContext",
           "build_context", "mesh_sizes", "parallel_problems", "strategy_module", "takes"]
