"""What a resumable run leaves (``steps.jsonl``, ``checkpoint.pt``) and where two runs part: read by the checker
(``resume_check``) and by the notebook's comparison of two jobs (``resume``).

``steps.jsonl`` holds one ``{"event": "start"}`` record per start of the script (with the step it resumed at), one
record per step (step, epoch, position in the epoch, learning rate, digests of the batch's sample indices and of the
random generator's state, the size of the optimizer's momentum, the loss) and a ``stopped``/``done`` record.
:func:`compare_steps` finds the first step where a resumed start's records differ from an uninterrupted run's and
names what the resume forgot; :func:`checkpoint_parts` finds a checkpoint's parts by their shape, whatever the
participant called them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

CHECKPOINT = "checkpoint.pt"  # what the script writes in --out (its CHECKPOINT and STEPS_LOG)
STEPS_LOG = "steps.jsonl"
# max |Δw| of the final weights. On a CPU the same operations in the same order give the same bits: a right resume
# gives 0.0 (measured); 1e-6 leaves room for nothing else. On a GPU, dropout's masks come from the restored CUDA
# generator and the MLP's kernels are deterministic: max |Δw| = 0.0 measured on an H200 (torch 2.11; widths 64 and
# 4096, batches 32 to 8192, resumed mid-epoch); 1e-5 covers kernels that add in another order. A planted mistake
# moves the weights by 0.3 to 1.5 (test_resume_check.py): 10^5 times the GPU's tolerance and more.
WEIGHT_TOLERANCE = {"cpu": 1e-6, "cuda": 1e-5}
RELATIVE_TOLERANCE = {"cpu": 1e-9, "cuda": 1e-5}  # per-step learning rate, momentum and loss of the two runs
RNG_STATE_BYTES = 5056  # torch.get_rng_state(): the CPU generator (mt19937) in 5056 bytes
PROGRESS_KEYS = ("epoch", "position", "step")
# what a resume forgot, by the record that first differs (in this order of precedence at that step)
FORGOTTEN = {
    "batch": "data order",
    "momentum": "optimizer state",
    "lr": "scheduler",
    "rng": "random state",
    "loss": "model weights",
}


@dataclass(frozen=True)
class Divergence:
    """The first step where a resumed run's records part from the uninterrupted run's, and what that names."""

    step: int
    fields: tuple[str, ...]  # the records that differ at that step (batch, momentum, lr, rng, loss, step)
    forgotten: str  # what the resume forgot (a FORGOTTEN value, or "step counter")
    explanation: str


# ---------------------------------------------------------------- reading what a run left

def read_steps(folder: Path) -> list[dict[str, Any]]:
    """The records of ``steps.jsonl`` in `folder`, in order ([] where there is none)."""
    path = Path(folder) / STEPS_LOG
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def starts(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records split by start (each begins with its ``{"event": "start"}`` record)."""
    found: list[list[dict[str, Any]]] = []
    for record in records:
        if record.get("event") == "start" or not found:
            found.append([])
        found[-1].append(record)
    return found


def step_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "event" not in r]


def load_checkpoint(path: Path) -> tuple[Any, str]:
    """The checkpoint at `path` (loaded on the CPU), or None and why not."""
    if not Path(path).is_file():
        return None, f"no {Path(path).name} in --out"
    try:
        return torch.load(path, map_location="cpu", weights_only=True), ""
    except Exception as error:  # noqa: BLE001 - any unreadable file is reported as such
        return None, f"cannot load {Path(path).name}: {error}"


def _is_rng(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.uint8 and value.numel() >= RNG_STATE_BYTES
    if isinstance(value, dict) and value:
        return all(isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in value.values())
    if isinstance(value, (list, tuple)) and value:
        return all(_is_rng(v) for v in value)
    return False


def _kind(value: Any) -> str | None:
    """What a part of a checkpoint is, by its shape: model, optimizer, scheduler or rng."""
    if isinstance(value, dict) and {"state", "param_groups"} <= set(value):
        return "optimizer"
    if isinstance(value, dict) and "last_epoch" in value and "base_lrs" in value:
        return "scheduler"
    if _is_rng(value):
        return "rng"
    if (isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values())
            and any(str(k).endswith("weight") for k in value)):
        return "model"
    return None


