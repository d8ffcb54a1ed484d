"""Checkpoints that resume a run exactly (the submitit job that requeues itself as a resume on a Slurm
timeout is ``engine.TrainingJob``).

A checkpoint holds the model, optimizer, scheduler and loss-scaler states, the position in the data
(epoch, micro-batches already consumed in it, optimiser step), and two snapshots of every random
generator: at the start of the epoch (so the resumed run rebuilds the same shuffled order and worker
seeds) and at the moment of saving (so dropout and augmentation continue as if never stopped).
Where parameters are sharded (``--parallel`` zero2, zero3, fsdp_tp, tensor, pipeline on several processes)
the model and optimizer state are written by every rank with ``torch.distributed.checkpoint`` into
``checkpoint_dcp/`` and ``checkpoint.pt`` holds the rest.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

CHECKPOINT_FILE = "checkpoint.pt"
SHARDED_FOLDER = "checkpoint_dcp"  # sharded model and optimizer state (torch.distributed.checkpoint)
SHARDED_MARK = "sharded"  # checkpoint.pt's "model"/"optimizer" entry when they live in SHARDED_FOLDER


def checkpoint_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINT_FILE


# ---------------------------------------------------------------- random generators


def rng_state(generators: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every random state a run touches: python, numpy, torch CPU, all CUDA devices, named generators
    (``torch.Generator`` or ``random.Random`` objects of the data pipeline)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generators": {name: _get(g) for name, g in (generators or {}).items()},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _get(generator: Any) -> Any:
    return generator.get_state() if isinstance(generator, torch.Generator) else generator.getstate()


def set_rng_state(state: dict[str, Any], generators: dict[str, Any] | None = None) -> None:
    """Restore what :func:`rng_state` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, generator in (generators or {}).items():
        if name in state["generators"]:
            saved = state["generators"][name]
            generator.set_state(saved) if isinstance(generator, torch.Generator) else generator.setstate(saved)


def _generator_owners(loader: Any, prefix: str = "") -> dict[str, Any]:
    owners = {prefix + "loader": loader, prefix + "sampler": getattr(loader, "sampler", None),
              prefix + "batch_sampler": getattr(getattr(loader, "batch_sampler", None), "sampler", None)}
    inner = getattr(loader, "loader", None)  # e.g. a GPU-decoding wrapper around a DataLoader
    if inner is not None and not prefix:
        owners.update(_generator_owners(inner, "inner_"))
    return owners


def loader_generators(loader: Any) -> dict[str, Any]:
    """The generators a loader, its samplers or a loader it wraps draw from (``generator``/``rng``)."""
    found: dict[str, Any] = {}
    for name, owner in _generator_owners(loader).items():
        for attr in ("generator", "rng"):
            generator = getattr(owner, attr, None)
            if isinstance(generator, (torch.Generator, random.Random)):
                found[f"{name}.{attr}"] = generator
    return found


# ---------------------------------------------------------------- save / load


def save_checkpoint(run_dir: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write atomically (temporary file then rename): a job killed while saving keeps the previous one."""
    path = checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
    """The run folder's checkpoint, or None when there is none yet."""
    path = checkpoint_path(run_dir)
    if not path.exists():
        return None
    return torch.load(path, map_location=map_location, weights_only=False)


# ---------------------------------------------------------------- sharded parameters (torch.distributed.checkpoint)


def sharded_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / SHARDED_FOLDER


def save_sharded(run_dir: str | os.PathLike, model: torch.nn.Module, optimizer: Any) -> Path:
    """Every rank writes the shards it holds of the model and optimizer state (FSDP2, tensor parallel, a
    pipeline stage) with ``torch.distributed.checkpoint``: no rank ever gathers the whole model. A
    collective: every rank calls it. The rest of the trainer's state goes into ``checkpoint.pt`` as usual."""
    from torch.distributed.checkpoint import save
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    path = sharded_path(run_dir)
    save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(path))
    return path


def hyperparameters(optimizer: Any) -> list[dict[str, Any]]:
    """The optimizer's param groups without their parameters (learning rate, momentum, ... as they are now)."""
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def load_sharded(run_dir: str | os.PathLike, model: torch.nn.Module, optimizer: Any,
                 groups: list[dict[str, Any]] | None = None) -> None:
    """Read back what :func:`save_sharded` wrote, each rank its own shards, into ``model`` and ``optimizer``;
    ``groups`` (:func:`hyperparameters` at saving) are put back into the param groups (a pipeline stage's
    groups can come back without them)."""
    from torch.distributed.checkpoint import load
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    load(state, checkpoint_id=str(sharded_path(run_dir)))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    for group, saved in zip(optimizer.param_groups, groups or [], strict=False):
        group.update(saved)


# ---------------------------------------------------------------- position in the data


def remaining_batches(loader: Any, done: int) -> Iterator[Any]:
    """An iterator over the current epoch's batches after the first ``done`` ones.

    Create it with the random state of the epoch's start restored. A DataLoader over a map-style dataset
    with a seeded, epoch-driven sampler (``set_epoch``, e.g. DistributedSampler) skips at the index level
    (no data loaded; random augmentations inside worker processes then restart from their seeds);
    anything else is fast-forwarded by loading and dropping the batches.
    """
    if done and isinstance(loader, DataLoader) and _skippable(loader):
        remaining = list(loader.batch_sampler)[done:]  # indices only
        clone = DataLoader(
            loader.dataset, batch_sampler=remaining, num_workers=loader.num_workers,
            collate_fn=loader.collate_fn, pin_memory=loader.pin_memory, timeout=loader.timeout,
            worker_init_fn=loader.worker_init_fn, multiprocessing_context=loader.multiprocessing_context,
            generator=loader.generator, prefetch_factor=loader.prefetch_factor, in_order=loader.in_order)
        return iter(clone)
    iterator = iter(loader)
    for _ in range(done):
        next(iterator)
    return iterator


def _skippable(loader: DataLoader) -> bool:
    map_style = not isinstance(loader.dataset, IterableDataset)
    return map_style and loader.batch_sampler is not None and hasattr(loader.sampler, "set_epoch")
