"""An airbench-style CNN (Keller Jordan's airbench94, 2024): about 2 M parameters, batch norm, fast on a GPU.

A 3 x 3 stem of ``STEM_WIDTH`` channels, then three groups of ``GROUP_WIDTHS`` channels, each
conv - max-pool 2 - BN - GELU - conv - BN - GELU; a global max-pool and a bias-free linear head whose
output is scaled by ``HEAD_SCALE`` (airbench's 1/9, which keeps the first logits small). On 32 x 32
images: 1.98 M parameters. Batch norm everywhere, so ghost batch norm (``--ghost-batch-size``) applies.
"""

from __future__ import annotations

import torch
from torch import nn

STEM_WIDTH = 32
GROUP_WIDTHS = (64, 256, 256)
KERNEL = 3
POOL = 2
HEAD_SCALE = 1 / 9
MIN_SIDE = POOL ** len(GROUP_WIDTHS)  # three poolings: the image side must be at least 8


def _conv_bn(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, KERNEL, padding="same", bias=False), nn.BatchNorm2d(cout), nn.GELU()]


class ConvGroup(nn.Sequential):
    """conv - max-pool - BN - GELU - conv - BN - GELU (a unit of activation checkpointing)."""

    checkpoint_unit = True

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.Conv2d(cin, cout, KERNEL, padding="same", bias=False), nn.MaxPool2d(POOL),
                         nn.BatchNorm2d(cout), nn.GELU(), *_conv_bn(cout, cout))


class AirbenchNet(nn.Module):
    """The network of the module docstring for ``in_channels``-channel images and ``num_classes`` classes."""

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(in_channels, STEM_WIDTH))
        widths = (STEM_WIDTH, *GROUP_WIDTHS)
        self.groups = nn.Sequential(*(ConvGroup(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)))
        self.head = nn.Linear(GROUP_WIDTHS[-1], num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.groups(self.stem(x))
        x = torch.amax(x, dim=(2, 3))  # global max-pool
        return self.head(x) * HEAD_SCALE
