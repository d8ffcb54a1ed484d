"""LAMB: layer-wise adaptive moments (You et al. 2019, arXiv:1904.00962, Algorithm 2).

For each parameter tensor ``w`` with gradient ``g`` at step ``t``, learning rate ``lr``, betas
``(b1, b2)``, ``eps`` and weight decay ``lam``::

    m = b1 * m + (1 - b1) * g                 v = b2 * v + (1 - b2) * g**2
    m_hat = m / (1 - b1**t)                   v_hat = v / (1 - b2**t)
    u = m_hat / (sqrt(v_hat) + eps) + lam * w
    w = w - lr * (||w|| / ||u||) * u          (trust ratio 1 when ||w|| or ||u|| is 0)

The scaling function phi of the paper is the identity here. Parameter groups with
``layer_adaptation=False`` (biases and normalisation parameters) use trust ratio 1: AdamW there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer

DEFAULT_BETAS = (0.9, 0.999)
DEFAULT_EPS = 1e-6


class LAMB(Optimizer):
    def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float] = DEFAULT_BETAS,
                 eps: float = DEFAULT_EPS, weight_decay: float = 0.0, layer_adaptation: bool = True) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"LAMB: invalid lr={lr}, betas={betas}, eps={eps} or weight_decay={weight_decay}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, layer_adaptation=layer_adaptation)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for w in group["params"]:
                if w.grad is None:
                    continue
                g = w.grad
                state = self.state[w]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(w)
                    state["exp_avg_sq"] = torch.zeros_like(w)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(w, alpha=group["weight_decay"])
                trust_ratio = 1.0
                if group["layer_adaptation"]:
                    w_norm, u_norm = torch.linalg.vector_norm(w), torch.linalg.vector_norm(update)
                    trust_ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                w.sub_(update * (trust_ratio * group["lr"]))
        return loss
