"""Models of the engine, and two memory savers that wrap them.

``build_model(cfg, num_classes, input_shape)`` returns one of:

- ``linear``: one neuron ``y = w x + b`` for the regression set ``line`` (input shape ``(1,)``),
  else a flatten + linear classifier (logistic regression);
- ``mlp``: flatten + two hidden layers of ``MLP_HIDDEN`` units; ``mlp_bn``: the same with batch norm
  before each ReLU (the small model of lab 07's ghost batch norm);
- ``resnet18/34/50``: torchvision's models (``weights=None``). Images of at least ``CIFAR_STEM_BELOW``
  pixels get torchvision's standard model unchanged (so GPU benchmarks compare with a plain
  torchvision loop); smaller images get the CIFAR stem (3x3 stride-1 conv, no max-pool);
- ``airbench``: an airbench94-style CNN (~2 M parameters, batch norm; lab 07), see ``airbench.py``;
- ``wide_resnet``: WRN-16-4 (~2.7 M parameters) for small images, see ``wide_resnet.py``;
- ``pointnet``: a PointNet classifier for ``(num_points, 3)`` clouds, see ``pointnet.py``;
- ``gpt``: a small GPT for token sequences ``(seq_len,)`` (``--gpt-layers/--gpt-dim/--gpt-heads``),
  logits ``(seq_len, vocab)`` per sample, see ``gpt.py``.

Each name is a :class:`ModelSpec` in ``MODEL_SPECS``, which also declares what the parallel strategies
need: the tensor-parallel plan of a block and the pipeline split (only ``gpt`` has them).

Memory savers (``build_model`` applies them from the config; both are idempotent, so calling them
again from the engine is harmless):

- ``apply_activation_checkpointing(model)`` wraps every residual / dense block in
  ``ActivationCheckpoint``: its activations are recomputed in backward instead of stored;
- ``convert_to_ghost_batchnorm(model, virtual_batch)`` swaps BatchNorm1d/2d for ghost batch norm,
  which normalises virtual sub-batches of about ``virtual_batch`` samples in training
  (Hoffer et al. 2017, "Train longer, generalize better").
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from coursekit.train.config import MODELS
from coursekit.train.models.airbench import MIN_SIDE as AIRBENCH_MIN_SIDE
from coursekit.train.models.airbench import AirbenchNet
from coursekit.train.models.gpt import GPT, block_tp_plan, split_gpt
from coursekit.train.models.pointnet import PointNet
from coursekit.train.models.wide_resnet import WideResNet

MLP_HIDDEN = (256, 256)
CIFAR_STEM_BELOW = 64  # images smaller than this (pixels) get the CIFAR-style ResNet stem
CIFAR_STEM_CHANNELS = 64
WRN_DEPTH = 16
WRN_WIDEN_FACTOR = 4
MIN_GHOST_BATCH = 2
# torchvision's ResNets, imported when one is built: importing torchvision costs every engine process
# ~2 CPU-s, and most runs (MLP, airbench, GPT, WRN) never need it
TORCHVISION_RESNETS = ("resnet18", "resnet34", "resnet50")
TORCHVISION_RESNET_MODULE = "torchvision.models.resnet"


class DenseBlock(nn.Sequential):
    """Linear + ReLU: one hidden layer of the MLP (a unit of activation checkpointing)."""

    checkpoint_unit = True

    def __init__(self, in_features: int, out_features: int, batchnorm: bool = False) -> None:
        norm = [nn.BatchNorm1d(out_features)] if batchnorm else []
        super().__init__(nn.Linear(in_features, out_features), *norm, nn.ReLU())


def _mlp(num_classes: int, input_shape: tuple[int, ...], batchnorm: bool = False) -> nn.Module:
    widths = (math.prod(input_shape), *MLP_HIDDEN)
    blocks = [DenseBlock(a, b, batchnorm) for a, b in zip(widths[:-1], widths[1:], strict=True)]
    return nn.Sequential(nn.Flatten(), *blocks, nn.Linear(widths[-1], num_classes))


def _linear(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    if tuple(input_shape) == (1,):
        return nn.Linear(1, num_classes)  # parameters "weight" and "bias": the (w, b) of lab 1
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def _require_images(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"model={name!r} needs images (channels, height, width) but the dataset gives "
                         f"samples of shape {tuple(input_shape)}; use --model mlp, linear or pointnet")
    return input_shape  # type: ignore[return-value]


def _resnet(name: str, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    channels, height, width = _require_images(name, input_shape)
    from torchvision.models import resnet

    model = getattr(resnet, name)(weights=None, num_classes=num_classes)
    if min(height, width) < CIFAR_STEM_BELOW:
        model.conv1 = nn.Conv2d(channels, CIFAR_STEM_CHANNELS, kernel_size=3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif channels != 3:
        model.conv1 = nn.Conv2d(channels, CIFAR_STEM_CHANNELS, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def _wide_resnet(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    channels, _, _ = _require_images("wide_resnet", input_shape)
    return WideResNet(num_classes, depth=WRN_DEPTH, widen_factor=WRN_WIDEN_FACTOR, in_channels=channels)


def _airbench(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    channels, height, width = _require_images("airbench", input_shape)
    if min(height, width) < AIRBENCH_MIN_SIDE:
        raise ValueError(f"model='airbench' pools three times: images need at least {AIRBENCH_MIN_SIDE} pixels a "
                         f"side, not {height} x {width}; raise --image-size")
    return AirbenchNet(num_classes, channels)


def _pointnet(num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    if len(input_shape) != 2 or input_shape[-1] != 3:
        raise ValueError(f"model='pointnet' needs point clouds of shape (num_points, 3) but the dataset gives "
                         f"{tuple(input_shape)}; use --dataset pointclouds")
    return PointNet(num_classes)


def _gpt(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    if len(input_shape) != 1:
        raise ValueError(f"model='gpt' needs token sequences of shape (seq_len,) but the dataset gives "
                         f"{tuple(input_shape)}; use --dataset tokens")
    return GPT(num_classes, input_shape[0], cfg.gpt_dim, cfg.gpt_heads, cfg.gpt_layers)


@dataclass(frozen=True)
class ModelSpec:
    """A model of the engine and what the parallel strategies need to know about it (torchtitan style).

    ``build(cfg, num_classes, input_shape)``; ``tp_plan()``: the tensor-parallel plan of one repeated
    block (names relative to the block), applied to every module of ``blocks(model)``; ``split(model,
    stages)``: the pipeline cut into stage modules (None: the model cannot be split)."""

    name: str
    build: Callable[[Any, int, tuple[int, ...]], nn.Module]
    tp_plan: Callable[[], dict[str, Any]] | None = None
    split: Callable[[nn.Module, int], list[nn.Module]] | None = None
    blocks: Callable[[nn.Module], list[nn.Module]] | None = None


def _gpt_blocks(model: nn.Module) -> list[nn.Module]:
    """The GPT's blocks (inside their ``ActivationCheckpoint`` wrapper when there is one)."""
    return [getattr(b, "block", b) for b in model.blocks.values()]


