"""PointNet classifier (Qi et al. 2017) for point clouds of shape ``(batch, num_points, 3)``.

Each point goes through the same small MLP (1x1 convolutions with batch norm), a max-pool over the
points makes the global feature order-independent, and an MLP head classifies it. This is the
"vanilla" PointNet without the input/feature transform networks (T-Nets), with a narrower global
feature (``POINT_FEATURES[-1]`` = 256 instead of 1024) so that it trains in seconds on a CPU.
"""

from __future__ import annotations

import torch
from torch import nn

POINT_FEATURES = (64, 128, 256)
HEAD_FEATURES = (128, 64)
HEAD_DROPOUT = 0.3
POINT_DIMS = 3


class PointLayer(nn.Sequential):
    """A layer applied to every point alike: 1x1 conv + BatchNorm1d + ReLU."""

    checkpoint_unit = True

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(nn.Conv1d(in_features, out_features, kernel_size=1, bias=False),
                         nn.BatchNorm1d(out_features), nn.ReLU())


class PointNet(nn.Module):
    def __init__(self, num_classes: int, point_features: tuple[int, ...] = POINT_FEATURES,
                 head_features: tuple[int, ...] = HEAD_FEATURES, dropout: float = HEAD_DROPOUT) -> None:
        super().__init__()
        widths = (POINT_DIMS, *point_features)
        self.point_layers = nn.Sequential(*[PointLayer(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)])
        head: list[nn.Module] = []
        in_features = point_features[-1]
        for width in head_features:
            head += [nn.Linear(in_features, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(dropout)]
            in_features = width
        head.append(nn.Linear(in_features, num_classes))
        self.head = nn.Sequential(*head)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        features = self.point_layers(points.transpose(1, 2))  # (batch, features, num_points)
        return self.head(features.amax(dim=2))
