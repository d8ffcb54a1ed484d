"""What the DDP checker (``ddp_check``) judges: the options both scripts run with, what each rank recorded
(:class:`RankRun`, written by ``ddp_runner``) and the serial reference (:class:`SerialReference`), read into
weights and accuracies, and the verdict of each check after the run's own: weights, shuffling, checkpoint,
accuracy, printing."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, Check

WEIGHT_TOLERANCE = 1e-5
ACCURACY_TOLERANCE = 1e-3  # accuracies print with 4 decimals; one image of 256 weighs 0.0039
INDICES_SHOWN = 6
ACCURACY_PATTERN = re.compile(r"val_acc[\s:=]+([0-9]*\.?[0-9]+)")


@dataclass(frozen=True)
class CheckOptions:
    """What both scripts are run with: tiny data, two epochs (set_epoch shows from the second)."""

    epochs: int = 2
    batch_size: int = 16  # per process; the serial run gets batch_size x nproc
    lr: float = 0.05
    seed: int = 0
    data_size: int = 1024

    def argv(self, batch_size: int, out: Path) -> list[str]:
        return ["--epochs", str(self.epochs), "--batch-size", str(batch_size), "--lr", repr(self.lr),
                "--seed", str(self.seed), "--data-size", str(self.data_size), "--out", str(out)]


@dataclass(frozen=True)
class SerialReference:
    """The serial script's final weights, its ``val_acc`` of each epoch and its output."""

    weights: dict[str, torch.Tensor]
    accuracies: list[float]
    output: str


@dataclass
class RankRun:
    """One rank's run: exit code, output, and the record ``ddp_runner`` wrote (None: it wrote none)."""

    rank: int
    returncode: int | None
    stdout: str
    stderr: str
    record: dict[str, Any] | None


# ---------------------------------------------------------------- reading what ran

def printed_accuracies(stdout: str) -> list[float]:
    """The ``val_acc <number>`` values a script printed, in order."""
    return [float(m.group(1)) for m in ACCURACY_PATTERN.finditer(stdout)]