MODEL_SPECS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("linear", lambda cfg, n, shape: _linear(n, shape)),
    ModelSpec("mlp", lambda cfg, n, shape: _mlp(n, shape)),
    ModelSpec("mlp_bn", lambda cfg, n, shape: _mlp(n, shape, batchnorm=True)),
    *(ModelSpec(name, lambda cfg, n, shape, name=name: _resnet(name, n, shape)) for name in TORCHVISION_RESNETS),
    ModelSpec("wide_resnet", lambda cfg, n, shape: _wide_resnet(n, shape)),
    ModelSpec("airbench", lambda cfg, n, shape: _airbench(n, shape)),
    ModelSpec("pointnet", lambda cfg, n, shape: _pointnet(n, shape)),
    ModelSpec("gpt", _gpt, tp_plan=block_tp_plan, split=split_gpt, blocks=_gpt_blocks),
)}


def model_spec(name: str) -> ModelSpec:
    if name not in MODEL_SPECS:
        raise ValueError(f"model={name!r} is unknown; choose one of {', '.join(MODELS)}")
    return MODEL_SPECS[name]


def build_model(cfg: Any, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    """The model named by ``cfg.model`` for samples of ``input_shape``, with the memory savers of ``cfg``."""
    model = model_spec(cfg.model).build(cfg, num_classes, input_shape)
    if getattr(cfg, "ghost_batch_size", None):
        convert_to_ghost_batchnorm(model, cfg.ghost_batch_size)
    if getattr(cfg, "activation_checkpointing", False):
        apply_activation_checkpointing(model)
    return model


# ----------------------------------------------------------------------------- activation checkpointing


class ActivationCheckpoint(nn.Module):
    """Runs ``block`` under ``torch.utils.checkpoint`` in training: its inner activations are not stored
    but recomputed during backward (less memory, about one extra forward of compute).

    The state dict keeps the wrapped block's own keys, so checkpoints load with or without wrapping.
    """

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.register_state_dict_post_hook(_drop_block_prefix)
        self.register_load_state_dict_pre_hook(_add_block_prefix)

    def __getattr__(self, name: str) -> Any:
        """The block's attributes through the wrapper, as the state-dict keys suggest (``torch.distributed.
        checkpoint`` walks the names of the keys)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("block"), name)

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            return checkpoint(self.block, *args, use_reentrant=False)
        return self.block(*args)


def _drop_block_prefix(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix + "block.")]:
        state_dict[prefix + key[len(prefix + "block."):]] = state_dict.pop(key)


def _add_block_prefix(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "block.")]:
        state_dict[prefix + "block." + key[len(prefix):]] = state_dict.pop(key)


def _is_checkpoint_unit(module: nn.Module) -> bool:
    resnet = sys.modules.get(TORCHVISION_RESNET_MODULE)  # not imported: no torchvision block can exist
    if resnet is not None and isinstance(module, (resnet.BasicBlock, resnet.Bottleneck)):
        return True
    return bool(getattr(module, "checkpoint_unit", False))


def apply_activation_checkpointing(model: nn.Module) -> nn.Module:
    """Wrap every block of ``model`` (ResNet/WRN residual blocks, MLP and PointNet layers) in place."""
    for name, child in model.named_children():
        if isinstance(child, ActivationCheckpoint):
            continue
        if _is_checkpoint_unit(child):
            setattr(model, name, ActivationCheckpoint(child))
        else:
            apply_activation_checkpointing(child)
    return model


def count_checkpointed_blocks(model: nn.Module) -> int:
    return sum(isinstance(m, ActivationCheckpoint) for m in model.modules())


# ----------------------------------------------------------------------------- ghost batch norm


def _ghost_forward(bn: nn.modules.batchnorm._BatchNorm, x: torch.Tensor, plain_forward: Any) -> torch.Tensor:
    """Normalise ``x`` in ``len(x) // virtual_batch`` near-equal chunks (each >= virtual_batch samples)."""
    chunks = len(x) // bn.virtual_batch
    if not bn.training or chunks <= 1:
        return plain_forward(x)
    return torch.cat([plain_forward(part) for part in x.tensor_split(chunks)])


class GhostBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics come from virtual batches of ``virtual_batch`` samples."""

    def __init__(self, num_features: int, virtual_batch: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.virtual_batch = virtual_batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ghost_forward(self, x, super().forward)


class GhostBatchNorm1d(nn.BatchNorm1d):
    """BatchNorm1d whose training statistics come from virtual batches of ``virtual_batch`` samples."""

    def __init__(self, num_features: int, virtual_batch: int, **kwargs: Any) -> None:
        super().__init__(num_features, **kwargs)
        self.virtual_batch = virtual_batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ghost_forward(self, x, super().forward)


def _ghost_copy(bn: nn.modules.batchnorm._BatchNorm, virtual_batch: int) -> nn.Module:
    cls = GhostBatchNorm2d if isinstance(bn, nn.BatchNorm2d) else GhostBatchNorm1d
    ghost = cls(bn.num_features, virtual_batch, eps=bn.eps, momentum=bn.momentum, affine=bn.affine,
                track_running_stats=bn.track_running_stats)
    ghost.load_state_dict(bn.state_dict())
    param = next(bn.parameters(), None)
    return ghost.to(param.device if param is not None else "cpu")


def convert_to_ghost_batchnorm(model: nn.Module, virtual_batch: int) -> nn.Module:
    """Replace every BatchNorm1d/2d of ``model`` (in place) by its ghost version; returns ``model``."""
    if virtual_batch < MIN_GHOST_BATCH:
        raise ValueError(f"ghost_batch_size={virtual_batch} is too small; use at least {MIN_GHOST_BATCH}")
    for name, child in model.named_children():
        if isinstance(child, (GhostBatchNorm1d, GhostBatchNorm2d)):
            child.virtual_batch = virtual_batch
        elif type(child) in (nn.BatchNorm1d, nn.BatchNorm2d):
            setattr(model, name, _ghost_copy(child, virtual_batch))
        else:
            convert_to_ghost_batchnorm(child, virtual_batch)
    return model


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["MODEL_SPECS", "ActivationCheckpoint", "ModelSpec", "model_spec", "GhostBatchNorm1d", "GhostBatchNorm2d", "apply_activation_checkpointing",
           "build_model", "convert_to_ghost_batchnorm", "count_checkpointed_blocks", "num_parameters"]
