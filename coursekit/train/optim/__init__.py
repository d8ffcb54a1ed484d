"""Optimizers of the engine: ``build_optimizer(model, cfg, global_batch)`` and ``scaled_lr``.

Parameters are split into two groups (as in Goyal et al. 2017 and the LARS/LAMB papers):

- ``decay``: weight matrices and convolution kernels, with ``cfg.weight_decay`` and, for LARS and
  LAMB, the layer-wise trust ratio (``layer_adaptation=True``);
- ``no_decay``: biases and normalisation parameters (BatchNorm/LayerNorm/GroupNorm weights and
  biases, i.e. every tensor of one dimension or less), with weight decay 0 and no trust ratio.

``cfg.momentum`` is SGD's and LARS's momentum and AdamW's and LAMB's beta1.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from coursekit.train.config import OPTIMIZERS
from coursekit.train.optim.lamb import LAMB
from coursekit.train.optim.lars import DEFAULT_TRUST_COEFFICIENT, LARS

ADAM_BETA2 = 0.999
ADAMW_EPS = 1e-8
NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)


def scaled_lr(cfg: Any, global_batch: int) -> float:
    """``cfg.lr`` scaled to ``global_batch``: none -> lr; linear -> lr * k; sqrt -> lr * sqrt(k),
    with ``k = global_batch / cfg.base_batch`` (Goyal et al. 2017; Krizhevsky 2014)."""
    if global_batch < 1 or cfg.base_batch < 1:
        raise ValueError(f"global batch ({global_batch}) and base_batch ({cfg.base_batch}) must be >= 1")
    ratio = global_batch / cfg.base_batch
    if cfg.lr_scaling == "none":
        return cfg.lr
    if cfg.lr_scaling == "linear":
        return cfg.lr * ratio
    if cfg.lr_scaling == "sqrt":
        return cfg.lr * math.sqrt(ratio)
    raise ValueError(f"lr_scaling={cfg.lr_scaling!r} is unknown; choose none, linear or sqrt")


def is_no_decay(module: nn.Module, param: torch.Tensor) -> bool:
    """Biases and normalisation parameters: no weight decay, no LARS/LAMB trust ratio."""
    return isinstance(module, NORM_TYPES) or param.ndim <= 1


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: ``decay`` (weight_decay, layer adaptation) and ``no_decay`` (0, none); empty ones dropped."""
    decay: list[torch.Tensor] = []
    no_decay: list[torch.Tensor] = []
    seen: set[int] = set()
    for module in model.modules():
        for param in module.parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            (no_decay if is_no_decay(module, param) else decay).append(param)
    groups = [
        {"name": "decay", "params": decay, "weight_decay": weight_decay, "layer_adaptation": True},
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0, "layer_adaptation": False},
    ]
    return [g for g in groups if g["params"]]


def foreach_allowed(groups: list[dict[str, Any]]) -> bool | None:
    """False where DTensors (tensor-parallel weights) and plain tensors (the replicated embeddings and norms)
    share the optimizer: torch's multi-tensor (foreach) kernels, its default on CUDA, refuse the mix
    ("got mixed torch.Tensor and DTensor"); None (torch's default) otherwise."""
    from coursekit.train.parallel.measure import is_dtensor

    kinds = {is_dtensor(p) for g in groups for p in g["params"]}
    return False if len(kinds) > 1 else None


def build_optimizer(model: nn.Module, cfg: Any, global_batch: int) -> torch.optim.Optimizer:
    """The optimizer ``cfg.optimizer`` over ``model`` with lr = ``scaled_lr(cfg, global_batch)``."""
    lr = scaled_lr(cfg, global_batch)
    groups = parameter_groups(model, cfg.weight_decay)
    name = cfg.optimizer
    if name == "sgd":
        for g in groups:
            g.pop("layer_adaptation")
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum, foreach=foreach_allowed(groups),
                               nesterov=bool(getattr(cfg, "nesterov", False)))
    if name == "adamw":
        for g in groups:
            g.pop("layer_adaptation")
        return torch.optim.AdamW(groups, lr=lr, betas=(cfg.momentum, ADAM_BETA2), eps=ADAMW_EPS,
                                 foreach=foreach_allowed(groups))
    if name == "lars":
        return LARS(groups, lr=lr, momentum=cfg.momentum,
                    trust_coefficient=getattr(cfg, "trust_coefficient", DEFAULT_TRUST_COEFFICIENT))
    if name == "lamb":
        return LAMB(groups, lr=lr, betas=(cfg.momentum, ADAM_BETA2))
    raise ValueError(f"optimizer={name!r} is unknown; choose one of {', '.join(OPTIMIZERS)}")


__all__ = ["LAMB", "LARS", "build_optimizer", "foreach_allowed", "is_no_decay", "parameter_groups", "scaled_lr"]
