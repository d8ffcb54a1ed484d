"""Tensor parallelism (Megatron) with ``parallelize_module``: each block's matrices split over the tp ranks.

In a block's MLP, ``fc1`` is split by *columns* (each rank computes some hidden units, no communication),
``fc2`` by *rows* (each rank multiplies its hidden units by its rows: partial sums, one all-reduce). The
attention is split the same way by heads: q, k, v column-wise (whole heads per rank), the output
projection row-wise. Per block and step: 2 all-reduces of the activations in forward, 2 in backward.
The plan is declared with the model (``ModelSpec.tp_plan``); embeddings, norms and the head stay
replicated. With dp > 1 (``--tp`` smaller than the world) the gradients are averaged over the dp ranks
before the optimizer step (``sync_gradients``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from coursekit.train.models import MODEL_SPECS, model_spec
from coursekit.train.parallel.measure import all_reduce_gradients

STRATEGIES = ("tensor",)
OPTIONS = {"tensor": ("tp",)}
SHARDED = STRATEGIES


def sizes(cfg: Any, world_size: int) -> dict[str, int]:
    """``--tp`` ranks split each block (default: every process), dp = world size / tp."""
    tp = cfg.tp or world_size
    return {"dp": world_size // tp, "tp": tp}


def plan_problems(cfg: Any) -> list[str]:
    """Tensor parallelism needs the model's plan and whole attention heads per rank (also ``fsdp_tp``'s)."""
    problems = []
    spec = MODEL_SPECS.get(cfg.model)
    if spec is not None and spec.tp_plan is None:
        with_plan = ", ".join(n for n, s in MODEL_SPECS.items() if s.tp_plan is not None)
        problems.append(f"parallel={cfg.parallel!r}: model={cfg.model!r} declares no tensor-parallel plan; "
                        f"use a model that does ({with_plan})")
    if cfg.tp and cfg.model == "gpt" and cfg.gpt_heads % cfg.tp:
        problems.append(f"gpt_heads={cfg.gpt_heads} is not divisible by tp={cfg.tp}: every tensor-parallel rank "
                        "computes whole heads; pick tp dividing the heads")
    return problems


def world_problems(cfg: Any, tp: int, world_size: int) -> list[str]:
    """``tp`` ranks per block on ``world_size`` processes (also ``fsdp_tp``'s)."""
    problems = []
    if world_size % tp:
        problems.append(f"tp={tp} does not divide the {world_size} processes: tp x pp x dp must equal the "
                        "world size; pick tp dividing it")
    if cfg.model == "gpt" and cfg.gpt_heads % tp:
        problems.append(f"gpt_heads={cfg.gpt_heads} is not divisible by tp={tp}: every tensor-parallel rank "
                        "computes whole heads")
    return problems


def problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    if world_size is None:
        return plan_problems(cfg)
    return world_problems(cfg, sizes(cfg, world_size)["tp"], world_size)


def apply_plan(model: nn.Module, tp_mesh: Any, cfg: Any) -> nn.Module:
    """Split every block of ``model`` over ``tp_mesh`` with the model spec's plan (in place)."""
    spec = model_spec(cfg.model)
    if spec.tp_plan is None or spec.blocks is None:
        raise ValueError(f"parallel={cfg.parallel!r}: model={cfg.model!r} declares no tensor-parallel plan")
    from torch.distributed.tensor.parallel import parallelize_module  # here: DTensor costs ~1 s a process

    for block in spec.blocks(model):
        parallelize_module(block, tp_mesh, spec.tp_plan())
    return model


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    if ctx.mesh is None:
        return model
    apply_plan(model, ctx.mesh["tp"], cfg)
    if ctx.dp_size > 1:
        model.sync_gradients = partial(all_reduce_gradients, model, ctx.group("dp"), ctx.dp_size)
    return model