def checkpoint_parts(checkpoint: Any) -> dict[str, Any]:
    """The parts of a checkpoint found by their shape (``model``, ``optimizer``, ``scheduler``, ``rng``) and the
    progress by name (``epoch``, ``position``, ``step``), whatever the other keys are called."""
    parts: dict[str, Any] = {}
    if not isinstance(checkpoint, dict):
        return parts
    kind = _kind(checkpoint)
    if kind == "model":  # a bare state_dict
        return {"model": checkpoint}
    for key, value in checkpoint.items():
        kind = _kind(value)
        if kind is not None:
            parts.setdefault(kind, value)
        elif key in PROGRESS_KEYS and isinstance(value, int) and not isinstance(value, bool):
            parts[key] = value
        elif isinstance(value, dict):  # one level down: {"progress": {...}}, {"states": {...}}
            for inner_key, inner in value.items():
                inner_kind = _kind(inner)
                if inner_kind is not None:
                    parts.setdefault(inner_kind, inner)
                elif inner_key in PROGRESS_KEYS and isinstance(inner, int) and not isinstance(inner, bool):
                    parts.setdefault(inner_key, inner)
    return parts


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float | None:
    """max |a - b| over the floating-point tensors of two state dicts with the same names and shapes; None if not."""
    if set(a) != set(b) or any(a[k].shape != b[k].shape for k in a):
        return None
    diffs = [float((a[k].double() - b[k].double()).abs().max()) for k in a
             if a[k].is_floating_point() and a[k].numel()]
    return max(diffs, default=0.0)


# ---------------------------------------------------------------- where two runs part

def _differs(a: Any, b: Any, relative: float) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a != b
    if a is None or b is None:
        return a is not b
    return not math.isclose(float(a), float(b), rel_tol=relative, abs_tol=relative * 1e-3)


def compare_steps(reference: list[dict[str, Any]], resumed: list[dict[str, Any]], resumed_at: int | None,
                  relative: float) -> Divergence | None:
    """The first step of `resumed` (the step records of a resumed start) whose record differs from `reference`'s
    (an uninterrupted run's step records) of the same step, and what the resume forgot; None where none does."""
    by_step = {r["step"]: r for r in reference}
    if resumed and resumed_at is not None and resumed[0]["step"] != resumed_at + 1 or (
            resumed and resumed_at == 0 and resumed[0]["step"] == 1 and resumed[0].get("position", 0) != 0):
        first = resumed[0]
        return Divergence(first["step"], ("step",), "step counter",
                          f"the resumed start counted from step {first['step']} (epoch {first.get('epoch')}, "
                          f"batch {first.get('position')} of it): the step counter restarted; return the saved "
                          "\"step\" from resume()")
    for record in resumed:
        mirror = by_step.get(record["step"])
        if mirror is None:
            return Divergence(record["step"], ("step",), "step counter",
                              f"the resumed run trained a step {record['step']}, which the uninterrupted run never "
                              "reached: the step counter was not restored")
        fields = tuple(name for name in FORGOTTEN if _differs(record.get(name), mirror.get(name), relative))
        if fields:
            forgotten = FORGOTTEN[fields[0]]
            return Divergence(record["step"], fields, forgotten,
                              _explain(forgotten, record, mirror, reference))
    return None


def _explain(forgotten: str, record: dict[str, Any], mirror: dict[str, Any], reference: list[dict[str, Any]]) -> str:
    step = record["step"]
    if forgotten == "data order":
        same = [r for r in reference if r.get("batch") == record.get("batch")]
        if same and same[0].get("epoch") == 0 and mirror.get("epoch", 0) != 0:
            return (f"step {step} trained on the batch the uninterrupted run trained at step {same[0]['step']} "
                    f"(epoch 0, batch {same[0].get('position')}): the sampler's epoch was not restored, so "
                    f"set_epoch dealt epoch 0's order instead of epoch {mirror.get('epoch')}'s; return the saved "
                    "\"epoch\" from resume()")
        if same and same[0].get("position") == 0 and same[0].get("epoch") == mirror.get("epoch"):
            return (f"step {step} trained on the first batch of epoch {mirror.get('epoch')} again (the uninterrupted "
                    f"run's step {same[0]['step']}), not its batch {mirror.get('position')}: the position in the "
                    "epoch was not restored; return the saved \"position\" from resume()")
        return (f"step {step} trained on another batch than the uninterrupted run's (epoch {mirror.get('epoch')}, "
                f"batch {mirror.get('position')}): the sampler's epoch or the position in the epoch was not "
                "restored")
    if forgotten == "optimizer state":
        return (f"at step {step} the optimizer's momentum buffers measured |m| = {record.get('momentum'):.4g}, the "
                f"uninterrupted run's {mirror.get('momentum'):.4g}: the optimizer's state was not restored "
                "(optimizer.load_state_dict)")
    if forgotten == "scheduler":
        return (f"at step {step} the learning rate was {record.get('lr'):.6g}, the uninterrupted run's "
                f"{mirror.get('lr'):.6g}: the scheduler started its schedule again (scheduler.load_state_dict)")
    if forgotten == "random state":
        return (f"at step {step} the random generator's state differed from the uninterrupted run's, so dropout drew "
                "other masks: the random generators' states were not restored (set_rng_states)")
    return (f"at step {step} the loss was {record.get('loss'):.6g}, the uninterrupted run's {mirror.get('loss'):.6g}, "
            "with the same batch, learning rate, momentum and random state: the model's weights were not restored "
            "(model.load_state_dict)")
