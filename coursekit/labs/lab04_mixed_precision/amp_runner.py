"""Run training scripts for the AMP checker: one server imports torch once and forks a child per run.

    python amp_runner.py                  # {"cuda": <bool>}, then one JSON request per line on stdin;
                                          # answers {"pid": <child>} per line
    python amp_runner.py --run REQUEST    # one run, in this process (GPU runs: a forked child and CUDA do not mix)

Importing torch (and torch._dynamo, which the first optimizer imports) costs seconds of CPU; a forked child
starts at once, so the checker can run the reference and several scripts quickly. A request names the
script, its arguments, a work folder and environment variables. The child leads its own session (the
checker stops it, and whatever it started, with killpg), writes its output to ``stdout.txt`` and
``stderr.txt`` in the work folder and runs the script as ``python SCRIPT ARGS`` would (``__main__``, its
folder on ``sys.path``), with recorders around it: the layers' compute and weight dtypes and whether
autocast was on, the backward passes (and when each began), the steps the optimizers took, and what the
GradScalers did (created, enabled, scale() calls, the scale after each update()). It writes ``record.json``
and ``exit.txt`` when the script ends, also when it fails. Children are reaped by the system (SIGCHLD is
ignored): the checker polls for the child's end. This file imports nothing from coursekit.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - the first optimizer imports it: import it once here, not in every child
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

STDOUT, STDERR, RECORD, EXIT = "stdout.txt", "stderr.txt", "record.json", "exit.txt"
MAX_LAYER_KINDS = 32  # distinct (layer, autocast, dtypes) entries kept


def new_record() -> dict[str, Any]:
    return {"layers": [], "backwards": 0, "backward_times": [], "applied": [], "finite_after": [],
            "scalers": [], "scale_calls": 0, "updates": [], "cuda": False}


def install(record: dict[str, Any]) -> None:
    """Hooks and wrappers that fill `record` while the script runs."""

    def on_forward(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        weight = next(module.parameters(recurse=False), None)
        if weight is None or not isinstance(output, torch.Tensor) or len(record["layers"]) >= MAX_LAYER_KINDS:
            return
        device = output.device.type
        on = torch.is_autocast_enabled(device)
        entry = [type(module).__name__, on, str(torch.get_autocast_dtype(device)) if on else None,
                 str(output.dtype), str(weight.dtype), device]
        if entry not in record["layers"]:
            record["layers"].append(entry)

    register_module_forward_hook(on_forward)
    original_backward = torch.autograd.backward

    def recording_backward(*args: Any, **kwargs: Any) -> Any:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the time between two backward passes is then one whole step
        record["backward_times"].append(time.perf_counter())
        record["backwards"] += 1
        return original_backward(*args, **kwargs)

    torch.autograd.backward = recording_backward

    def on_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        record["applied"].append(record["backwards"])
        record["finite_after"].append(all(bool(torch.isfinite(p).all()) for g in optimizer.param_groups
                                          for p in g["params"]))

    register_optimizer_step_post_hook(on_step)
    scaler_class = torch.amp.GradScaler
    original_init, original_scale, original_update = scaler_class.__init__, scaler_class.scale, scaler_class.update

    def recording_init(self: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        enabled = bool(self.is_enabled())  # a disabled scaler keeps no scale
        record["scalers"].append({"device": str(getattr(self, "_device", "?")), "enabled": enabled,
                                  "init_scale": float(getattr(self, "_init_scale", 1.0)) if enabled else 1.0})

    def recording_scale(self: torch.amp.GradScaler, outputs: Any) -> Any:
        record["scale_calls"] += 1
        return original_scale(self, outputs)

    def recording_update(self: torch.amp.GradScaler, new_scale: Any = None) -> None:
        original_update(self, new_scale)
        if self.is_enabled():
            record["updates"].append([record["backwards"], float(self.get_scale())])

    scaler_class.__init__, scaler_class.scale, scaler_class.update = recording_init, recording_scale, recording_update


def _child(request: dict[str, Any]) -> int:
    """Run the script of `request` in this (forked) process; its exit code."""
    workdir = Path(request["workdir"])
    os.chdir(workdir)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the server's request pipe
    for fd, name in ((1, STDOUT), (2, STDERR)):
        os.dup2(os.open(workdir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.environ.update(request.get("env", {}))
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
    """Say whether a GPU is visible (without starting CUDA: the checker's script_server expects this first
    line), then fork a child per request line until stdin closes."""
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
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = _child(request)
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the scripts' folders take its place in the children
    if sys.argv[1:2] == ["--run"]:  # one run in this process (on a GPU: CUDA and fork do not mix)
        sys.exit(_child(json.loads(sys.argv[2])))
    serve()
