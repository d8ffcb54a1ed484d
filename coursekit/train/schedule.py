"""Learning-rate schedules, stepped once per optimiser step: ``build_scheduler(...)`` -> ``LambdaLR``.

The LR at step ``s`` is ``lr * lr_factor(s)`` (``lr`` = the optimizer's, already scaled by
``scaled_lr``). With ``W = round(cfg.warmup_epochs * steps_per_epoch)`` warmup steps:

- warmup, ``s < W``: ``factor = start + (1 - start) * s / W``, a straight line from ``start`` to 1.
  ``start`` (``warmup_start_factor``) defaults to ``cfg.lr / lr``, the unscaled base LR, when LR
  scaling raised the LR (Goyal et al. 2017: from eta to k * eta; with linear scaling and the base
  batch on each GPU this is NVIDIA DLI's ``LinearLR(start_factor=1 / num_gpus)``), else to ``1 / W``;
``--warmup-steps`` gives ``W`` in steps directly;
- then, with ``p = (s - W) / (total_steps - W)`` the progress after warmup:
  ``constant``: 1; ``linear``: ``1 - p``, a straight line down to 0 at the last step (lab 07's one shape); ``step``: ``step_gamma ** floor(epoch / step_every_epochs)`` with
  ``epoch = s / steps_per_epoch`` counted from step 0; ``cosine``: ``(1 + cos(pi * p)) / 2``;
  ``onecycle``: torch's ``OneCycleLR`` LR shape (cosine up from ``1 / ONECYCLE_DIV_FACTOR`` over the
  first ``ONECYCLE_PCT_START`` of the steps, then cosine down to
  ``1 / (ONECYCLE_DIV_FACTOR * ONECYCLE_FINAL_DIV_FACTOR)``), without its momentum cycling.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from coursekit.train.config import SCHEDULES

ONECYCLE_PCT_START = 0.3
ONECYCLE_DIV_FACTOR = 25.0
ONECYCLE_FINAL_DIV_FACTOR = 1e4


def _cosine(start: float, end: float, fraction: float) -> float:
    return end + (start - end) * (1 + math.cos(math.pi * min(max(fraction, 0.0), 1.0))) / 2


def onecycle_factor(step: int, total_steps: int) -> float:
    """The LR factor of torch's OneCycleLR (anneal "cos", three_phase False) at ``step`` of ``total_steps``."""
    initial = 1 / ONECYCLE_DIV_FACTOR
    final = initial / ONECYCLE_FINAL_DIV_FACTOR
    peak_step = ONECYCLE_PCT_START * total_steps - 1
    if step <= peak_step:
        return _cosine(initial, 1.0, step / peak_step if peak_step > 0 else 1.0)
    return _cosine(1.0, final, (step - peak_step) / max(total_steps - 1 - peak_step, 1e-12))


def lr_factor(step: int, *, schedule: str, steps_per_epoch: int, total_steps: int, warmup_steps: int = 0,
              warmup_start_factor: float = 1.0, step_every_epochs: int = 30, step_gamma: float = 0.1) -> float:
    """The multiplier of the LR at optimiser step ``step`` (0-based); see the module docstring."""
    if step < warmup_steps:
        return warmup_start_factor + (1 - warmup_start_factor) * step / warmup_steps
    after = step - warmup_steps
    length = max(total_steps - warmup_steps, 1)
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        return step_gamma ** math.floor(step / steps_per_epoch / step_every_epochs)
    if schedule == "cosine":
        return _cosine(1.0, 0.0, after / length)
    if schedule == "linear":
        return max(0.0, 1.0 - after / length)
    if schedule == "onecycle":
        return onecycle_factor(min(after, length - 1), length)
    raise ValueError(f"schedule={schedule!r} is unknown; choose one of {', '.join(SCHEDULES)}")


def default_warmup_start_factor(base_lr: float, lr: float, warmup_steps: int) -> float:
    """``base_lr / lr`` when scaling raised the LR, else ``1 / warmup_steps`` (1 without warmup)."""
    if warmup_steps <= 0:
        return 1.0
    if 0 < base_lr < lr:
        return base_lr / lr
    return 1 / warmup_steps


def build_scheduler(optimizer: Optimizer, cfg: Any, steps_per_epoch: int, total_steps: int, *,
                    warmup_start_factor: float | None = None) -> LambdaLR:
    """A per-step ``LambdaLR`` for ``cfg.schedule`` with ``cfg.warmup_epochs`` of linear warmup."""
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"schedule={cfg.schedule!r} is unknown; choose one of {', '.join(SCHEDULES)}")
    if steps_per_epoch < 1 or total_steps < 1:
        raise ValueError(f"steps_per_epoch ({steps_per_epoch}) and total_steps ({total_steps}) must be >= 1")
    if cfg.warmup_epochs < 0:
        raise ValueError(f"warmup_epochs={cfg.warmup_epochs} must be >= 0")
    if cfg.schedule == "step" and (cfg.step_every_epochs < 1 or cfg.step_gamma <= 0):
        raise ValueError(f"step schedule needs step_every_epochs >= 1 (got {cfg.step_every_epochs}) "
                         f"and step_gamma > 0 (got {cfg.step_gamma})")
    warmup_steps = round(cfg.warmup_epochs * steps_per_epoch)
    if getattr(cfg, "warmup_steps", None) is not None:
        warmup_steps = cfg.warmup_steps
    if warmup_start_factor is None:
        warmup_start_factor = getattr(cfg, "warmup_start_factor", None)
    if warmup_start_factor is None:
        lr = optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"])
        warmup_start_factor = default_warmup_start_factor(cfg.lr, lr, warmup_steps)
    factor = partial(lr_factor, schedule=cfg.schedule, steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                     warmup_steps=warmup_steps, warmup_start_factor=warmup_start_factor,
                     step_every_epochs=cfg.step_every_epochs, step_gamma=cfg.step_gamma)
    return LambdaLR(optimizer, lr_lambda=factor)
