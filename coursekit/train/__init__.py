"""coursekit's training engine: ``python -m coursekit.train`` or ``train(TrainConfig(...))``."""

from __future__ import annotations

from typing import Any

from coursekit.train.config import TrainConfig, parse_args

__all__ = ["TrainConfig", "parse_args", "train", "validate"]


def __getattr__(name: str) -> Any:
    if name == "train":  # imported on demand: the engine pulls in torch and torchvision
        from coursekit.train.engine import train

        return train
    if name == "validate":  # likewise: the checks ask the parallel strategies and the models
        from coursekit.train.checks import validate

        return validate
    raise AttributeError(f"module 'coursekit.train' has no attribute {name!r}")
