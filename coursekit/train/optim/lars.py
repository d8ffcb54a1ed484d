"""LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, arXiv:1708.03888, Algorithm 1).

For each parameter tensor ``w`` (a "layer") with gradient ``g``, global learning rate ``lr``,
weight decay ``beta``, trust coefficient ``eta`` and momentum ``m``::

    local_lr = eta * ||w|| / (||g|| + beta * ||w||)        (1 when ||w|| or ||g|| is 0)
    v        = m * v + lr * local_lr * (g + beta * w)
    w        = w - v

Parameter groups with ``layer_adaptation=False`` (biases and normalisation parameters, as in the
paper's experiments) skip the trust ratio (``local_lr = 1``): plain SGD with momentum there.
Because ``eta`` is small (0.001), LARS runs take much larger global learning rates than SGD.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

DEFAULT_TRUST_COEFFICIENT = 0.001
DEFAULT_MOMENTUM = 0.9


class LARS(Optimizer):
    def __init__(self, params: Iterable[Any], lr: float, momentum: float = DEFAULT_MOMENTUM,
                 weight_decay: float = 0.0, trust_coefficient: float = DEFAULT_TRUST_COEFFICIENT,
                 layer_adaptation: bool = True) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0 or trust_coefficient <= 0:
            raise ValueError(f"LARS: invalid lr={lr}, momentum={momentum}, weight_decay={weight_decay} "
                             f"or trust_coefficient={trust_coefficient}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                        trust_coefficient=trust_coefficient, layer_adaptation=layer_adaptation)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            decay, eta = group["weight_decay"], group["trust_coefficient"]
            for w in group["params"]:
                if w.grad is None:
                    continue
                g = w.grad
                local_lr = 1.0
                if group["layer_adaptation"]:
                    w_norm, g_norm = torch.linalg.vector_norm(w), torch.linalg.vector_norm(g)
                    ratio = eta * w_norm / (g_norm + decay * w_norm)
                    local_lr = torch.where((w_norm > 0) & (g_norm > 0), ratio, torch.ones_like(ratio))
                update = g.add(w, alpha=decay) if decay else g.clone()
                update.mul_(local_lr * group["lr"])
                state = self.state[w]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = update
                else:
                    state["momentum_buffer"].mul_(group["momentum"]).add_(update)
                w.sub_(state["momentum_buffer"])
        return loss
