"""The ``ParallelContext``: which part of the work this process does, on a ``DeviceMesh`` with named dims.

The mesh has up to three dimensions, outermost first: ``"dp"`` (data parallel: every dp rank a different
shard of the data), ``"pp"`` (pipeline stages) and ``"tp"`` (tensor parallel; innermost, so that a TP group
is neighbouring ranks, one node). The data is sharded by the *data-parallel* rank, not the global rank,
and the value a run reports (loss, metrics, checkpoint) is held by one particular rank
(:attr:`ParallelContext.holds_value`: dp 0, tp 0, the *last* pipeline stage), not simply by global rank 0.
The sizes of a run's mesh come from its strategy (``coursekit.train.parallel.mesh_sizes``: each strategy
module's ``sizes``).
With one process there is no process group and no mesh: every query answers as for rank 0 of 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from coursekit.train.parallel.process_group import DistContext

DIMENSIONS = ("dp", "pp", "tp")  # mesh dimension names, outermost first


@dataclass(frozen=True)
class ParallelContext:
    """This process's coordinates on the mesh, and the launcher's view (``dist``) underneath."""

    dist: DistContext
    sizes: Mapping[str, int]  # dimension name -> size; their product is the world size
    mesh: DeviceMesh | None = None  # None with one process

    @property
    def device(self) -> torch.device:
        return self.dist.device

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def size(self, dim: str) -> int:
        """Processes along ``dim`` (1 for a dimension the mesh does not have)."""
        return self.sizes.get(dim, 1)

    def rank_in(self, dim: str) -> int:
        """This process's coordinate along ``dim``."""
        if self.mesh is None or dim not in self.sizes:
            return 0
        return self.mesh.get_local_rank(dim)

    def group(self, dim: str) -> dist.ProcessGroup | None:
        """The process group of the processes that share every coordinate but ``dim`` (None: one process)."""
        if self.mesh is None:
            return None
        if dim not in self.sizes:
            raise ValueError(f"mesh dimension {dim!r} is not in this run's mesh {dict(self.sizes)}")
        return self.mesh.get_group(dim)

    @property
    def dp_rank(self) -> int:
        return self.rank_in("dp")

    @property
    def dp_size(self) -> int:
        return self.size("dp")

    @property
    def is_main(self) -> bool:
        """Global rank 0: the process that prints."""
        return self.dist.is_main

    @property
    def holds_value(self) -> bool:
        """The rank that holds the run's value (loss, metrics, checkpoint) and writes it.

        With data parallelism alone every rank holds the same model: data-parallel rank 0 writes. With a
        pipeline the loss exists on the last stage only: dp 0, tp 0 of the last stage writes."""
        return (self.dp_rank == 0 and self.rank_in("tp") == 0
                and self.rank_in("pp") == self.size("pp") - 1)

    @property
    def counts_samples(self) -> bool:
        """This rank's loss and samples count in the run's averages: tp rank 0 of the last pipeline stage
        (the other tp ranks hold copies of the same loss; earlier stages have no loss)."""
        return self.rank_in("tp") == 0 and self.rank_in("pp") == self.size("pp") - 1

    def data_shard(self) -> DistContext:
        """What the data loaders need (``rank``, ``world_size``, ``device``): the data-parallel coordinates."""
        return dataclasses.replace(self.dist, rank=self.dp_rank, world_size=self.dp_size)


def build_context(ctx: DistContext, sizes: Mapping[str, int] | None = None) -> ParallelContext:
    """The mesh for ``ctx``'s processes; ``sizes`` defaults to ``{"dp": world_size}``.

    Raises ValueError when a dimension is unknown or the sizes do not multiply to the world size."""
    sizes = dict(sizes or {"dp": ctx.world_size})
    unknown = [name for name in sizes if name not in DIMENSIONS]
    if unknown:
        raise ValueError(f"mesh dimensions {unknown} are not known; use {', '.join(DIMENSIONS)}")
    bad = [f"{name}={size}" for name, size in sizes.items() if size < 1]
    if bad:
        raise ValueError(f"mesh sizes {', '.join(bad)} must be at least 1")
    if math.prod(sizes.values()) != ctx.world_size:
        raise ValueError(f"mesh {sizes} has {math.prod(sizes.values())} processes but the run has "
                         f"{ctx.world_size}: the sizes must multiply to the world size")
    if not ctx.is_distributed:
        return ParallelContext(ctx, sizes)
    names = tuple(name for name in DIMENSIONS if name in sizes)
    if ctx.device.type == "cuda":
        torch.cuda.init()  # else DeviceMesh picks the GPU from LOCAL_RANK, wrong when a task sees one GPU only
    mesh = init_device_mesh(ctx.device.type, tuple(sizes[n] for n in names), mesh_dim_names=names)
    return ParallelContext(ctx, {n: sizes[n] for n in names}, mesh)
