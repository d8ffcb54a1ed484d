"""The ``ParallelContext``: which part of the work this process does, on a ``DeviceMesh`` with named dims.

The mesh has up to three dimensions, outermost first: ``"dp"`` (data parallel: every dp rank a different
shard of the data), ``"pp"`` (pipeline stages) and ``"tp"`` (tensor parallel; innermost, so that a TP group
is neighbouring ranks, one node). The data is sharded by the *data-parallel* rank, not the global rank,
and the value a run reports (loss, metrics, checkpoint) is held by one particular rank
(:attr:`ParallelContext.holds_value`: dp 0, tp 0, the *last* pipeline stage), not simply by global rank 0.
``mesh_sizes(cfg, world_size)`` turns ``--parallel/--tp/--pp`` into the sizes; ``parallel_problems``
lists what is impossible before any work.
With one process there is no process group and no mesh: every query answers as for rank 0 of 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from coursekit.distributed import DistContext

DIMENSIONS = ("dp", "pp", "tp")  # mesh dimension names, outermost first
NAIVE_CPU_STAGES = 2  # naive split on a CPU: two "cpu" stages in one process
# parameters sharded over processes: checkpoints through torch.distributed.checkpoint (checkpoint.save_sharded)
SHARDED_STRATEGIES = ("zero2", "zero3", "fsdp_tp", "tensor", "pipeline")


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


# ----------------------------------------------------------------------------- --parallel, --tp, --pp


def naive_stages(cfg: Any) -> int:
    """Stages of the naive split: ``--pp``, else one per visible GPU (at least 2), else 2 CPU stages."""
    if cfg.pp:
        return cfg.pp
    gpus = torch.cuda.device_count() if cfg.device != "cpu" and torch.cuda.is_available() else 0
    return max(gpus, NAIVE_CPU_STAGES)


def mesh_sizes(cfg: Any, world_size: int) -> dict[str, int]:
    """The mesh of ``cfg.parallel`` on ``world_size`` processes (check ``parallel_problems`` first)."""
    strategy = cfg.parallel
    if strategy == "pipeline":
        pp = cfg.pp or world_size
        return {"dp": world_size // pp, "pp": pp}
    if strategy in ("tensor", "fsdp_tp"):
        tp = cfg.tp or (world_size if strategy == "tensor" else min(2, world_size))
        return {"dp": world_size // tp, "tp": tp}
    return {"dp": world_size}


def _model_problems(cfg: Any) -> list[str]:
    from coursekit.train.models import MODEL_SPECS

    spec = MODEL_SPECS.get(cfg.model)
    problems = []
    if spec is None:
        return problems
    if cfg.parallel in ("tensor", "fsdp_tp") and spec.tp_plan is None:
        with_plan = ", ".join(n for n, s in MODEL_SPECS.items() if s.tp_plan is not None)
        problems.append(f"parallel={cfg.parallel!r}: model={cfg.model!r} declares no tensor-parallel plan; "
                        f"use a model that does ({with_plan})")
    if cfg.parallel in ("pipeline", "naive") and spec.split is None:
        with_split = ", ".join(n for n, s in MODEL_SPECS.items() if s.split is not None)
        problems.append(f"parallel={cfg.parallel!r}: model={cfg.model!r} declares no pipeline split points; "
                        f"use a model that does ({with_split})")
    return problems


def parallel_problems(cfg: Any, world_size: int | None = None, device_type: str | None = None) -> list[str]:
    """What makes ``cfg``'s parallel layout impossible; with ``world_size``: what is impossible on that many
    processes (the checks that need no world size are not repeated)."""
    if world_size is not None:
        return _world_problems(cfg, world_size, device_type)
    strategy, problems = cfg.parallel, _model_problems(cfg)
    if cfg.tp not in (None, 1) and strategy not in ("tensor", "fsdp_tp"):
        problems.append(f"tp={cfg.tp} applies to parallel 'tensor' or 'fsdp_tp', not {strategy!r}")
    if cfg.pp not in (None, 1) and strategy not in ("pipeline", "naive"):
        problems.append(f"pp={cfg.pp} applies to parallel 'pipeline' or 'naive', not {strategy!r}")
    if strategy in ("pipeline", "naive"):
        stages = cfg.pp or world_size if strategy == "pipeline" else naive_stages(cfg)
        if cfg.batch_size % cfg.microbatches:
            problems.append(f"microbatches={cfg.microbatches} does not divide batch_size={cfg.batch_size}: "
                            "the batch is cut into equal micro-batches; pick a divisor")
        if cfg.batch_size % cfg.accumulation_steps == 0 and \
                (cfg.batch_size // cfg.accumulation_steps) % cfg.microbatches:
            problems.append(f"microbatches={cfg.microbatches} does not divide the micro-batch of the accumulation "
                            f"(batch_size / accumulation_steps = {cfg.batch_size // cfg.accumulation_steps})")
        if stages and cfg.model == "gpt" and cfg.gpt_layers % stages:
            problems.append(f"gpt_layers={cfg.gpt_layers} is not divisible by the {stages} pipeline stages "
                            "(pp): every stage gets the same number of blocks; change --gpt-layers or --pp")
        if stages and strategy == "pipeline" and cfg.pipeline_schedule == "1f1b" and cfg.microbatches < stages:
            problems.append(f"pipeline_schedule='1f1b' needs at least as many micro-batches as stages: "
                            f"microbatches={cfg.microbatches} < pp={stages}; raise --microbatches or use gpipe")
        if strategy == "pipeline" and cfg.precision == "fp16":
            problems.append("parallel='pipeline' runs without a loss scaler: use --precision bf16 or fp32, not fp16")
        if strategy == "naive" and cfg.microbatches != 1:
            problems.append(f"microbatches={cfg.microbatches}: the naive split runs the whole batch through one "
                            "stage after the other; micro-batches are for parallel 'pipeline'")
    elif cfg.microbatches != 1:
        problems.append(f"microbatches={cfg.microbatches} applies to parallel 'pipeline' only "
                        "(for other strategies use --accumulation-steps)")
    if cfg.stage_delay_ms and strategy not in ("pipeline", "naive"):
        problems.append(f"stage_delay_ms emulates pipeline stages: use it with 'pipeline' or 'naive', not {strategy!r}")
    if strategy in ("tensor", "fsdp_tp") and cfg.tp and cfg.model == "gpt" and cfg.gpt_heads % cfg.tp:
        problems.append(f"gpt_heads={cfg.gpt_heads} is not divisible by tp={cfg.tp}: every tensor-parallel rank "
                        "computes whole heads; pick tp dividing the heads")
    if strategy != "ddp" and cfg.sync_batchnorm:
        problems.append(f"sync_batchnorm applies to parallel 'ddp' only, not {strategy!r}")
    if strategy == "pipeline":
        needs_forward = [name for name in ("grad_noise_batches", "log_params", "target_acc", "trust_ratio_every")
                         if getattr(cfg, name, None)]
        if needs_forward:
            problems.append(f"{', '.join(needs_forward)}: a pipeline has no whole model on one rank to evaluate or "
                            "probe; use another --parallel strategy for these measurements")
    if strategy == "zero1" and (cfg.checkpoint_every or cfg.resume):
        problems.append("checkpoint_every/resume: parallel='zero1' writes no resumable checkpoint (its optimizer "
                        "state would first be consolidated on one rank); use zero2/zero3 or ddp")
    return problems


def _world_problems(cfg: Any, world_size: int, device_type: str | None) -> list[str]:
    strategy, problems = cfg.parallel, []
    if strategy == "naive" and world_size > 1:
        problems.append(f"parallel='naive' splits the layers inside one process; this run has {world_size} "
                        "processes: launch one process (or use 'pipeline')")
    if strategy == "pipeline":
        pp = cfg.pp or world_size
        if world_size % pp:
            problems.append(f"pp={pp} does not divide the {world_size} processes: tp x pp x dp must equal the "
                            "world size; pick pp dividing it")
        if cfg.pp is None and cfg.model == "gpt" and cfg.gpt_layers % pp:  # (an explicit --pp: checked already)
            problems.append(f"gpt_layers={cfg.gpt_layers} is not divisible by the {pp} pipeline stages (pp = "
                            "the world size); change --gpt-layers or --pp")
        if cfg.pp is None and cfg.pipeline_schedule == "1f1b" and cfg.microbatches < pp:
            problems.append(f"pipeline_schedule='1f1b' needs microbatches >= stages: microbatches="
                            f"{cfg.microbatches} < pp={pp}; raise --microbatches or use gpipe")
    if strategy in ("tensor", "fsdp_tp"):
        tp = mesh_sizes(cfg, world_size)["tp"]
        if world_size % tp:
            problems.append(f"tp={tp} does not divide the {world_size} processes: tp x pp x dp must equal the "
                            "world size; pick tp dividing it")
        if cfg.model == "gpt" and cfg.gpt_heads % tp:
            problems.append(f"gpt_heads={cfg.gpt_heads} is not divisible by tp={tp}: every tensor-parallel rank "
                            "computes whole heads")
        if strategy == "fsdp_tp" and world_size > 1 and world_size // max(tp, 1) < 2:
            problems.append(f"parallel='fsdp_tp' is a 2-D mesh (dp x tp) but tp={tp} leaves dp=1 on "
                            f"{world_size} processes: use 'tensor', or a smaller --tp")
    if strategy in ("zero2", "zero3", "fsdp_tp") and device_type == "cpu" and cfg.precision in ("fp16",):
        problems.append(f"parallel={strategy!r} with fp16 on a CPU: use fp32 or bf16")
    return problems
