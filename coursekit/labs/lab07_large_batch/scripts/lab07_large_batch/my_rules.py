"""The large-batch rules of lab 07 in code: the linear scaling rule, warm-up then linear decay, and LARS.

Four small TODOs. Everything else is given. Check your answers from the notebook with
``labs.check_large_batch_rules("lab07_large_batch/my_rules.py")``: it compares them with the training engine,
step by step. ``python my_rules.py`` prints what your functions give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR


def scaled_lr(base_lr: float, base_batch: int, batch: int) -> float:
    """The learning rate at `batch`, when `base_lr` was tuned at `base_batch`: the linear scaling rule."""
    # TODO 1: the linear scaling rule (Goyal et al. 2017): k times the batch, k times the learning rate.
    ### BEGIN SOLUTION
    return base_lr * batch / base_batch
    ### END SOLUTION


def warmup_then_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    """The factor of the peak learning rate at optimiser step `step` (0, 1, ... total_steps - 1).

    Warm-up: a straight line from 1 / warmup_steps at step 0 up to 1 at step `warmup_steps`.
    Then a straight line from 1 at step `warmup_steps` down to 0 at step `total_steps` (one past the last).
    """
    if step < warmup_steps:
        start = 1 / warmup_steps  # the factor at step 0: the first step is small, but not zero
        # TODO 2: the warm-up: from `start` at step 0, a straight line that would reach 1 at step warmup_steps.
        ### BEGIN SOLUTION
        return start + (1 - start) * step / warmup_steps
        ### END SOLUTION
    # TODO 3: the decay: 1 at step warmup_steps, a straight line down to 0 at step total_steps.
    ### BEGIN SOLUTION
    return 1 - (step - warmup_steps) / (total_steps - warmup_steps)
    ### END SOLUTION


def warmup_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int) -> LambdaLR:
    """A scheduler that sets the learning rate to the optimizer's peak LR times warmup_then_decay(step, ...).
    Call `scheduler.step()` once after every `optimizer.step()`."""
    return LambdaLR(optimizer, lambda step: warmup_then_decay(step, warmup_steps, total_steps))


class LARS(torch.optim.Optimizer):
    """SGD with momentum where each layer (each parameter tensor) gets its own local learning rate.

    For a layer with weights w and gradient g:

        local_lr = trust_coefficient * ||w|| / (||g|| + weight_decay * ||w||)
        v = momentum * v + lr * local_lr * (g + weight_decay * w)
        w = w - v

    Parameter groups with layer_adaptation=False (biases and batch-norm parameters) keep local_lr = 1:
    plain SGD with momentum there. So does a layer whose ||w|| or ||g|| is 0.
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = 0.001, layer_adaptation: bool = True) -> None:
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient,
                        layer_adaptation=layer_adaptation)
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
                # TODO 4: this layer's local_lr (see the class docstring): the trust ratio where
                #   group["layer_adaptation"] is True and both norms are above 0, else 1.
                #   torch.linalg.vector_norm(t) is the norm of a whole tensor.
                ### BEGIN SOLUTION
                local_lr = 1.0
                if group["layer_adaptation"]:
                    w_norm, g_norm = torch.linalg.vector_norm(w), torch.linalg.vector_norm(g)
                    if w_norm > 0 and g_norm > 0:
                        local_lr = eta * w_norm / (g_norm + decay * w_norm)
                ### END SOLUTION
                update = g.add(w, alpha=decay) * (group["lr"] * local_lr)
                state = self.state[w]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = update
                else:
                    state["momentum_buffer"].mul_(group["momentum"]).add_(update)
                w.sub_(state["momentum_buffer"])
        return loss


if __name__ == "__main__":
    base_lr, base_batch, batch, epochs, steps_per_epoch = 0.1, 256, 4096, 10, 14
    total = epochs * steps_per_epoch
    warmup = round(0.2 * total)
    print(f"batch {batch}: lr {scaled_lr(base_lr, base_batch, batch):g} (from {base_lr:g} at {base_batch})")
    print(f"{warmup} warm-up steps of {total}:", ", ".join(
        f"step {s}: {warmup_then_decay(s, warmup, total):.3f}" for s in (0, warmup // 2, warmup, total - 1)))
    layer = torch.nn.Linear(8, 4)
    layer.weight.grad, layer.bias.grad = torch.ones_like(layer.weight), torch.ones_like(layer.bias)
    optimizer = LARS([{"params": [layer.weight], "weight_decay": 5e-4},
                      {"params": [layer.bias], "weight_decay": 0.0, "layer_adaptation": False}], lr=1.0)
    before = layer.weight.detach().clone()
    optimizer.step()
    print(f"one LARS step at lr 1: the weights moved by {(layer.weight - before).norm().item():.2e}")
