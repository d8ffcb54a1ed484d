"""The ``parallel`` block of a run's summary, and ``--save-weights`` (see this package's docstring)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from coursekit.distributed import unwrap_model
from coursekit.train.parallel.measure import (
    full_state_dict,
    gather_ranks,
    optimizer_bytes,
    parameter_bytes,
    peak_memory_bytes,
)


def _bubble(cfg: Any, pctx: Any, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Measured bubble (mean over stages of 1 - busy / wall) and the theory (p-1)/(m+p-1)."""
    none = {"bubble_fraction": None, "bubble_fraction_theory": None, "stage_busy_s": None, "schedule_wall_s": None}
    if cfg.parallel == "naive":
        times = ranks[0].get("stage") or {}
        stages, microbatches = len(times.get("busy_s", [])), 1
        busy, wall, bubbles = times.get("busy_s"), times.get("wall_s"), times.get("bubbles")
    elif cfg.parallel == "pipeline":
        first_replica = [r["stage"] for r in ranks if r.get("stage") and r["coords"].get("dp", 0) == 0]
        first_replica.sort(key=lambda s: s["stage"])
        stages, microbatches = pctx.size("pp"), cfg.microbatches
        busy = [s["busy_s"] for s in first_replica]
        # the pipeline's step lasts until its slowest stage is done (the last stage returns before the drain)
        wall = max((s["wall_s"] for s in first_replica), default=0.0)
        bubbles = [1 - b / wall for b in busy] if wall > 0 else None
    else:
        return none
    if not stages:
        return none
    return {"bubble_fraction": statistics.fmean(bubbles) if bubbles else None,
            "bubble_fraction_theory": (stages - 1) / (microbatches + stages - 1),
            "stage_busy_s": busy, "schedule_wall_s": wall}


def parallel_summary(cfg: Any, pctx: Any, trainer: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """Every rank's local bytes and peak memory (gathered: a collective), rates, bubble; writes the weights."""
    model = trainer.model
    for module in model.modules():  # zero2 keeps parameters gathered after a forward without backward (eval)
        if cfg.parallel in ("zero2", "zero3", "fsdp_tp") and callable(getattr(module, "reshard", None)):
            module.reshard()
    record: dict[str, Any] = {
        "rank": pctx.dist.rank, "coords": {dim: pctx.rank_in(dim) for dim in pctx.sizes},
        "param_bytes": parameter_bytes(model), "grad_bytes": getattr(trainer, "grad_bytes", None),
        "optimizer_bytes": optimizer_bytes(trainer.optimizer), "peak_memory_bytes": peak_memory_bytes(pctx.device)}
    stage_times = getattr(model, "stage_times", None)
    if stage_times is not None:
        record["stage"] = stage_times()
    ranks = gather_ranks(record, pctx.world_size)
    samples_per_s = summary.get("images_per_s")
    stages = pctx.size("pp") if cfg.parallel == "pipeline" else None
    if cfg.parallel == "naive":
        stages = len(record.get("stage", {}).get("busy_s", [])) or None
    block: dict[str, Any] = {
        "strategy": cfg.parallel, "mesh": dict(pctx.sizes), "world_size": pctx.world_size,
        "dp": pctx.size("dp"), "tp": pctx.size("tp"), "pp": stages or pctx.size("pp"),
        "microbatches": cfg.microbatches if cfg.parallel in ("pipeline", "naive") else None,
        "pipeline_schedule": cfg.pipeline_schedule if cfg.parallel == "pipeline" else None,
        "stage_delay_ms": cfg.stage_delay_ms, "activation_checkpointing": cfg.activation_checkpointing,
        "ranks": ranks, "samples_per_s": samples_per_s,
        "tokens_per_s": samples_per_s * cfg.seq_len if samples_per_s and cfg.dataset == "tokens" else None,
        "step_time_s": summary["global_batch"] / samples_per_s if samples_per_s else None,
        "final_loss": summary.get("train_loss"), **_bubble(cfg, pctx, ranks),
        "weights_file": save_weights(cfg, pctx, trainer.run_model) if cfg.save_weights else None}
    return block


def gathered_state_dict(cfg: Any, pctx: Any, run_model: nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole model's state dict (keys of the serial model) on the rank that holds the value; every
    rank must call it (it gathers shards and stages)."""
    model = unwrap_model(run_model)
    if cfg.parallel == "pipeline":
        part = {k: v.detach().cpu() for k, v in model.part.state_dict().items()}
        parts = gather_ranks(part, pctx.world_size)
        return {k: v for p in parts for k, v in p.items()} if pctx.holds_value else None
    state = full_state_dict(getattr(model, "model", model) if cfg.parallel == "naive" else model)
    return state if pctx.holds_value else None


def save_weights(cfg: Any, pctx: Any, run_model: nn.Module) -> str:
    """``torch.save`` the gathered state dict to ``cfg.save_weights`` (from the rank holding it)."""
    state = gathered_state_dict(cfg, pctx, run_model)
    path = Path(cfg.save_weights)
    if state is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, path)
    if dist.is_initialized():
        dist.barrier()
    return str(path)
