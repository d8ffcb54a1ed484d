"""Run training scripts as one rank of the FSDP checker, one after the other, recording what ``fsdp_check`` judges.

    python fsdp_runner.py PLAN.json

PLAN.json: ``{"records": DIR, "runs": [{"script": PATH, "args": [...], "port": PORT}, ...], "fsdp": BOOL}``
(``fsdp`` false: the FSDP units are not recorded, which spares importing FSDP, seconds of CPU). Each script runs
as ``python SCRIPT ARGS`` would run it (``__main__``, its folder first on ``sys.path``), with its own
``MASTER_PORT``; the runs share this process, so torch is imported once for all of them. Once the script has
imported torch, recorders watch it: the modules given to ``fully_shard`` (the FSDP units), the training state
at the end of the first optimizer step (local bytes of the optimizer's parameters, their gradients and its
state) and the ``torch.save`` calls. Another rank's save is written beside rank 0's as ``<file>.rank<r>``.
The record of run i goes to ``DIR/run<i>.rank<r>.json`` when it ends, also when it fails; the first failure
ends the process. Each run starts with a line ``RUN_MARK.format(i)`` on stdout and stderr. This file imports
nothing from coursekit (it loads the runners' base ``kit/script_runner.py`` by its path: it starts fast) and
imports torch only when a script does.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

BASE = Path(__file__).resolve().parents[1] / "kit" / "script_runner.py"  # the runners' base, loaded by its path
RUN_MARK = "=== fsdp check: run {} ==="
FSDP_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")


def record_path(records: str | os.PathLike, run: int, rank: int) -> Path:
    return Path(records) / f"run{run}.rank{rank}.json"


def local_bytes(tensors: Any) -> int:
    """Bytes this rank holds: of a DTensor its local shard."""
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors if t is not None)


class Recorder:
    """What one run did; ``install`` (once torch is imported) points the recorders at the current run."""

    def __init__(self, rank: int, fsdp: bool = True) -> None:
        self.rank = rank
        self.fsdp = fsdp
        self.record: dict[str, Any] = {}
        self.units: list[Any] = []

    def start(self) -> None:
        self.record = {"rank": self.rank, "units": [], "state": None, "saves": []}
        self.units = []

    def finish(self) -> dict[str, Any]:
        """The units named as the largest of them (the root: "") names them, then the record."""
        if self.units:
            root = max(self.units, key=lambda m: len(list(m.modules())))
            names = {id(m): name for name, m in root.named_modules()}
            self.record["units"] = [names.get(id(m), f"? {type(m).__name__}") for m in self.units]
            self.record["model_parameters"] = sum(p.numel() for p in root.parameters())
        return self.record

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        for name in FSDP_MODULES if self.fsdp else ():
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "fully_shard"):
                module.fully_shard = self._recording_fully_shard(module.fully_shard)
        register_optimizer_step_post_hook(self._after_step)
        original_save = torch.save

        def recording_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            path = os.fspath(f) if isinstance(f, (str, os.PathLike)) else None
            values = obj.values() if isinstance(obj, dict) else []
            self.record["saves"].append({
                "path": os.path.abspath(path) if path is not None else "<file object>",
                "dtensors": sum(hasattr(v, "to_local") for v in values)})
            if path is not None and self.rank != 0:
                f = f"{path}.rank{self.rank}"
            return original_save(obj, f, *args, **kwargs)

        torch.save = recording_save

    def _recording_fully_shard(self, function: Any) -> Any:
        @functools.wraps(function)  # keeps its attributes (fully_shard.state)
        def fully_shard(module: Any, *args: Any, **kwargs: Any) -> Any:
            self.units.append(module)
            return function(module, *args, **kwargs)
        return fully_shard

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.record.get("state") is not None:
            return  # the first step's figures only
        params = [p for group in optimizer.param_groups for p in group["params"]]
        model = {id(p) for p in max(self.units, key=lambda m: len(list(m.modules()))).parameters()} \
            if self.units else None
        self.record["state"] = {
            "param_bytes": local_bytes(params), "grad_bytes": local_bytes(p.grad for p in params),
            "optimizer_bytes": local_bytes(t for s in optimizer.state.values() for t in s.values()
                                           if hasattr(t, "nbytes")),
            "parameters": sum(p.numel() for p in params), "tensors": len(params),
            "without_grad": sum(p.grad is None for p in params),
            "outside_model": None if model is None else sum(id(p) not in model for p in params)}


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Installs the recorders right after the script's first ``import torch`` (a script without torch starts fast)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader, recorder = spec.loader, self.recorder
        exec_module = loader.exec_module

        def exec_then_install(module: Any) -> None:
            exec_module(module)
            recorder.install()

        loader.exec_module = exec_then_install
        return spec


def main(argv: list[str]) -> None:
    plan = json.loads(Path(argv[0]).read_text())
    rank = int(os.environ.get("RANK", "0"))
    recorder = Recorder(rank, fsdp=plan.get("fsdp", True))
    if "torch" in sys.modules:
        recorder.install()
    else:
        sys.meta_path.insert(0, _AfterTorch(recorder))
    runner_folder = sys.path[0]
    base = runpy.run_path(str(BASE))
    for index, run in enumerate(plan["runs"]):
        for stream in (sys.stdout, sys.stderr):
            print(RUN_MARK.format(index), file=stream, flush=True)
        recorder.start()
        os.environ["MASTER_PORT"] = str(run["port"])
        ended = False
        try:
            base["run_as_main"](run["script"], run["args"])
            ended = True
        finally:
            record_path(plan["records"], index, rank).write_text(json.dumps({**recorder.finish(), "ended": ended}))
            sys.path[0] = runner_folder
    base["leave"]()  # every script succeeded


if __name__ == "__main__":
    main(sys.argv[1:])
