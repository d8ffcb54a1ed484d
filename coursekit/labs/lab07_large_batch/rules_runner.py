"""What the lab 07 rules checker runs in its own process: the participant's file on fixed inputs.

``python rules_runner.py MY_RULES.py OUT.json`` imports the participant's file and calls, part by part,
``scaled_lr``, ``warmup_then_decay``, ``warmup_scheduler`` and ``LARS`` on the inputs below; after each part it
rewrites OUT.json, so a part that hangs leaves the parts before it readable. An error is stored as the
participant's own lines of its traceback. The checker (``rules_check``) computes the engine's answers on the
same inputs with :func:`scheduler_lrs` and :func:`lars_trajectory` and compares.

This module imports torch only inside its functions: a file with a syntax error is reported at once.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODULE_NAME = "my_rules"
PARTS = ("scaling", "warmup", "scheduler", "lars")
# scaled_lr: (base_lr, base_batch, batch); the first is Goyal et al.'s ImageNet run
SCALING_CASES = ((0.1, 256, 8192), (0.05, 32, 512), (0.4, 1024, 256), (0.1, 256, 256))
# warmup_then_decay and warmup_scheduler: (warmup_steps, total_steps); the first is lab 07's batch 4096 on the GPU
SCHEDULE_CASES = ((28, 140), (5, 12), (0, 10))
SCHEDULER_PEAK_LR = 0.4
# LARS on a small fixed model, in float64, with fixed gradients; weight decay large so that its term shows
LARS_LR = 2.0
LARS_MOMENTUM = 0.9
LARS_WEIGHT_DECAY = 0.01
LARS_TRUST_COEFFICIENT = 0.001
LARS_STEPS = 3
LARS_SEED = 7
WEIGHT_SCALE, BIAS_SCALE, GRAD_SCALE = 0.3, 0.1, 0.01


def schedule_key(warmup_steps: int, total_steps: int) -> str:
    return f"{warmup_steps}/{total_steps}"


def participant_error(error: BaseException, path: Path) -> str:
    """The traceback lines of the participant's file, and the error itself (the checker's frames left out)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == path]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(error), error)
    return "".join(lines).rstrip()


def load(path: Path) -> Any:
    """The participant's file as a module (its ``if __name__ == "__main__":`` part does not run)."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _number(value: Any, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} returned {value!r}: return a number") from None


def _function(module: Any, name: str) -> Callable[..., Any]:
    found = getattr(module, name, None)
    if not callable(found):
        raise AttributeError(f"the file defines no {name}: keep the name the exercise gives")
    return found


def measure_scaling(module: Any) -> dict[str, Any]:
    scaled = _function(module, "scaled_lr")
    return {"values": [_number(scaled(*case), f"scaled_lr{case}") for case in SCALING_CASES]}


def measure_warmup(module: Any) -> dict[str, Any]:
    factor = _function(module, "warmup_then_decay")
    return {"factors": {schedule_key(w, t): [_number(factor(s, w, t), f"warmup_then_decay({s}, {w}, {t})")
                                             for s in range(t + 1)] for w, t in SCHEDULE_CASES}}


def scheduler_lrs(make_scheduler: Callable[..., Any], warmup_steps: int, total_steps: int) -> list[float]:
    """The LR of an SGD optimizer at each step 0 ... total_steps under the scheduler ``make_scheduler(optimizer)``
    gives, stepped once after every optimiser step, as a training loop does."""
    import torch

    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=SCHEDULER_PEAK_LR)
    scheduler = make_scheduler(optimizer)
    lrs = [float(optimizer.param_groups[0]["lr"])]
    for _ in range(total_steps):
        optimizer.step()
        scheduler.step()
        lrs.append(float(optimizer.param_groups[0]["lr"]))
    return lrs


def measure_scheduler(module: Any) -> dict[str, Any]:
    make = _function(module, "warmup_scheduler")
    return {"lrs": {schedule_key(w, t): scheduler_lrs(lambda opt, w=w, t=t: make(opt, w, t), w, t)
                    for w, t in SCHEDULE_CASES}}


def fixed_model() -> Any:
    """A small float64 network with convolution, batch norm and linear layers; the last one starts at 0 (as
    zero-initialised heads do), so its ||w|| is 0. The same numbers every time; torch's global RNG is left alone."""
    from collections import OrderedDict

    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):  # the layers' own initialisation draws from the global RNG
        model = nn.Sequential(OrderedDict(
            conv=nn.Conv2d(3, 8, 3), bn=nn.BatchNorm2d(8), act=nn.ReLU(), pool=nn.AdaptiveAvgPool2d(1),
            flat=nn.Flatten(), fc=nn.Linear(8, 8), head=nn.Linear(8, 4))).double()
    generator = torch.Generator().manual_seed(LARS_SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith("head."):
                param.zero_()
            elif name.startswith("bn."):
                param.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                scale = WEIGHT_SCALE if param.ndim > 1 else BIAS_SCALE
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * scale)
    return model


