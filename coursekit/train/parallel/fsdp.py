"""FSDP2 (``fully_shard``): ZeRO-3, ZeRO-2-like, and FSDP over tensor parallelism on a 2-D mesh.

``fully_shard(module)`` turns the module's parameters into DTensors sharded along dim 0 over the
data-parallel ranks. Before a module's forward (and again before its backward) its parameters are
all-gathered; after backward the gradients are *reduce-scattered*, so each rank keeps the gradient
shard of its parameter shard, and the optimizer only ever sees (and keeps state for) shards.

- ``zero3``: ``reshard_after_forward=True``: the gathered parameters are freed after each block's
  forward and gathered again for backward: 2Ψ + 2Ψ + kΨ all divided by N (one block gathered at a time);
- ``zero2``: ``reshard_after_forward=False``: the gathered parameters stay from forward to backward (no
  second all-gather, more memory during the step); gradients and optimizer state stay sharded;
- ``fsdp_tp``: the blocks are first split by tensor parallelism over the mesh's ``tp`` dimension, then
  sharded by FSDP over its ``dp`` dimension (a 2-D mesh: TP inside a node, FSDP across).

Every block (the unit of the model spec, or each activation-checkpointing unit) is its own FSDP unit,
then the root (embeddings, head). With one process the model is returned as is.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from coursekit.train.models import ActivationCheckpoint, _is_checkpoint_unit, model_spec
from coursekit.train.parallel import tensor

STRATEGIES = ("zero2", "zero3", "fsdp_tp")
OPTIONS = {"fsdp_tp": ("tp",)}
SHARDED = STRATEGIES
FSDP_TP_DEFAULT_TP = 2  # fsdp_tp without --tp: 2 tensor-parallel ranks (a pair of GPUs), FSDP over the rest


def sizes(cfg: Any, world_size: int) -> dict[str, int]:
    if cfg.parallel != "fsdp_tp":
        return {"dp": world_size}
    tp = cfg.tp or min(FSDP_TP_DEFAULT_TP, world_size)
    return {"dp": world_size // tp, "tp": tp}


def problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    if world_size is None:
        return tensor.plan_problems(cfg) if cfg.parallel == "fsdp_tp" else []
    problems = []
    if cfg.parallel == "fsdp_tp":
        tp = sizes(cfg, world_size)["tp"]
        problems += tensor.world_problems(cfg, tp, world_size)
        if world_size > 1 and world_size // max(tp, 1) < 2:
            problems.append(f"parallel='fsdp_tp' is a 2-D mesh (dp x tp) but tp={tp} leaves dp=1 on "
                            f"{world_size} processes: use 'tensor', or a smaller --tp")
    if device_type == "cpu" and cfg.precision in ("fp16",):
        problems.append(f"parallel={cfg.parallel!r} with fp16 on a CPU: use fp32 or bf16")
    return problems


def before_summary(model: nn.Module) -> None:
    """Shard the parameters again: zero2 keeps them gathered after a forward without backward (evaluation)."""
    for module in model.modules():
        if callable(getattr(module, "reshard", None)):
            module.reshard()


def shard_units(model: nn.Module, cfg: Any) -> list[nn.Module]:
    """The modules that become FSDP units before the root: the spec's blocks, else the checkpoint units."""
    spec = model_spec(cfg.model)
    if spec.blocks is not None:
        return spec.blocks(model)
    return [m for m in model.modules()  # the blocks, not their checkpointing wrappers (which delegate attributes)
            if m is not model and not isinstance(m, ActivationCheckpoint) and _is_checkpoint_unit(m)]


def _fully_shard() -> Any:
    """FSDP2's ``fully_shard``, imported when a run shards (DTensor's import costs ~1 s a process)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    if ctx.mesh is None:
        return model
    fully_shard = _fully_shard()
    reshard = cfg.parallel != "zero2"
    mesh = ctx.mesh
    if cfg.parallel == "fsdp_tp":
        tensor.apply_plan(model, ctx.mesh["tp"], cfg)
        mesh = ctx.mesh["dp"]
    elif "dp" in ctx.sizes and len(ctx.sizes) > 1:
        mesh = ctx.mesh["dp"]
    for unit in shard_units(model, cfg):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    return model
