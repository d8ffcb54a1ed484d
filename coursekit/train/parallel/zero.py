"""ZeRO-1: DDP for the gradients, the optimizer state sharded with ``ZeroRedundancyOptimizer``.

Every rank keeps the whole model and the whole gradient (DDP all-reduces it), but only the optimizer
state of its partition of the parameters (the partition is balanced by size, parameter by parameter, so
the share is about 1/N, not exactly). After its ``step()`` each rank broadcasts the parameters it updated.
Memory per rank with Adam in fp32: 4Ψ + 4Ψ + 8Ψ/N (Ultra-Scale Playbook: 2Ψ + 2Ψ + kΨ/N in mixed precision).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from coursekit.train.parallel import ddp

STRATEGIES = ("zero1",)


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    """DDP over the data-parallel group (the engine then calls :func:`wrap_optimizer`)."""
    return ddp.apply(model, ctx, cfg)


def problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    if world_size is not None:
        return []
    if cfg.checkpoint_every or cfg.resume:
        return ["checkpoint_every/resume: parallel='zero1' writes no resumable checkpoint (its optimizer "
                "state would first be consolidated on one rank); use zero2/zero3 or ddp"]
    return []


def wrap_optimizer(optimizer: torch.optim.Optimizer, ctx: Any) -> torch.optim.Optimizer:
    """The same optimizer (class, groups, hyper-parameters) with its state sharded over dp; one process: as is."""
    if ctx.mesh is None:
        return optimizer
    groups = [dict(group) for group in optimizer.param_groups]
    accepted = inspect.signature(type(optimizer).__init__).parameters  # defaults may hold internal keys
    defaults = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    from torch.distributed.optim import ZeroRedundancyOptimizer  # here: not every run pays its import

    return ZeroRedundancyOptimizer(groups, optimizer_class=type(optimizer), process_group=ctx.group("dp"),
                                   **defaults)
