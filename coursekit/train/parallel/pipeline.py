"""Pipeline parallelism with ``torch.distributed.pipelining``: one stage of the model per rank.

The model spec cuts the model into ``pp`` stages (``ModelSpec.split``: equal runs of GPT blocks, the
embedding on the first stage, the head on the last); rank ``i`` of the pp group keeps stage ``i`` only.
A batch is cut into ``--microbatches`` m micro-batches that flow through the stages:

- GPipe: all m forwards, then all m backwards: every stage keeps m micro-batches of activations;
- 1F1B: after a warm-up of p forwards, one forward and one backward alternate: at most p micro-batches
  of activations in flight (torch refuses m < p).

Either way each stage idles while the pipeline fills and drains: the bubble, a fraction (p-1)/(m+p-1)
of the step whatever the ratio of backward to forward time (each stage idles p-1 forward-plus-backward
times of the m+p-1 its step lasts). It is measured here: each stage's busy time (its
``forward_one_chunk``/``backward_one_chunk``) against the wall time of the schedule's step.

Pitfalls handled: schedules scale gradients by 1/m by default, which breaks gradient accumulation
(torchtitan #1732): ``scale_grads=False`` and the loss is scaled instead; the loss exists on the last
stage only (``counts_samples`` in ``ParallelContext``); every micro-batch must have the same shape, so
the engine drops a last incomplete batch; there is no evaluation pass (no validation loss).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from coursekit.train import data as train_data
from coursekit.train.models import MODEL_SPECS, model_spec
from coursekit.train.parallel.measure import (
    DelayedStage,
    StageClock,
    all_reduce_gradients,
    bubble,
    gather_ranks,
)

STRATEGIES = ("pipeline",)
OPTIONS = {"pipeline": ("pp", "microbatches", "stage_delay_ms")}
SHARDED = STRATEGIES
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}  # torch.distributed.pipelining's
NEEDS_WHOLE_MODEL = ("grad_noise_batches", "log_params", "target_acc", "trust_ratio_every")  # options


def sizes(cfg: Any, world_size: int) -> dict[str, int]:
    """``--pp`` stages (default: every process), dp = world size / pp."""
    pp = cfg.pp or world_size
    return {"dp": world_size // pp, "pp": pp}


def stage_problems(cfg: Any, stages: int | None) -> list[str]:
    """A model cut into ``stages`` runs of blocks, batches into micro-batches (also the naive split's)."""
    problems = []
    spec = MODEL_SPECS.get(cfg.model)
    if spec is not None and spec.split is None:
        with_split = ", ".join(n for n, s in MODEL_SPECS.items() if s.split is not None)
        problems.append(f"parallel={cfg.parallel!r}: model={cfg.model!r} declares no pipeline split points; "
                        f"use a model that does ({with_split})")
    if cfg.batch_size % cfg.microbatches:
        problems.append(f"microbatches={cfg.microbatches} does not divide batch_size={cfg.batch_size}: "
                        "the batch is cut into equal micro-batches; pick a divisor")
    if cfg.batch_size % cfg.accumulation_steps == 0 and (cfg.batch_size // cfg.accumulation_steps) % cfg.microbatches:
        problems.append(f"microbatches={cfg.microbatches} does not divide the micro-batch of the accumulation "
                        f"(batch_size / accumulation_steps = {cfg.batch_size // cfg.accumulation_steps})")
    if stages and cfg.model == "gpt" and cfg.gpt_layers % stages:
        problems.append(f"gpt_layers={cfg.gpt_layers} is not divisible by the {stages} pipeline stages "
                        "(pp): every stage gets the same number of blocks; change --gpt-layers or --pp")
    return problems


def problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    if world_size is not None:
        return _world_problems(cfg, world_size)
    stages = cfg.pp
    problems = stage_problems(cfg, stages)
    if stages and cfg.pipeline_schedule == "1f1b" and cfg.microbatches < stages:
        problems.append(f"pipeline_schedule='1f1b' needs at least as many micro-batches as stages: "
                        f"microbatches={cfg.microbatches} < pp={stages}; raise --microbatches or use gpipe")
    if cfg.precision == "fp16":
        problems.append("parallel='pipeline' runs without a loss scaler: use --precision bf16 or fp32, not fp16")
    needs_forward = [name for name in NEEDS_WHOLE_MODEL if getattr(cfg, name, None)]
    if needs_forward:
        problems.append(f"{', '.join(needs_forward)}: a pipeline has no whole model on one rank to evaluate or "
                        "probe; use another --parallel strategy for these measurements")
    return problems


def _world_problems(cfg: Any, world_size: int) -> list[str]:
    problems = []
    pp = cfg.pp or world_size
    if world_size % pp:
        problems.append(f"pp={pp} does not divide the {world_size} processes: tp x pp x dp must equal the "
                        "world size; pick pp dividing it")
    if cfg.pp is None and cfg.model == "gpt" and cfg.gpt_layers % pp:  # (an explicit --pp: checked already)
        problems.append(f"gpt_layers={cfg.gpt_layers} is not divisible by the {pp} pipeline stages (pp = "
                        "the world size); change --gpt-layers or --pp")
    if cfg.pp is None and cfg.pipeline_schedule == "1f1b" and cfg.microbatches < pp:
        problems.append(f"pipeline_schedule='1f1b' needs microbatches >= stages: microbatches="
                        f"{cfg.microbatches} < pp={pp}; raise --microbatches or use gpipe")
    return problems


def build_data(cfg: Any, shard: Any) -> Any:
    """Every micro-batch must have the same shape (no short last batch), and a pipeline has no evaluation
    pass (no whole model on one rank): no validation loader."""
    data = train_data.build_data(cfg.replace(drop_last=True), shard)
    data.val_loader = None
    return data


class PipelineRunner(nn.Module):
    """This rank's stage and the schedule that drives it; the engine's loop calls :meth:`pipeline_step`."""

    def __init__(self, part: nn.Module, ctx: Any, cfg: Any) -> None:
        super().__init__()
        self.part = part  # the stage's modules under the whole model's names (``part.state_dict()``)
        self.stage_index, self.stages = ctx.rank_in("pp"), ctx.size("pp")
        self.microbatches, self.ctx = cfg.microbatches, ctx
        self.is_first, self.is_last = self.stage_index == 0, self.stage_index == self.stages - 1
        # X ms per batch: each of its m micro-batches sleeps X/m (a micro-batch is 1/m of the work), so a step
        # computes as long whatever m is and only the bubble and the per-micro-batch costs change the time
        module = DelayedStage(part, cfg.stage_delay_ms / cfg.microbatches) if cfg.stage_delay_ms else part
        from torch.distributed import pipelining  # here: it imports torch._dynamo (~1.5 s a process)

        self.stage = pipelining.PipelineStage(module, self.stage_index, self.stages, ctx.device, group=ctx.group("pp"))
        schedule = getattr(pipelining, SCHEDULES[cfg.pipeline_schedule])
        self.schedule = schedule(self.stage, cfg.microbatches, loss_fn=self._loss, scale_grads=False)
        self.clock = StageClock(1, ctx.device)
        self.stage.forward_one_chunk = self.clock.timed(0, self.stage.forward_one_chunk)
        self.stage.backward_one_chunk = self.clock.timed(0, self.stage.backward_one_chunk)
        self._loss_fn: Any = None
        self._scale = 1.0
        if ctx.dp_size > 1:
            self.sync_gradients = lambda: all_reduce_gradients(self.part, ctx.group("dp"), ctx.dp_size)

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._loss_fn(output, target) * self._scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a pipeline stage has no forward of its own: the engine calls pipeline_step")

    def pipeline_step(self, x: torch.Tensor, y: torch.Tensor, loss_fn: Any, weight: float
                      ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Forward and backward of one batch through the schedule; ``weight``: this batch's share of the
        optimizer step (gradient accumulation). Returns (mean loss, output) on the last stage, else Nones."""
        self._loss_fn, self._scale = loss_fn, weight / self.microbatches
        losses: list[torch.Tensor] = []
        self.clock.sync()
        started = time.perf_counter()
        if self.is_first and self.is_last:
            output = self.schedule.step(x, target=y, losses=losses)
        elif self.is_first:
            output = self.schedule.step(x)
        elif self.is_last:
            output = self.schedule.step(target=y, losses=losses)
        else:
            output = self.schedule.step()
        self.clock.sync()
        self.clock.end_step(time.perf_counter() - started)
        if not self.is_last:
            return None, None
        loss = torch.stack([loss.detach() for loss in losses]).sum() / (self._scale * self.microbatches)
        return loss, output

    def stage_times(self) -> dict[str, Any]:
        bubbles = self.clock.bubbles()
        return {"stage": self.stage_index, "busy_s": self.clock.busy[0], "wall_s": self.clock.wall,
                "bubble": bubbles[0] if bubbles else None}


def apply(model: nn.Module, ctx: Any, cfg: Any) -> nn.Module:
    """This rank's stage of ``model`` in a :class:`PipelineRunner` (one stage with one process)."""
    spec = model_spec(cfg.model)
    if spec.split is None:
        raise ValueError(f"parallel='pipeline': model={cfg.model!r} declares no pipeline split points")
    if ctx.mesh is None:
        return model  # one process: plain training
    parts = spec.split(model, ctx.size("pp"))
    return PipelineRunner(parts[ctx.rank_in("pp")], ctx, cfg)


def theory_bubble(stages: int, microbatches: int) -> float:
    """(p - 1) / (m + p - 1): the idle share of a GPipe or 1F1B step (backward = 2 x forward)."""
    return (stages - 1) / (microbatches + stages - 1)


# ----------------------------------------------------------------------------- summary and --save-weights


def summary_extras(cfg: Any, pctx: Any, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Stages, micro-batches, schedule, and the measured bubble: mean over the stages of the first replica of
    1 - busy / wall, the wall being the slowest stage's (the last stage returns before the drain)."""
    first_replica = sorted((r["stage"] for r in ranks if r.get("stage") and r["coords"].get("dp", 0) == 0),
                           key=lambda s: s["stage"])
    busy = [s["busy_s"] for s in first_replica]
    wall = max((s["wall_s"] for s in first_replica), default=0.0)
    bubbles = [1 - b / wall for b in busy] if wall > 0 else None
    return {"pp": pctx.size("pp"), "microbatches": cfg.microbatches, "pipeline_schedule": cfg.pipeline_schedule,
            **bubble(pctx.size("pp"), cfg.microbatches, busy, wall, bubbles)}


def full_state(model: nn.Module, pctx: Any) -> dict[str, torch.Tensor] | None:
    """Every stage's part gathered, under the whole model's keys, on the rank that holds the value."""
    part = {k: v.detach().cpu() for k, v in model.part.state_dict().items()}
    parts = gather_ranks(part, pctx.world_size)
    return {k: v for p in parts for k, v in p.items()} if pctx.holds_value else None
