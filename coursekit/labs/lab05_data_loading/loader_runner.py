"""Run loader scripts for the loader checker, with recorders around them: one server imports torch once and forks a
child per run (``python loader_runner.py``; ``--run REQUEST`` for one run in this process), as every served
runner does (``kit/script_runner.py``, loaded by its path: this file imports nothing from coursekit).

What it records: each DataLoader's settings as the script passed them (workers, pin_memory,
persistent_workers, prefetch_factor), how many batches each yielded, and the ``non_blocking`` of every copy of
a batch's tensors (``.to``, ``.cuda``). The child leads its own session: the checker stops it, and the
DataLoader workers it started, with killpg.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

MAX_COPIES = 256  # copies of batch tensors recorded (a few steps' worth is enough)


def new_record() -> dict[str, Any]:
    return {"loaders": [], "copies": [], "cuda": False}


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    """The tensors of a batch: a tensor, or nested lists, tuples and dicts of them."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (list, tuple)):
        for item in batch:
            yield from _tensors(item)
    elif isinstance(batch, dict):
        for item in batch.values():
            yield from _tensors(item)


def install(record: dict[str, Any]) -> None:
    """Wrappers that fill `record` while the script runs."""
    latest: list[torch.Tensor] = []  # the tensors of the last batch a loader yielded
    loaders: dict[int, dict[str, Any]] = {}  # id(loader) -> its entry in record["loaders"]
    iterators: dict[int, dict[str, Any]] = {}  # id(iterator) -> its loader's entry
    original_init, original_iter = DataLoader.__init__, DataLoader.__iter__
    original_next = _BaseDataLoaderIter.__next__

    def recording_init(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        entry = {"num_workers": int(self.num_workers), "pin_memory": bool(self.pin_memory),
                 "persistent_workers": bool(self.persistent_workers),
                 "prefetch_factor": self.prefetch_factor if self.num_workers else None,
                 "batch_size": self.batch_size, "epochs": 0, "batches": 0}
        loaders[id(self)] = entry
        record["loaders"].append(entry)

    def recording_iter(self: DataLoader) -> Any:
        iterator = original_iter(self)
        entry = loaders.get(id(self))
        if entry is not None:
            entry["epochs"] += 1
            iterators[id(iterator)] = entry
        return iterator

    def recording_next(self: _BaseDataLoaderIter) -> Any:
        batch = original_next(self)
        latest[:] = list(_tensors(batch))
        entry = iterators.get(id(self))
        if entry is not None:
            entry["batches"] += 1
        return batch

    def is_batch(tensor: torch.Tensor) -> bool:
        return any(tensor is t for t in latest)

    def note_copy(tensor: torch.Tensor, target: str, non_blocking: bool) -> None:
        if len(record["copies"]) < MAX_COPIES:
            record["copies"].append({"non_blocking": bool(non_blocking), "to": target,
                                     "pinned": _pinned(tensor)})

    original_to, original_cuda = torch.Tensor.to, torch.Tensor.cuda

    def recording_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if is_batch(self):
            try:
                device, _, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
            except (TypeError, RuntimeError):  # the call itself reports its bad arguments below
                device, non_blocking = None, False
            note_copy(self, str(device or self.device), non_blocking)
        return original_to(self, *args, **kwargs)

    def recording_cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        if is_batch(self):
            note_copy(self, "cuda", non_blocking)
        return original_cuda(self, device, non_blocking, **kwargs)

    DataLoader.__init__, DataLoader.__iter__ = recording_init, recording_iter
    _BaseDataLoaderIter.__next__ = recording_next
    torch.Tensor.to, torch.Tensor.cuda = recording_to, recording_cuda


def _pinned(tensor: torch.Tensor) -> bool | None:
    """Whether a CPU tensor is in page-locked memory; None where nothing can be pinned (no GPU)."""
    if tensor.device.type != "cpu" or not torch.cuda.is_available():
        return None
    try:
        return bool(tensor.is_pinned())
    except RuntimeError:
        return None


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the scripts' folders take its place in the children
    runpy.run_path(str(Path(__file__).resolve().parents[1] / "kit" / "script_runner.py"))["main"](new_record, install)
