"""The gradient noise scale B_simple in train mode, from the micro-batches of accumulation (``--noise-every``).

McCandlish et al. 2018, appendix A: with ``E|G_b|² = |G|² + tr(Σ)/b`` at two batch sizes, the unbiased
``|G|² = (B_big |G_big|² − b_small |G_small|²) / (B_big − b_small)`` and ``tr(Σ) = (|G_small|² − |G_big|²) /
(1/b_small − 1/B_big)``. One optimiser step of ``k`` micro-batches (``--accumulation-steps k``) gives both for
free: each micro-batch's gradient is a small batch (``|G_small|²``: their mean squared norm), the step's
accumulated gradient the big one. Single estimates are very noisy (tr Σ and |G|² are differences), so
``|G|²`` and ``tr(Σ)`` are each smoothed by an exponential moving average (decay ``--noise-ema``) and
``B_simple = EMA(tr Σ) / EMA(|G|²)`` — the ratio of the averages, not an average of ratios. The model is in
train mode (batch norm as in training), the gradients are the training step's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from coursekit.train.probes import two_batch_noise_scale


class TwoBatchNoise:
    """Fed by the training step: ``micro_batch_done(weight)`` after each micro-batch's backward (its loss
    was multiplied by ``weight``), ``step_done(batch, grad_scale)`` before the optimizer step; ``record()``:
    the fields of a step record."""

    def __init__(self, model: nn.Module, every: int, decay: float) -> None:
        if every < 1:
            raise ValueError(f"noise_every={every} must be at least 1")
        if not 0 <= decay < 1:
            raise ValueError(f"noise_ema={decay} must be in [0, 1)")
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.every, self.decay = every, decay
        self._previous: list[torch.Tensor] | None = None
        self._small_sq: list[torch.Tensor] = []
        self.grad_sq: float | None = None  # EMA of the |G|² estimates
        self.trace_sigma: float | None = None  # EMA of the tr(Σ) estimates
        self.estimates = 0

    def due(self, step: int) -> bool:
        """Measure at 0-based optimiser step ``step``?"""
        return step % self.every == 0

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad.detach().float() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32)
                for p in self.params]

    def micro_batch_done(self, weight: float) -> None:
        """The gradient this micro-batch added, divided by its loss weight: its own mean-loss gradient."""
        now = self._grads()
        before = self._previous
        diff = now if before is None else [a - b for a, b in zip(now, before, strict=True)]
        self._small_sq.append(sum((d.double() ** 2).sum() for d in diff) / weight**2)  # type: ignore[arg-type]
        self._previous = [g.clone() for g in now]

    def step_done(self, batch: int, grad_scale: float = 1.0) -> None:
        """The step's gradient is the big batch: one estimate of |G|² and tr(Σ) into the moving averages."""
        parts = len(self._small_sq)
        if parts < 2:
            raise ValueError(f"the two-batch estimator needs at least 2 micro-batches per step, got {parts}")
        big_sq = float(sum((g.double() ** 2).sum() for g in self._grads())) / grad_scale**2
        small_sq = float(torch.stack(self._small_sq).mean()) / grad_scale**2
        self._previous, self._small_sq = None, []
        estimate = two_batch_noise_scale(small_sq, big_sq, batch / parts, batch)
        self.grad_sq = self._ema(self.grad_sq, estimate["grad_sq"])
        self.trace_sigma = self._ema(self.trace_sigma, estimate["trace_sigma"])
        self.estimates += 1

    def _ema(self, average: float | None, value: float) -> float:
        return value if average is None else self.decay * average + (1 - self.decay) * value

    def record(self) -> dict[str, Any]:
        """``grad_sq``, ``trace_sigma`` (moving averages) and ``b_simple`` (their ratio; None while |G|² <= 0)."""
        if self.grad_sq is None or self.trace_sigma is None:
            return {}
        b_simple = self.trace_sigma / self.grad_sq if self.grad_sq > 0 else None
        return {"grad_sq": self.grad_sq, "trace_sigma": self.trace_sigma, "b_simple": b_simple,
                "noise_estimates": self.estimates}
