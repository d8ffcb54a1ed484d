"""The ``parallel`` block of a run's summary, and ``--save-weights`` (see this package's docstring).

What differs between strategies comes from the strategy module (``summary_extras``, ``before_summary``,
``full_state``); without them a strategy reports one pipeline stage and no bubble.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from coursekit.train.parallel.measure import (
    NO_BUBBLE,
    full_state_dict,
    gather_ranks,
    optimizer_bytes,
    parameter_bytes,
    peak_memory_bytes,
)
from coursekit.train.parallel.process_group import unwrap_model


def _extras(cfg: Any, pctx: Any, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """A strategy without stages: its mesh's pp, no micro-batches, no schedule, no bubble."""
    return {"pp": pctx.size("pp"), "microbatches": None, "pipeline_schedule": None, **NO_BUBBLE}


def parallel_summary(cfg: Any, pctx: Any, trainer: Any, summary: dict[str, Any], strategy: ModuleType
                     ) -> dict[str, Any]:
    """Every rank's local bytes and peak memory (gathered: a collective), rates, bubble; writes the weights.
    ``strategy``: the module of ``cfg.parallel``."""
    model = trainer.model
    before_summary = getattr(strategy, "before_summary", None)
    if before_summary is not None:
        before_summary(model)
    record: dict[str, Any] = {
        "rank": pctx.dist.rank, "coords": {dim: pctx.rank_in(dim) for dim in pctx.sizes},
        "param_bytes": parameter_bytes(model), "grad_bytes": getattr(trainer, "grad_bytes", None),
        "optimizer_bytes": optimizer_bytes(trainer.optimizer), "peak_memory_bytes": peak_memory_bytes(pctx.device)}
    stage_times = getattr(model, "stage_times", None)
    if stage_times is not None:
        record["stage"] = stage_times()
    ranks = gather_ranks(record, pctx.world_size)
    extras = getattr(strategy, "summary_extras", _extras)(cfg, pctx, ranks)
    samples_per_s = summary.get("images_per_s")
    return {
        "strategy": cfg.parallel, "mesh": dict(pctx.sizes), "world_size": pctx.world_size,
        "dp": pctx.size("dp"), "tp": pctx.size("tp"), "pp": extras["pp"],
        "microbatches": extras["microbatches"], "pipeline_schedule": extras["pipeline_schedule"],
        "stage_delay_ms": cfg.stage_delay_ms, "activation_checkpointing": cfg.activation_checkpointing,
        "ranks": ranks, "samples_per_s": samples_per_s,
        "tokens_per_s": samples_per_s * cfg.seq_len if samples_per_s and cfg.dataset == "tokens" else None,
        "step_time_s": summary["global_batch"] / samples_per_s if samples_per_s else None,
        "final_loss": summary.get("train_loss"),
        **{key: extras[key] for key in NO_BUBBLE},
        "weights_file": save_weights(cfg, pctx, trainer.run_model, strategy) if cfg.save_weights else None}


def gathered_state_dict(pctx: Any, run_model: nn.Module, strategy: ModuleType) -> dict[str, torch.Tensor] | None:
    """The whole model's state dict (keys of the serial model) on the rank that holds the value; every
    rank must call it (it gathers shards and stages)."""
    model = unwrap_model(run_model)
    full_state = getattr(strategy, "full_state", None)
    if full_state is not None:
        return full_state(model, pctx)
    state = full_state_dict(model)
    return state if pctx.holds_value else None


def save_weights(cfg: Any, pctx: Any, run_model: nn.Module, strategy: ModuleType) -> str:
    """``torch.save`` the gathered state dict to ``cfg.save_weights`` (from the rank holding it)."""
    state = gathered_state_dict(pctx, run_model, strategy)
    path = Path(cfg.save_weights)
    if state is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)
    if dist.is_initialized():
        dist.barrier()
    return str(path)
