"""Run a training script as one rank of the DDP checker, recording what ``ddp_check`` judges.

    python ddp_runner.py RECORD_DIR SCRIPT [ARGS...]

The script runs as ``python SCRIPT ARGS`` would run it (``__main__``, its folder on ``sys.path``), with
recorders around it: the indices every ``DistributedSampler`` hands out (one list per epoch), the
``torch.save`` calls, the calls of collectives (``all_reduce`` and kin), the models wrapped in
``DistributedDataParallel`` and the learning rates optimizers are built with. Only rank 0's saves land
where the script asked: another rank's save is written beside it as ``<file>.rank<r>`` so that two ranks
cannot corrupt one file while the checker reads it. The record goes to ``RECORD_DIR/rank<r>.json``
when the script ends, also when it fails. This file imports nothing from coursekit (it loads the runners' base
``kit/script_runner.py`` by its path): it starts fast.
Its own folder leaves ``sys.path``: the script's folder takes its place, as with ``python SCRIPT``.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

BASE = Path(__file__).resolve().parents[1] / "kit" / "script_runner.py"  # the runners' base, loaded by its path
COLLECTIVES = ("all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "gather",
               "gather_object", "reduce_scatter", "reduce_scatter_tensor")


def record_path(record_dir: str | os.PathLike, rank: int) -> Path:
    return Path(record_dir) / f"rank{rank}.json"


def install(record: dict[str, Any], rank: int) -> None:
    """Wrap DistributedSampler.__iter__, torch.save and the collectives so that they fill `record`."""
    samplers: dict[int, dict[str, Any]] = {}
    original_iter = DistributedSampler.__iter__

    def recording_iter(self: DistributedSampler):
        indices = list(original_iter(self))
        entry = samplers.get(id(self))
        if entry is None:
            entry = samplers[id(self)] = {"shuffle": bool(self.shuffle), "dataset_size": len(self.dataset),
                                          "num_replicas": int(self.num_replicas), "rank": int(self.rank),
                                          "epochs": []}
            record["samplers"].append(entry)
        entry["epochs"].append(indices)
        return iter(indices)

    original_save = torch.save

    def recording_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else None
        record["saves"].append(os.path.abspath(path) if path is not None else "<file object>")
        if path is not None and rank != 0:
            f = f"{path}.rank{rank}"
        return original_save(obj, f, *args, **kwargs)

    def counting(name: str, function: Any) -> Any:
        def collective(*args: Any, **kwargs: Any) -> Any:
            record["collectives"][name] = record["collectives"].get(name, 0) + 1
            return function(*args, **kwargs)
        return collective

    original_ddp_init = DDP.__init__

    def recording_ddp_init(self: DDP, *args: Any, **kwargs: Any) -> None:
        record["ddp_models"] += 1
        original_ddp_init(self, *args, **kwargs)

    original_optimizer_init = torch.optim.Optimizer.__init__

    def recording_optimizer_init(self: torch.optim.Optimizer, params: Any, defaults: dict[str, Any]) -> None:
        original_optimizer_init(self, params, defaults)
        record["learning_rates"] += [float(g["lr"]) for g in self.param_groups if "lr" in g]

    DDP.__init__ = recording_ddp_init
    torch.optim.Optimizer.__init__ = recording_optimizer_init
    DistributedSampler.__iter__ = recording_iter
    torch.save = recording_save
    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, counting(name, getattr(dist, name)))


def main(argv: list[str]) -> None:
    record_dir, script, *args = argv
    rank = int(os.environ.get("RANK", "0"))
    record: dict[str, Any] = {"rank": rank, "samplers": [], "saves": [], "collectives": {}, "ddp_models": 0,
                              "learning_rates": []}
    install(record, rank)
    base = runpy.run_path(str(BASE))
    try:
        base["run_as_main"](script, args)
    finally:
        record_path(record_dir, rank).write_text(json.dumps(record))
    base["leave"]()


if __name__ == "__main__":
    main(sys.argv[1:])
