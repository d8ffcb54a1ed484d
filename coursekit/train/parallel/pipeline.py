"""Pipeline parallelism with ``torch.distributed.pipelining``: one stage of the model per rank.

The model spec cuts the model into ``pp`` stages (``ModelSpec.split``: equal runs of GPT blocks, the
embedding on the first stage, the head on the last); rank ``i`` of the pp group keeps stage ``i`` only.
A batch is cut into ``--microbatches`` m micro-batches that flow through the stages:

- GPipe: all m forwards, then all m backwards: every stage keeps m micro-batches of activations;
- 1F1B: after a warm-up of p forwards, one forward and one backward alternate: at most p micro-batches
  of activations in flight (torch refuses m < p).

Either way each stage idles while the pipeline fills and drains: the bubble, a fraction (p-1)/(m+p-1)
of the step when backward takes twice the forward. It is measured here: each stage's busy time (its
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
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from coursekit.train.models import model_spec
from coursekit.train.parallel.measure import DelayedStage, StageClock, all_reduce_gradients

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class PipelineRunner(nn.Module):
    """This rank's stage and the schedule that drives it; the engine's loop calls :meth:`pipeline_step`."""

    def __init__(self, part: nn.Module, ctx: Any, cfg: Any) -> None:
        super().__init__()
        self.part = part  # the stage's modules under the whole model's names (``part.state_dict()``)
        self.stage_index, self.stages = ctx.rank_in("pp"), ctx.size("pp")
        self.microbatches, self.ctx = cfg.microbatches, ctx
        self.is_first, self.is_last = self.stage_index == 0, self.stage_index == self.stages - 1
        module = DelayedStage(part, cfg.stage_delay_ms) if cfg.stage_delay_ms else part
        self.stage = PipelineStage(module, self.stage_index, self.stages, ctx.device, group=ctx.group("pp"))
        self.schedule = SCHEDULES[cfg.pipeline_schedule](self.stage, cfg.microbatches, loss_fn=self._loss,
                                                         scale_grads=False)
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
