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

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard

from coursekit.train.models import ActivationCheckpoint, _is_checkpoint_unit, model_spec
from coursekit.train.parallel import tensor


def shard_units(model: nn.Module, cfg: Any) -> list[nn.Module]:
    """The modules that become FSDP units before the root: the spec's blocks, else the checkpoint units."""
    spec = model_spec(cfg.model)
    if spec.blocks is not None:
        return spec.blocks(model)
    return [m for m in model.modules()  # the blocks, not their checkpointing wrappers (which delegate attributes)
            if m is not model and not isinstance(m, ActivationCheckpoint) and _is_checkpoint_unit(m)]


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    if ctx.mesh is None:
        return model
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
