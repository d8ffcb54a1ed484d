"""Check a participant's DDP script against the serial script it came from, and say in plain words what is wrong.

``check_ddp_script("lab06_data_parallel/train_ddp.py")`` runs the script on 2 CPU processes (gloo, one local process per
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

This module runs the scripts and gives the run's own verdict; ``ddp_verdicts`` reads what the ranks recorded and
judges the other checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from coursekit.labs.kit import exercise, script_check
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import CRASH_GRACE_S, FAIL, PASS, Check, CheckReport, tail
from coursekit.labs.kit.script_check import SKIP as SKIP  # the tests read it here
from coursekit.labs.kit.script_check import STOP_GRACE_S as STOP_GRACE_S  # the tests read it here
from coursekit.labs.lab06_data_parallel import SCRIPTS, ddp_runner
from coursekit.labs.lab06_data_parallel.ddp_verdicts import (
    ACCURACY_TOLERANCE as ACCURACY_TOLERANCE,  # the tests read it here
)
from coursekit.labs.lab06_data_parallel.ddp_verdicts import (
    WEIGHT_TOLERANCE as WEIGHT_TOLERANCE,  # the tests read it here
)
from coursekit.labs.lab06_data_parallel.ddp_verdicts import (
    CheckOptions,
    RankRun,
    SerialReference,
    check_accuracy,
    check_checkpoint,
    check_printing,
    check_shuffling,
    check_weights,
    checkpoint_weights,
    model_accuracy,
    printed_accuracies,
    saved_weights,
    validation_shares,
    why_weights_differ,
)
from coursekit.launch import held_ports

SERIAL_NAME = "train_serial.py"
SOLUTION = SCRIPTS / "train_ddp.py"  # participants get it as lab06_data_parallel/train_ddp.py, stripped
RUNNER = Path(ddp_runner.__file__)
DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 180.0
SERIAL_API = ("make_datasets", "make_model")
CHECK_QUESTIONS = {
    "run": "the script runs on every rank",
    "weights": "same weights as the serial run on the global batch",
    "shuffling": "a new order of the training data every epoch",
    "checkpoint": "rank 0 alone saves the checkpoint",
    "accuracy": "the printed accuracy is that of the whole validation set",
    "printing": "rank 0 alone prints the epoch lines",
}


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


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "DDP script", "lab06_data_parallel/train_ddp.py",
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
            weights = checkpoint_weights(torch.load(checkpoints[0], map_location="cpu", weights_only=True))[0]
        return SerialReference(weights, printed_accuracies(done.stdout), done.stdout)
    return EXERCISE.cached((*EXERCISE.file_key(serial), options, global_batch), compute)


# ---------------------------------------------------------------- reading what ran (the rest: ddp_verdicts)

def _load_module(path: Path) -> ModuleType:
    module = exercise.load_module(path, f"_ddp_check_{path.stem}")
    missing = [name for name in SERIAL_API if not hasattr(module, name)]
    if missing:
        raise ImportError(f"{path} has no {', '.join(missing)}: the checker builds the model and data with them")
    return module


# ---------------------------------------------------------------- the checks (the others: ddp_verdicts)

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
        shuffling, report.epoch_orders = check_shuffling(runs, len(train_set))
        weights, note = saved_weights(runs)
    weights_check, report.max_abs_diff = check_weights(weights, note, reference, nproc, options.batch_size,
                                                       why_weights_differ(runs, options, shuffling))
    val_shares = validation_shares(runs, len(val_set))
    if report.max_abs_diff is not None:  # the weights fit the serial model: evaluate them
        model = serial_module.make_model()
        model.load_state_dict(weights)
        model.eval()
        report.global_accuracy = model_accuracy(model, val_set)
        report.local_accuracy = {r: model_accuracy(model, val_set, idx) for r, idx in val_shares.items()}
    printed = [a for r in runs for a in printed_accuracies(r.stdout)[-1:]]
    report.printed_accuracy = printed[0] if printed else None
    report.checks = [run, weights_check, shuffling, check_checkpoint(runs),
                     check_accuracy(report.printed_accuracy, report.global_accuracy, report.local_accuracy,
                                    reference.accuracies[-1] if reference.accuracies else None, nproc,
                                    {r: len(idx) for r, idx in val_shares.items()},
                                    weights_check.verdict == PASS),
                     check_printing(runs)]
    return report


plant_mistake = EXERCISE.plant_mistake
