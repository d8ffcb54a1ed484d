"""Wide residual network for small images (Zagoruyko & Komodakis 2016, "Wide Residual Networks").

WRN-d-k: three groups of ``(d - 4) / 6`` pre-activation basic blocks, widths 16k, 32k, 64k, strides
1, 2, 2, then batch norm, ReLU, global average pooling and a linear classifier. The engine uses
WRN-16-4 (about 2.7 M parameters, quick on a CPU); WRN-16-8 (about 11 M) is the size of the ~10 M
WideResNet of NVIDIA's DLI multi-GPU lab.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

STEM_WIDTH = 16
GROUP_WIDTHS = (16, 32, 64)
GROUP_STRIDES = (1, 2, 2)
BLOCK_LAYERS_PER_UNIT = 6  # (depth - 4) must be divisible by this: 3 groups x 2 convolutions per block


class WideBasicBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-(dropout)-conv3x3, plus the (projected when shapes change) input."""

    checkpoint_unit = True

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.shortcut: nn.Module | None = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        residual = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(self.dropout(F.relu(self.bn2(out))))
        return out + residual


class WideResNet(nn.Module):
    def __init__(self, num_classes: int, depth: int = 16, widen_factor: int = 4, in_channels: int = 3,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if depth < 10 or (depth - 4) % BLOCK_LAYERS_PER_UNIT:
            raise ValueError(f"wide ResNet depth={depth} must be 6n + 4 (10, 16, 22, 28, ...)")
        blocks_per_group = (depth - 4) // BLOCK_LAYERS_PER_UNIT
        self.conv1 = nn.Conv2d(in_channels, STEM_WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
        layers: list[nn.Module] = []
        in_planes = STEM_WIDTH
        for width, stride in zip(GROUP_WIDTHS, GROUP_STRIDES, strict=True):
            planes = width * widen_factor
            for i in range(blocks_per_group):
                layers.append(WideBasicBlock(in_planes, planes, stride if i == 0 else 1, dropout))
                in_planes = planes
        self.blocks = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(in_planes)
        self.fc = nn.Linear(in_planes, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.blocks(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))
