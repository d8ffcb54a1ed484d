"""Run loader scripts for the loader checker: one server imports torch once and forks a child per run.

    python loader_runner.py                  # {"cuda": <bool>}, then one JSON request per line on stdin;
                                             # answers {"pid": <child>} per line
    python loader_runner.py --run REQUEST    # one run, in this process (GPU runs: a forked child and CUDA do not mix)

Importing torch costs seconds of CPU; a forked child starts at once, so the checker can run the starving
reference and several scripts quickly. A request names the script, its arguments and a work folder. The
child leads its own session (the checker stops it, and the DataLoader workers it started, with killpg),
writes its output to ``stdout.txt`` and ``stderr.txt`` in the work folder and runs the script as ``python
SCRIPT ARGS`` would (``__main__``, its folder on ``sys.path``), with recorders around it: each DataLoader's
settings as the script passed them (workers, pin_memory, persistent_workers, prefetch_factor), how many
batches each yielded, and the ``non_blocking`` of every copy of a batch's tensors (``.to``, ``.cuda``). It
writes ``record.json`` and ``exit.txt`` when the script ends, also when it fails. Children are reaped by
the system (SIGCHLD is ignored): the checker polls for the child's end. This file imports nothing from
coursekit (same design as lab 04's amp_runner.py).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

STDOUT, STDERR, RECORD, EXIT = "stdout.txt", "stderr.txt", "record.json", "exit.txt"
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


def _child(request: dict[str, Any]) -> int:
    """Run the script of `request` in this (forked) process; its exit code."""
    workdir = Path(request["workdir"])
    os.chdir(workdir)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the server's request pipe
    for fd, name in ((1, STDOUT), (2, STDERR)):
        os.dup2(os.open(workdir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    torch.set_num_threads(int(request.get("threads", 1)))
    record = new_record()
    install(record)
    script = str(Path(request["script"]).resolve())
    sys.argv = [script, *request["args"]]
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the script's own error: shown to the participant
        traceback.print_exc()
        code = 1
    finally:
        record["cuda"] = torch.cuda.is_initialized()
        (workdir / RECORD).write_text(json.dumps(record))
        sys.stdout.flush()
        sys.stderr.flush()
        (workdir / EXIT).write_text(str(code))
    return code


def serve() -> None:
    """Say whether a GPU is visible (without starting CUDA), then fork a child per request line until stdin
    closes."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the system reaps the children
    print(json.dumps({"cuda": torch.cuda.is_available()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the DataLoader reaps its own workers
                code = _child(request)
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the scripts' folders take its place in the children
    if sys.argv[1:2] == ["--run"]:  # one run in this process (on a GPU: CUDA and fork do not mix)
        sys.exit(_child(json.loads(sys.argv[2])))
    serve()
