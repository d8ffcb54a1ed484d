"""Generated tree-like point clouds with species classes (for PointNet), as in the GWDG tree-species
practical: each tree is a trunk (a thin cylinder) and a crown whose outline differs per species.

A species is ``(crown_base, crown_width, profile)``: the crown starts at ``crown_base`` of the tree's
height, its largest radius is ``crown_width`` times the height, and ``profile(t)`` (t = 0 at the crown's
base, 1 at the top) gives the radius along it. Every tree varies (height, crown base, width, jitter);
points take uniform angles about the vertical axis (so no tree has a preferred orientation), and each
cloud is centred and scaled into the unit sphere.
Deterministic from the seed: ``make_point_clouds(num_samples, num_classes, num_points, seed)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

POINTS_PER_CLOUD = 512
DEFAULT_CLOUDS = 2000
TRUNK_SHARE = 0.15  # share of the points on the trunk
TRUNK_RADIUS = 0.02  # times the height
JITTER = 0.01  # sensor noise, times the height
HEIGHT_RANGE = (0.8, 1.2)
CROWN_BASE_JITTER = 0.05
WIDTH_RANGE = (0.85, 1.15)
INNER_RADIUS = 0.3  # leaves fill the crown from this fraction of its radius outwards


def _cone(t: torch.Tensor) -> torch.Tensor:
    return 1 - t


def _ellipsoid(t: torch.Tensor) -> torch.Tensor:
    return (1 - (2 * t - 1) ** 2).clamp(min=0).sqrt()


def _column(t: torch.Tensor) -> torch.Tensor:
    return (1 - (2 * t - 1) ** 6).clamp(min=0).sqrt()


def _dome(t: torch.Tensor) -> torch.Tensor:
    return (1 - t**2).clamp(min=0).sqrt()


def _obovoid(t: torch.Tensor) -> torch.Tensor:
    return torch.sin(math.pi * t.clamp(0, 1) ** 0.6)


def _umbrella(t: torch.Tensor) -> torch.Tensor:
    return (1 - (2 * t - 1) ** 2).clamp(min=0) ** 0.25


Profile = Callable[[torch.Tensor], torch.Tensor]
# name: (crown_base as a share of the height, crown_width as a share of the height, profile)
SPECIES: dict[str, tuple[float, float, Profile]] = {
    "spruce": (0.10, 0.20, _cone),
    "pine": (0.65, 0.25, _umbrella),
    "beech": (0.30, 0.35, _ellipsoid),
    "poplar": (0.15, 0.10, _column),
    "oak": (0.20, 0.50, _dome),
    "birch": (0.40, 0.15, _ellipsoid),
    "fir": (0.35, 0.30, _cone),
    "maple": (0.30, 0.30, _obovoid),
    "willow": (0.25, 0.40, _column),
    "larch": (0.45, 0.15, _cone),
}


def _uniform(generator: torch.Generator, shape: tuple[int, ...], low: float, high: float) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape, generator=generator)


def make_point_clouds(num_samples: int = DEFAULT_CLOUDS, num_classes: int = len(SPECIES),
                      num_points: int = POINTS_PER_CLOUD, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(points, labels)``: points ``(num_samples, num_points, 3)`` float32 (z up), balanced labels."""
    if not 2 <= num_classes <= len(SPECIES):
        raise ValueError(f"num_classes={num_classes}: the point clouds have 2 to {len(SPECIES)} species "
                         f"({', '.join(SPECIES)}); pass --num-classes in that range")
    if num_samples < num_classes or num_points < 2:
        raise ValueError(f"num_samples={num_samples} must be >= num_classes and num_points={num_points} >= 2")
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_samples) % num_classes
    labels = labels[torch.randperm(num_samples, generator=g)]
    species = list(SPECIES.values())[:num_classes]
    n, trunk_points = num_samples, max(1, round(TRUNK_SHARE * num_points))
    crown_points = num_points - trunk_points
    height = _uniform(g, (n, 1), *HEIGHT_RANGE)
    base = torch.tensor([species[k][0] for k in labels]).unsqueeze(1) + _uniform(g, (n, 1), -1, 1) * CROWN_BASE_JITTER
    width = torch.tensor([species[k][1] for k in labels]).unsqueeze(1) * _uniform(g, (n, 1), *WIDTH_RANGE)
    # crown: height t along the crown, radius from the species' profile, uniform angle
    t = torch.rand(n, crown_points, generator=g)
    profile = torch.empty_like(t)
    for k, (_, _, shape) in enumerate(species):
        rows = labels == k
        profile[rows] = shape(t[rows])
    radius = width * profile * _uniform(g, (n, crown_points), INNER_RADIUS**2, 1).sqrt()
    z_crown = base + (1 - base) * t
    # trunk: a thin cylinder from the ground to a little into the crown
    z_trunk = torch.rand(n, trunk_points, generator=g) * (base + (1 - base) / 4)
    r = torch.cat([radius, torch.full((n, trunk_points), TRUNK_RADIUS)], dim=1)
    z = torch.cat([z_crown, z_trunk], dim=1)
    angle = _uniform(g, (n, num_points), 0, 2 * math.pi)
    points = torch.stack([r * torch.cos(angle), r * torch.sin(angle), z], dim=2) * height.unsqueeze(2)
    points += JITTER * torch.randn(points.shape, generator=g) * height.unsqueeze(2)
    points = points[:, torch.randperm(num_points, generator=g)]  # mix trunk and crown points
    return normalise(points).float(), labels


def normalise(points: torch.Tensor) -> torch.Tensor:
    """Centre each cloud on its centroid and scale it into the unit sphere."""
    centred = points - points.mean(dim=1, keepdim=True)
    return centred / centred.norm(dim=2).amax(dim=1).clamp(min=1e-12).view(-1, 1, 1)
