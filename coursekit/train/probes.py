"""Measurements for the small labs: the parameters themselves, and the noise of the mini-batch gradient.

``grad_noise_variance`` estimates E‖g_B − g‖², the squared distance between the gradient of a random
mini-batch of B samples and the full-batch gradient g, averaged over N mini-batches. For independent
samples it is tr(Σ)/B · (n − B)/(n − 1) (n = training-set size): it falls as 1/B — the claim of lab 01.
It leaves the model's ``.grad`` and every global random generator untouched, so it does not change the run.

``noise_scale`` turns the same measurement into McCandlish et al.'s (2018) simple noise scale
B_simple = tr(Σ)/|G|² (Σ: covariance of one sample's gradient, G: the full-batch gradient): the
two-batch estimator of their appendix A with the whole training set as the large batch, so that
|G|² = ‖g‖² and tr(Σ) = E‖g_B − g‖² · B (n − 1)/(n − B) (sampling without replacement).
``two_batch_noise_scale`` is the estimator for any two batch sizes (e.g. DDP's local and global
gradients). ``layer_norms`` gives ‖w‖ and ‖g‖ of every layer that LARS/LAMB adapt (the trust ratio).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from coursekit.train.optim import is_no_decay

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
ToDevice = Callable[[tuple[torch.Tensor, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]
Autocast = Callable[[], contextlib.AbstractContextManager]


def _gradient(model: nn.Module, loss_fn: LossFn, batches: DataLoader, to_device: ToDevice,
              autocast: Autocast = contextlib.nullcontext) -> list[torch.Tensor]:
    """Mean-loss gradient over every sample the loader yields, without touching ``.grad``."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    count = 0
    for batch in batches:
        inputs, targets = to_device(batch)
        with autocast():
            loss = loss_fn(model(inputs).float(), targets)
        grads = torch.autograd.grad(loss, params)
        for acc, grad in zip(total, grads, strict=True):
            acc += grad.double() * len(inputs)
        count += len(inputs)
    return [t / count for t in total]


def grad_noise_variance(model: nn.Module, dataset: Dataset, loss_fn: LossFn, batch_size: int, num_batches: int,
                        device: torch.device, seed: int) -> float:
    """Mean over ``num_batches`` random mini-batches of ‖g_B − g‖² (sum over all parameters)."""
    return noise_scale(model, dataset, loss_fn, batch_size, num_batches, device, seed)["grad_noise_var"]


def two_batch_noise_scale(sq_small: float, sq_big: float, b_small: float, b_big: float) -> dict[str, float]:
    """McCandlish et al. appendix A: from E|G_B|² at two batch sizes (independent samples), the unbiased
    |G|² = (b_big |G_big|² − b_small |G_small|²)/(b_big − b_small) and
    tr(Σ) = (|G_small|² − |G_big|²)/(1/b_small − 1/b_big); B_simple = tr(Σ)/|G|²."""
    if not 0 < b_small < b_big:
        raise ValueError(f"two_batch_noise_scale needs 0 < b_small < b_big (got {b_small}, {b_big})")
    grad_sq = (b_big * sq_big - b_small * sq_small) / (b_big - b_small)
    trace_sigma = (sq_small - sq_big) / (1 / b_small - 1 / b_big)
    return {"grad_sq": grad_sq, "trace_sigma": trace_sigma,
            "b_simple": trace_sigma / grad_sq if grad_sq > 0 else float("inf")}


def layer_norms(model: nn.Module, grad_scale: float = 1.0) -> list[dict[str, float | str]]:
    """‖w‖ and ‖g‖ (gradient divided by ``grad_scale``, fp16's loss scale) of every weight tensor that
    LARS/LAMB adapt (more than one dimension, not a normalisation layer), in model order."""
    rows: list[dict[str, float | str]] = []
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if param.grad is None or is_no_decay(module, param):
                continue
            rows.append({"layer": f"{module_name}.{name}" if module_name else name,
                         "w_norm": float(torch.linalg.vector_norm(param.detach().float())),
                         "g_norm": float(torch.linalg.vector_norm(param.grad.detach().float())) / grad_scale})
    return rows


def noise_scale(model: nn.Module, dataset: Dataset, loss_fn: LossFn, batch_size: int, num_batches: int,
                device: torch.device, seed: int, *, to_device: ToDevice | None = None,
                autocast: Autocast = contextlib.nullcontext, chunk: int | None = None) -> dict[str, float | None]:
    """``grad_noise_var`` (mean ‖g_B − g‖² over ``num_batches`` batches), ``grad_sq`` (‖g‖²), ``trace_sigma``
    and ``b_simple`` (None when the batch is the whole set: it has no noise to measure).

    The engine passes its own ``to_device`` (channels_last), ``autocast`` (bf16) and ``chunk`` = its batch
    size: every forward then has the training step's shape, dtype and layout, so that cuDNN's autotuning
    (``cudnn.benchmark``) finds nothing new to try — a full-set chunk of 4,096 fp32 images and its remainder
    made a probe of lab 07's gpu profile take about a minute. With ``chunk`` the set is the first
    ``len(dataset) // chunk * chunk`` samples (whole chunks only)."""
    was_training = model.training
    model.eval()  # no batch-norm statistics updates, no dropout: the gradient of the loss surface itself
    move = to_device or (lambda batch: (batch[0].to(device), batch[1].to(device)))
    if chunk is not None and chunk < len(dataset):  # type: ignore[arg-type]
        dataset = Subset(dataset, range(len(dataset) // chunk * chunk))  # type: ignore[arg-type]
    try:
        full = _gradient(model, loss_fn, DataLoader(dataset, batch_size=chunk or FULL_BATCH_CHUNK), move, autocast)
        generator = torch.Generator().manual_seed(seed + NOISE_SEED_OFFSET)
        size = len(dataset)  # type: ignore[arg-type]
        batch_size = min(batch_size, size)
        total = 0.0
        for _ in range(num_batches):
            indices = torch.randperm(size, generator=generator)[:batch_size].tolist()
            batch = DataLoader(Subset(dataset, indices), batch_size=batch_size)
            mini = _gradient(model, loss_fn, batch, move, autocast)
            total += float(sum(((m - f) ** 2).sum() for m, f in zip(mini, full, strict=True)))
        variance = total / num_batches
        grad_sq = float(sum((f**2).sum() for f in full))
        trace_sigma = variance * batch_size * (size - 1) / (size - batch_size) if batch_size < size else None
        b_simple = trace_sigma / grad_sq if trace_sigma is not None and grad_sq > 0 else None
        return {"grad_noise_var": variance, "grad_sq": grad_sq, "trace_sigma": trace_sigma, "b_simple": b_simple}
    finally:
        model.train(was_training)
