"""Measurements for the small labs: the parameters themselves, and the noise of the mini-batch gradient.

``grad_noise_variance`` estimates E‖g_B − g‖², the squared distance between the gradient of a random
mini-batch of B samples and the full-batch gradient g, averaged over N mini-batches. For independent
samples it is tr(Σ)/B · (n − B)/(n − 1) (n = training-set size): it falls as 1/B — the claim of lab 01.
It leaves the model's ``.grad`` and every global random generator untouched, so it does not change the run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

LOG_PARAMS_MAX_ELEMENTS = 1000  # --log-params is for tiny models (lab 01's w and b)
FULL_BATCH_CHUNK = 4096  # samples per forward when computing the full-batch gradient
NOISE_SEED_OFFSET = 1_000_003  # keeps the probe's sampling apart from the run's own seed


def parameter_values(model: nn.Module) -> dict[str, list[float]]:
    """``{name: flat list}`` of every parameter (for step records of tiny models)."""
    return {name: p.detach().float().cpu().flatten().tolist() for name, p in model.named_parameters()}


def check_loggable(model: nn.Module) -> None:
    size = sum(p.numel() for p in model.parameters())
    if size > LOG_PARAMS_MAX_ELEMENTS:
        raise ValueError(f"log_params records every parameter in every step record; this model has {size:,} "
                         f"(limit {LOG_PARAMS_MAX_ELEMENTS:,}): drop --log-params or use model 'linear'")


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _gradient(model: nn.Module, loss_fn: LossFn, batches: DataLoader, device: torch.device) -> list[torch.Tensor]:
    """Mean-loss gradient over every sample the loader yields, without touching ``.grad``."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    count = 0
    for inputs, targets in batches:
        inputs, targets = inputs.to(device), targets.to(device)
        loss = loss_fn(model(inputs).float(), targets)
        grads = torch.autograd.grad(loss, params)
        for acc, grad in zip(total, grads, strict=True):
            acc += grad.double() * len(inputs)
        count += len(inputs)
    return [t / count for t in total]


def grad_noise_variance(model: nn.Module, dataset: Dataset, loss_fn: LossFn, batch_size: int, num_batches: int,
                        device: torch.device, seed: int) -> float:
    """Mean over ``num_batches`` random mini-batches of ‖g_B − g‖² (sum over all parameters)."""
    was_training = model.training
    model.eval()  # no batch-norm statistics updates, no dropout: the gradient of the loss surface itself
    try:
        full = _gradient(model, loss_fn, DataLoader(dataset, batch_size=FULL_BATCH_CHUNK), device)
        generator = torch.Generator().manual_seed(seed + NOISE_SEED_OFFSET)
        size = len(dataset)
        batch_size = min(batch_size, size)
        total = 0.0
        for _ in range(num_batches):
            indices = torch.randperm(size, generator=generator)[:batch_size].tolist()
            batch = DataLoader(Subset(dataset, indices), batch_size=batch_size)
            mini = _gradient(model, loss_fn, batch, device)
            total += float(sum(((m - f) ** 2).sum() for m, f in zip(mini, full, strict=True)))
        return total / num_batches
    finally:
        model.train(was_training)