def checkpoint_weights(checkpoint: Any) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The weights in a checkpoint, with DDP's "module." prefix removed, and a note when there was one."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        checkpoint = checkpoint["model"]
    if not isinstance(checkpoint, dict) or not checkpoint or not all(
            isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return None, ""
    if all(k.startswith("module.") for k in checkpoint):
        return {k.removeprefix("module."): v for k, v in checkpoint.items()}, (
            "note: the checkpoint was saved through the DDP wrapper (names start with 'module.'); "
            "save model.module.state_dict() so that the plain model can load it")
    return dict(checkpoint), ""


@torch.no_grad()
def model_accuracy(model: torch.nn.Module, dataset: Any, indices: list[int] | None = None) -> float:
    """The accuracy of ``model`` on ``dataset`` (or on its ``indices``)."""
    images, labels = dataset.tensors
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return (model(images).argmax(dim=1) == labels).float().mean().item()


# ---------------------------------------------------------------- the checks (the run's own: ddp_check)

def training_sampler(record: dict[str, Any], train_size: int) -> dict[str, Any] | None:
    """The rank's DistributedSampler over the training set (None: it used none)."""
    samplers = [s for s in record["samplers"] if s["dataset_size"] == train_size]
    return samplers[0] if samplers else None


def check_shuffling(runs: list[RankRun], train_size: int) -> tuple[Check, dict[int, list[list[int]]]]:
    orders = {}
    for run in runs:
        sampler = training_sampler(run.record, train_size)
        if sampler is None:
            return Check("shuffling", FAIL, f"rank {run.rank} drew no training data through a DistributedSampler: "
                                            "every rank goes through the whole training set; give the training "
                                            "DataLoader sampler=DistributedSampler(train_set, ...)"), orders
        orders[run.rank] = sampler["epochs"]
    epochs = orders[0]
    if not training_sampler(runs[0].record, train_size)["shuffle"]:
        return Check("shuffling", FAIL, "the training DistributedSampler does not shuffle (shuffle=False): "
                                        "every epoch sees the same order; use shuffle=True, seed=args.seed"), orders
    if len(epochs) < 2:
        return Check("shuffling", SKIP, f"the training sampler was iterated {len(epochs)} time(s): the script "
                                        "ran fewer than the 2 epochs asked (--epochs)"), orders
    shown = "\n".join(f"epoch {e + 1}: {order[:INDICES_SHOWN]} ..." for e, order in enumerate(epochs[:2]))
    if all(order == epochs[0] for order in epochs[1:]):
        return Check("shuffling", FAIL, "every epoch deals the same samples in the same order: call "
                                        "train_sampler.set_epoch(epoch) at the start of each epoch (rank 0's "
                                        f"indices):\n{shown}"), orders
    shares = [set(o[0]) for o in orders.values()]
    overlap = set.intersection(*shares) if len(shares) > 1 else set()
    if overlap:
        return Check("shuffling", FAIL, f"the ranks draw the same samples ({len(overlap)} in common in epoch 1): "
                                        "give DistributedSampler num_replicas=world_size and rank=rank"), orders
    return Check("shuffling", PASS, f"a new order every epoch (rank 0's indices):\n{shown}"), orders


def check_checkpoint(runs: list[RankRun]) -> Check:
    savers = [r.rank for r in runs if r.record["saves"]]
    if savers == [0]:
        return Check("checkpoint", PASS, f"rank 0 saved {Path(runs[0].record['saves'][-1]).name}; the others did not")
    if not savers:
        return Check("checkpoint", FAIL, "no rank called torch.save: save the checkpoint on rank 0, "
                                         "like the serial script saves it")
    if len(savers) > 1:
        return Check("checkpoint", FAIL, f"ranks {', '.join(map(str, savers))} all call torch.save: the same file "
                                         f"is written {len(savers)} times (on a shared file system they race and "
                                         "can leave it corrupt); save under `if rank == 0:` only")
    return Check("checkpoint", FAIL, f"rank {savers[0]} saves, rank 0 does not: save under `if rank == 0:` "
                                     "(rank 0 is the one that always exists)")


def saved_weights(runs: list[RankRun]) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The weights the first saving rank wrote (other ranks' saves went beside it), and a note."""
    for run in runs:
        for path in reversed(run.record["saves"]):
            file = Path(path if run.rank == 0 else f"{path}.rank{run.rank}")
            if file.is_file():
                try:
                    return checkpoint_weights(torch.load(file, map_location="cpu", weights_only=True))
                except Exception as error:  # noqa: BLE001 - any unreadable file is reported as such
                    return None, f"cannot load {file.name}: {error}"
    return None, "no checkpoint file was written"


def why_weights_differ(runs: list[RankRun], options: CheckOptions, shuffling: Check) -> str:
    record = runs[0].record
    if shuffling.verdict == FAIL:
        return ("expected while the shuffling check fails: from the second epoch on, the batches are not the "
                "serial run's; fix the shuffling first")
    if record["ddp_models"] == 0:
        return ("the model is not wrapped in DistributedDataParallel: each rank trains its own copy on its share "
                "of the data and the gradients are never averaged; wrap it: model = DDP(model, ...)")
    rates = sorted(set(record["learning_rates"]))
    if rates and not any(math.isclose(lr, options.lr) for lr in rates):
        return (f"the optimizer's learning rate is {', '.join(f'{lr:g}' for lr in rates)}, but --lr was "
                f"{options.lr:g}: use --lr as given (it is the global batch's rate; no × world size)")
    return ("the gradient step differs from the serial one: is --lr used as given (no × world size)? is each "
            "rank's DistributedSampler given num_replicas=world_size, rank=rank and seed=args.seed?")


def check_weights(weights: dict[str, torch.Tensor] | None, note: str, reference: SerialReference,
                  nproc: int, batch_size: int, why: str) -> tuple[Check, float | None]:
    if weights is None:
        return Check("weights", FAIL, f"cannot compare: {note or 'no model weights found in the checkpoint'} "
                                      "(save {'model': model.module.state_dict()} on rank 0)"), None
    if set(weights) != set(reference.weights):
        return Check("weights", FAIL, f"the saved weights have other names than the serial model's: "
                                      f"{sorted(set(weights) ^ set(reference.weights))[:4]}"), None
    if any(weights[k].shape != reference.weights[k].shape for k in weights):
        return Check("weights", FAIL, "the saved weights have other shapes than the serial model's"), None
    diff = max((weights[k].double() - reference.weights[k].double()).abs().max().item() for k in weights)
    worst = max(weights, key=lambda k: (weights[k].double() - reference.weights[k].double()).abs().max().item())
    measured = (f"max |Δw| = {diff:.1e} (tolerance {WEIGHT_TOLERANCE:.0e}) against the serial run at batch "
                f"{nproc * batch_size} = {nproc} × {batch_size}")
    suffix = f"\n{note}" if note else ""
    if diff <= WEIGHT_TOLERANCE:
        return Check("weights", PASS, measured + suffix), diff
    return Check("weights", FAIL, f"{measured}, largest in {worst!r}: {why}{suffix}"), diff


def check_accuracy(printed: float | None, global_acc: float | None, local: dict[int, float],
                   serial_acc: float | None, nproc: int, val_shares: dict[int, int], same_models: bool) -> Check:
    if printed is None:
        return Check("accuracy", FAIL, "no rank printed `val_acc <number>`: print it each epoch like the serial "
                                       "script (the checker reads it)")
    if global_acc is None:
        if serial_acc is not None and math.isclose(printed, serial_acc, abs_tol=ACCURACY_TOLERANCE):
            return Check("accuracy", PASS, f"printed {printed:.4f} = the serial run's {serial_acc:.4f}")
        return Check("accuracy", SKIP, f"printed {printed:.4f}; the saved model could not be evaluated to "
                                       "compare it")
    if math.isclose(printed, global_acc, abs_tol=ACCURACY_TOLERANCE):
        shares = ", ".join(f"rank {r}: {a:.4f}" for r, a in local.items())
        return Check("accuracy", PASS, f"printed {printed:.4f} = the saved model on the whole validation set "
                                       f"(each rank's share alone: {shares})")
    for rank, value in local.items():
        if math.isclose(printed, value, abs_tol=ACCURACY_TOLERANCE):
            return Check("accuracy", FAIL, f"printed {printed:.4f} is rank {rank}'s accuracy on its own "
                                           f"{val_shares.get(rank, '?')} validation images; the whole set gives "
                                           f"{global_acc:.4f}: add the correct counts and totals over the ranks "
                                           "with dist.all_reduce before dividing")
    if math.isclose(printed, nproc * global_acc, abs_tol=nproc * ACCURACY_TOLERANCE):
        return Check("accuracy", FAIL, f"printed {printed:.4f} = {nproc} × {global_acc:.4f}: the sum over the "
                                       "ranks, not the average; divide by the world size (or sum the totals too)")
    hint = "" if same_models else " (the ranks hold different models: see the weights check)"
    return Check("accuracy", FAIL, f"printed {printed:.4f}, but the saved model scores {global_acc:.4f} on the "
                                   f"whole validation set{hint}")


def check_printing(runs: list[RankRun]) -> Check:
    printers = [r.rank for r in runs if printed_accuracies(r.stdout)]
    if len(printers) <= 1:
        return Check("printing", PASS, f"epoch lines from rank {printers[0]} only" if printers else
                     "no epoch lines (see the accuracy check)")
    return Check("printing", FAIL, f"ranks {', '.join(map(str, printers))} each print the epoch lines: print "
                                   "under `if rank == 0:` only (the log shows every line once per rank)")


def validation_shares(runs: list[RankRun], val_size: int) -> dict[int, list[int]]:
    """Each rank's validation indices, as its sampler dealt them (DistributedSampler's split if none did)."""
    shares = {}
    for run in runs:
        samplers = [s for s in run.record["samplers"] if s["dataset_size"] == val_size and s["epochs"]]
        shares[run.rank] = samplers[0]["epochs"][-1] if samplers else list(range(run.rank, val_size, len(runs)))
    return shares
