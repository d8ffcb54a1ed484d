"""Check a participant's DDP script against the serial script it came from, and say in plain words what is wrong.

``check_ddp_script("lab06_ddp/train_ddp.py")`` runs the script on 2 CPU processes (gloo, one local process per
rank with torchrun's variables) and ``train_serial.py`` (found next to it) on one process with the global
batch, then judges:

- **weights**: N ranks at batch B must give the weights of the serial run at batch N*B (max |Δw| ≤ 1e-5);
- **shuffling**: the training ``DistributedSampler`` must deal a new order every epoch (``set_epoch``);
- **checkpoint**: rank 0 alone saves;
- **accuracy**: the printed validation accuracy is that of the whole validation set, not one rank's share;
- **printing**: rank 0 alone prints the epoch lines.

The script must take the serial script's options (``--epochs --batch-size --lr --seed --data-size --out``),
print ``val_acc <number>`` each epoch and save ``{"model": state_dict}`` (or a bare state_dict) with
``torch.save``. The serial reference runs once per set of options and is cached for the session.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from coursekit.labs.kit import exercise, script_check
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import CRASH_GRACE_S, FAIL, PASS, SKIP, Check, CheckReport, tail
from coursekit.labs.kit.script_check import STOP_GRACE_S as STOP_GRACE_S  # the tests read it here
from coursekit.labs.lab06_data_parallel import SCRIPTS, ddp_runner
from coursekit.launch import held_ports

SERIAL_NAME = "train_serial.py"
SOLUTION = SCRIPTS / "train_ddp.py"  # participants get it as lab06_ddp/train_ddp.py, stripped
RUNNER = Path(ddp_runner.__file__)
WEIGHT_TOLERANCE = 1e-5
ACCURACY_TOLERANCE = 1e-3  # accuracies print with 4 decimals; one image of 256 weighs 0.0039
DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 180.0
INDICES_SHOWN = 6
ACCURACY_PATTERN = re.compile(r"val_acc[\s:=]+([0-9]*\.?[0-9]+)")
SERIAL_API = ("make_datasets", "make_model")
CHECK_QUESTIONS = {
    "run": "the script runs on every rank",
    "weights": "same weights as the serial run on the global batch",
    "shuffling": "a new order of the training data every epoch",
    "checkpoint": "rank 0 alone saves the checkpoint",
    "accuracy": "the printed accuracy is that of the whole validation set",
    "printing": "rank 0 alone prints the epoch lines",
}


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


@dataclass(repr=False)  # repr: CheckReport's text table
class DDPCheckReport(CheckReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    nproc: int
    checks: list[Check]
    seconds: float = 0.0
    max_abs_diff: float | None = None  # max |w_ddp - w_serial| over every weight
    printed_accuracy: float | None = None  # the last val_acc the ranks printed
    global_accuracy: float | None = None  # the saved model on the whole validation set
    local_accuracy: dict[int, float] = field(default_factory=dict)  # the saved model on each rank's share
    serial_accuracies: list[float] = field(default_factory=list)  # the serial run's val_acc per epoch
    epoch_orders: dict[int, list[list[int]]] = field(default_factory=dict)  # rank -> epoch -> training indices
    outputs: dict[int, str] = field(default_factory=dict)  # rank -> stdout
    questions = CHECK_QUESTIONS

    def headline(self) -> str:
        return f"DDP check of {self.script} on {self.nproc} processes (gloo, CPU): {self.summary()}"


@dataclass(frozen=True)
class SerialReference:
    weights: dict[str, torch.Tensor]
    accuracies: list[float]
    output: str


@dataclass
class RankRun:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str
    record: dict[str, Any] | None


# Mistakes planted in the solution (SOLUTION) for the tests and the notebook's demos:
# name -> (what it does, the (old, new) replacements that make it)
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "lr_times_world_size": ("the learning rate multiplied by the world size (Horovod's habit)", (
        ("lr=args.lr, momentum", "lr=args.lr * world_size, momentum"),)),
    "no_ddp_wrapper": ("the model is not wrapped in DistributedDataParallel: no gradient averaging", (
        ("    model = DDP(model, device_ids=[device.index] if device.type == \"cuda\" else None)\n", ""),
        ("save_checkpoint(model.module,", "save_checkpoint(model,"))),
    "no_set_epoch": ("train_sampler.set_epoch(epoch) removed", (
        ("        train_sampler.set_epoch(epoch)\n", ""),)),
    "every_rank_saves": ("the checkpoint saved on every rank", (
        ("    if rank == 0:\n        save_checkpoint(", "    if True:\n        save_checkpoint("),)),
    "rank_local_accuracy": ("the metrics not added up over the ranks: rank 0 prints its own share's", (
        ("        dist.all_reduce(sums, op=dist.ReduceOp.SUM)\n", ""),)),
    "every_rank_prints": ("the epoch lines printed on every rank", (
        ("        if rank == 0:\n            print_epoch(", "        if True:\n            print_epoch("),)),
}


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "DDP script", "lab06_ddp/train_ddp.py",
                          SERIAL_NAME, "serial", reference_arg="serial", made_from="your DDP version")


# ---------------------------------------------------------------- running

def run_ranks(script: Path, args: list[str], nproc: int, workdir: Path,
              timeout_s: float) -> tuple[list[RankRun], bool]:
    """Run `script` as ranks 0..nproc-1 under the recording runner; the runs and whether time ran out."""
    records = workdir / "records"
    records.mkdir(parents=True, exist_ok=True)
    with held_ports(1) as (port,):  # held until the ranks end: no other process takes it meanwhile
        processes = script_check.start_ranks(
            [sys.executable, "-u", str(RUNNER), str(records), str(script), *args], nproc, workdir,
            lambda rank: {**script_check.rank_env(rank, nproc), "MASTER_PORT": str(port)})
        timed_out = script_check.watch(processes, timeout_s, crash_grace_s=CRASH_GRACE_S)
    runs = []
    for rank, process in enumerate(processes):
        record_file = ddp_runner.record_path(records, rank)
        record = json.loads(record_file.read_text()) if record_file.is_file() else None
        out, err = (script_check.read_text(script_check.rank_output(workdir, rank, s)) for s in ("out", "err"))
        runs.append(RankRun(rank, process.returncode, out, err, record))
    return runs, timed_out


def serial_reference(serial: Path, options: CheckOptions, global_batch: int, timeout_s: float) -> SerialReference:
    """The serial script's weights and accuracies at the global batch; run once per session and options."""
    def compute() -> SerialReference:
        with tempfile.TemporaryDirectory(prefix="ddp-check-serial-") as folder:
            out = Path(folder) / "serial"
            command = [sys.executable, "-u", str(serial), *options.argv(global_batch, out)]
            try:
                done = subprocess.run(command, cwd=folder, env=script_check.launcher_free_env(), capture_output=True,
                                      text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the serial reference {serial} did not finish within {timeout_s:.0f} s") from None
            checkpoints = sorted(out.glob("*.pt"))
            if done.returncode != 0 or not checkpoints:
                raise RuntimeError(f"the serial reference {serial} failed (exit code {done.returncode}, "
                                   f"{len(checkpoints)} checkpoint): {tail(done.stderr)}")
            weights = _state_dict(torch.load(checkpoints[0], map_location="cpu", weights_only=True))[0]
        return SerialReference(weights, _accuracies(done.stdout), done.stdout)
    return EXERCISE.cached((*EXERCISE.file_key(serial), options, global_batch), compute)


# ---------------------------------------------------------------- reading what ran

def _accuracies(stdout: str) -> list[float]:
    return [float(m.group(1)) for m in ACCURACY_PATTERN.finditer(stdout)]


def _state_dict(checkpoint: Any) -> tuple[dict[str, torch.Tensor] | None, str]:
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


def _load_module(path: Path) -> ModuleType:
    module = exercise.load_module(path, f"_ddp_check_{path.stem}")
    missing = [name for name in SERIAL_API if not hasattr(module, name)]
    if missing:
        raise ImportError(f"{path} has no {', '.join(missing)}: the checker builds the model and data with them")
    return module


@torch.no_grad()
def _accuracy(model: torch.nn.Module, dataset: Any, indices: list[int] | None = None) -> float:
    images, labels = dataset.tensors
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return (model(images).argmax(dim=1) == labels).float().mean().item()


# ---------------------------------------------------------------- the checks

def _check_run(runs: list[RankRun], timed_out: bool, timeout_s: float, seconds: float) -> Check:
    if timed_out:
        tails = "\n".join(f"rank {r.rank} last printed: {tail(r.stdout + r.stderr, 3)}" for r in runs)
        return Check("run", FAIL, f"the ranks did not finish within {timeout_s:.0f} s: one rank waits for the "
                                  f"others (a collective that not every rank calls? a world size that does not "
                                  f"match the ranks started?). They were stopped.\n{tails}")
    crashed = [r for r in runs if r.returncode != 0]
    if crashed:
        first = next((r for r in crashed if r.returncode and r.returncode > 0), crashed[0])
        others = [f"rank {r.rank} {'failed' if r.returncode and r.returncode > 0 else 'was stopped'}"
                  for r in crashed if r is not first]
        also = f" ({', '.join(others)} too)" if others else ""
        return Check("run", FAIL, f"rank {first.rank} failed with exit code {first.returncode}{also}; "
                                  f"the end of its error output:\n{tail(EXERCISE.without_runner(first.stderr))}")
    if any(r.record is None for r in runs):
        return Check("run", FAIL, "a rank ended without the checker's record: did the script call os._exit()?")
    return Check("run", PASS, f"{len(runs)} ranks finished in {seconds:.1f} s")


def _training_sampler(record: dict[str, Any], train_size: int) -> dict[str, Any] | None:
    samplers = [s for s in record["samplers"] if s["dataset_size"] == train_size]
    return samplers[0] if samplers else None


def _check_shuffling(runs: list[RankRun], train_size: int) -> tuple[Check, dict[int, list[list[int]]]]:
    orders = {}
    for run in runs:
        sampler = _training_sampler(run.record, train_size)
        if sampler is None:
            return Check("shuffling", FAIL, f"rank {run.rank} drew no training data through a DistributedSampler: "
                                            "every rank goes through the whole training set; give the training "
                                            "DataLoader sampler=DistributedSampler(train_set, ...)"), orders
        orders[run.rank] = sampler["epochs"]
    epochs = orders[0]
    if not _training_sampler(runs[0].record, train_size)["shuffle"]:
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


def _check_checkpoint(runs: list[RankRun]) -> Check:
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


def _saved_weights(runs: list[RankRun]) -> tuple[dict[str, torch.Tensor] | None, str]:
    """The weights the first saving rank wrote (other ranks' saves went beside it), and a note."""
    for run in runs:
        for path in reversed(run.record["saves"]):
            file = Path(path if run.rank == 0 else f"{path}.rank{run.rank}")
            if file.is_file():
                try:
                    return _state_dict(torch.load(file, map_location="cpu", weights_only=True))
                except Exception as error:  # noqa: BLE001 - any unreadable file is reported as such
                    return None, f"cannot load {file.name}: {error}"
    return None, "no checkpoint file was written"


def _why_weights_differ(runs: list[RankRun], options: CheckOptions, shuffling: Check) -> str:
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


def _check_weights(weights: dict[str, torch.Tensor] | None, note: str, reference: SerialReference,
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


def _check_accuracy(printed: float | None, global_acc: float | None, local: dict[int, float],
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


def _check_printing(runs: list[RankRun]) -> Check:
    printers = [r.rank for r in runs if _accuracies(r.stdout)]
    if len(printers) <= 1:
        return Check("printing", PASS, f"epoch lines from rank {printers[0]} only" if printers else
                     "no epoch lines (see the accuracy check)")
    return Check("printing", FAIL, f"ranks {', '.join(map(str, printers))} each print the epoch lines: print "
                                   "under `if rank == 0:` only (the log shows every line once per rank)")


# ---------------------------------------------------------------- the entry point

def check_ddp_script(path: str | os.PathLike, serial: str | os.PathLike | None = None, nproc: int = DEFAULT_NPROC,
                     *, options: CheckOptions | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> DDPCheckReport:
    """Run the DDP script `path` on `nproc` CPU processes and the serial script (default: train_serial.py
    next to `path`) on one process with the global batch; the report says what is wrong, check by check."""
    script = EXERCISE.script(path)
    serial_path = EXERCISE.reference(script, serial)
    exercise.processes(nproc)
    exercise.positive_timeout(timeout_s)
    options = options or CheckOptions()
    print(f"checking {path}: {script.name} on {nproc} processes beside {serial_path.name} on 1 (global batch "
          f"{nproc * options.batch_size}), {options.epochs} epochs each; every process first imports torch ...",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as folder:
        workdir = Path(folder)

        def ranks() -> tuple[list[RankRun], bool, float]:
            start = time.monotonic()
            runs, timed_out = run_ranks(script, options.argv(options.batch_size, workdir / "out"), nproc, workdir,
                                        timeout_s)
            return runs, timed_out, time.monotonic() - start

        # the serial reference runs beside the ranks: its start (importing torch) overlaps theirs
        (runs, timed_out, seconds), reference = exercise.beside(
            ranks, lambda: serial_reference(serial_path, options, nproc * options.batch_size, timeout_s), True)
        serial_module = _load_module(serial_path)
        train_set, val_set = serial_module.make_datasets(options.data_size, options.seed)
        report = DDPCheckReport(str(path), nproc, [], seconds=seconds, outputs={r.rank: r.stdout for r in runs},
                                serial_accuracies=reference.accuracies)
        run = _check_run(runs, timed_out, timeout_s, seconds)
        if run.verdict != PASS:
            report.checks = EXERCISE.not_run(run)
            return report
        shuffling, report.epoch_orders = _check_shuffling(runs, len(train_set))
        weights, note = _saved_weights(runs)
    weights_check, report.max_abs_diff = _check_weights(weights, note, reference, nproc, options.batch_size,
                                                        _why_weights_differ(runs, options, shuffling))
    val_shares = _validation_shares(runs, len(val_set))
    if report.max_abs_diff is not None:  # the weights fit the serial model: evaluate them
        model = serial_module.make_model()
        model.load_state_dict(weights)
        model.eval()
        report.global_accuracy = _accuracy(model, val_set)
        report.local_accuracy = {r: _accuracy(model, val_set, idx) for r, idx in val_shares.items()}
    printed = [a for r in runs for a in _accuracies(r.stdout)[-1:]]
    report.printed_accuracy = printed[0] if printed else None
    report.checks = [run, weights_check, shuffling, _check_checkpoint(runs),
                     _check_accuracy(report.printed_accuracy, report.global_accuracy, report.local_accuracy,
                                     reference.accuracies[-1] if reference.accuracies else None, nproc,
                                     {r: len(idx) for r, idx in val_shares.items()},
                                     weights_check.verdict == PASS),
                     _check_printing(runs)]
    return report


def _validation_shares(runs: list[RankRun], val_size: int) -> dict[int, list[int]]:
    """Each rank's validation indices, as its sampler dealt them (DistributedSampler's split if none did)."""
    shares = {}
    for run in runs:
        samplers = [s for s in run.record["samplers"] if s["dataset_size"] == val_size and s["epochs"]]
        shares[run.rank] = samplers[0]["epochs"][-1] if samplers else list(range(run.rank, val_size, len(runs)))
    return shares


plant_mistake = EXERCISE.plant_mistake