def lars_trajectory(optimizer_class: Callable[..., Any]) -> dict[str, Any]:
    """LARS_STEPS steps of ``optimizer_class`` (LARS's arguments) on :func:`fixed_model` with fixed gradients,
    parameters grouped as the engine groups them: the weights after each step, each layer's local LR read from the
    first step, ||Δw|| / (lr ||g + weight_decay w||) (the momentum is still 0), the norms of its first gradient and
    initial weights, and whether its group takes the trust ratio ("adapted")."""
    import torch

    from coursekit.train.optim import parameter_groups

    model = fixed_model()
    groups = parameter_groups(model, LARS_WEIGHT_DECAY)
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    optimizer = optimizer_class(groups, lr=LARS_LR, momentum=LARS_MOMENTUM,
                                trust_coefficient=LARS_TRUST_COEFFICIENT)
    generator = torch.Generator().manual_seed(LARS_SEED + 1)
    params = dict(model.named_parameters())
    initial = {name: p.detach().clone() for name, p in params.items()}
    weights, local_lr, first = [], {}, {}
    for step in range(LARS_STEPS):
        before = {name: p.detach().clone() for name, p in params.items()}
        for p in params.values():
            p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype) * GRAD_SCALE
        if step == 0:
            first = {name: p.grad.clone() for name, p in params.items()}
        optimizer.step()
        weights.append({name: p.detach().flatten().tolist() for name, p in params.items()})
        if step == 0:
            for name, p in params.items():
                direction = torch.linalg.vector_norm(first[name] + decay_of[id(p)] * before[name]).item()
                moved = torch.linalg.vector_norm(p.detach() - before[name]).item()
                local_lr[name] = moved / (LARS_LR * direction) if direction > 0 else math.nan
    adapted = {id(p) for g in groups if g["layer_adaptation"] for p in g["params"]}
    return {"weights": weights, "local_lr": local_lr,
            "grad_norms": {n: torch.linalg.vector_norm(g).item() for n, g in first.items()},
            "weight_norms": {n: torch.linalg.vector_norm(w).item() for n, w in initial.items()},
            "adapted": {n: id(p) in adapted for n, p in params.items()}}


def measure_lars(module: Any) -> dict[str, Any]:
    return lars_trajectory(_function(module, "LARS"))


MEASURES: dict[str, Callable[[Any], dict[str, Any]]] = {
    "scaling": measure_scaling, "warmup": measure_warmup, "scheduler": measure_scheduler, "lars": measure_lars}


def measure(module: Any, path: Path, write: Callable[[dict[str, Any]], None] = lambda _: None) -> dict[str, Any]:
    """Every part on the loaded module: ``{part: {...measured} | {"error": text}}``; ``write`` after each part,
    with ``running`` naming the part under way."""
    results: dict[str, Any] = {"load": {"ok": True}}
    for part in PARTS:
        write({**results, "running": part})
        try:
            results[part] = MEASURES[part](module)
        except Exception as error:  # noqa: BLE001 - any error of the participant's code is reported as such
            results[part] = {"error": participant_error(error, path)}
    write(results)
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python rules_runner.py MY_RULES.py OUT.json", file=sys.stderr)
        return 2
    path, out = Path(argv[1]).resolve(), Path(argv[2])

    def write(results: dict[str, Any]) -> None:
        partial = out.with_suffix(".part")
        partial.write_text(json.dumps(results))
        partial.replace(out)

    write({"running": "load"})
    try:
        module = load(path)
    except BaseException as error:  # noqa: BLE001 - a SyntaxError, a SystemExit, anything the file does
        write({"load": {"error": participant_error(error, path)}})
        return 0
    measure(module, path, write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
