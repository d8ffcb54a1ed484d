"""Check a participant's FSDP2 script against serial training, and say in plain words what is wrong.

``check_fsdp_script("lab08_model_parallel/train_fsdp.py")`` runs the script on 2 CPU processes (gloo, torchrun's
variables) under ``fsdp_runner.py``, which records what the processes did, and trains the same model on one
process in this one (``train_serially`` of the packaged solution: no process to start), then judges:

- **run**: every rank ran to its end (the first failure stops them all; its own error lines are shown);
- **weights**: the full weights rank 0 saved equal serial training's (max |Δw| ≤ 1e-5 in fp32; training moves
  every weight tensor by far more, see ``SerialReference.moved``);
- **sharded**: each block is its own FSDP unit, then the root. Observed: the modules the script gives to
  ``fully_shard``. Sharding the root alone also splits every weight in half, but the root's forward then
  gathers the whole model at once: as much memory, for a moment, as no sharding at all;
- **memory**: each rank's weights, gradients and AdamW state (local shards, measured at the end of the first
  optimizer step) against the ZeRO-3 formula (4 + 4 + 8)Ψ/N of lab 08 (fp32).

``check_fsdp_scripts(paths)`` checks several scripts in one pair of processes, one after the other: torch
is imported once for all of them (each process spends seconds on it). The scripts must take the options of
``CheckOptions.argv`` and save the full state dict with ``torch.save`` into ``--out``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coursekit.labs.kit import exercise, script_check
from coursekit.labs.kit.exercise import ScriptExercise, TableReport
from coursekit.labs.kit.script_check import CRASH_GRACE_S, FAIL, PASS, Check, read_text
from coursekit.labs.kit.script_check import SKIP as SKIP  # the tests read it here
from coursekit.labs.kit.script_check import STOP_GRACE_S as STOP_GRACE_S  # the tests read it here
from coursekit.labs.lab08_model_parallel import fsdp_runner
from coursekit.labs.lab08_model_parallel.strategies import STATE_PRECISION, STRATEGIES
from coursekit.launch import held_ports
from coursekit.train.memory import sharded_memory

SCRIPTS = Path(__file__).resolve().parent / "scripts"  # lab08_model_parallel/: the participants' is made from it
SOLUTION = SCRIPTS / "lab08_model_parallel" / "train_fsdp.py"
RUNNER = Path(fsdp_runner.__file__)
OPTIMIZER = "adamw"
FORMULA = STRATEGIES["zero3"][1]  # FSDP2 fully_shard = ZeRO-3: weights, gradients and optimizer state sharded
WEIGHT_TOLERANCE = 1e-5
MEMORY_TOLERANCE = 0.10  # measured state per rank vs the formula (lab 08's memory_tolerance)
DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 120.0  # per script; a check of several scripts gets this long for each
CHECK_QUESTIONS = {
    "run": "the script runs on every rank",
    "weights": "rank 0 saves the full weights, equal to serial training's",
    "sharded": "each block is its own FSDP unit, then the whole model",
    "memory": "weights + gradients + optimizer state per rank = the ZeRO-3 formula",
}

# Mistakes planted in the solution (SOLUTION) for the tests: name -> (what it does, replacements)
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "no_fully_shard": ("fully_shard called nowhere: every rank trains its own whole copy", (
        ("    for block in model.blocks:\n        fully_shard(block)\n", ""),
        ("    fully_shard(model)\n", ""))),
    "root_only": ("only the whole model sharded, not each block", (
        ("    for block in model.blocks:\n        fully_shard(block)\n", ""),)),
    "optimizer_before_sharding": ("the optimizer built before fully_shard", (
        ("    ### BEGIN SOLUTION\n    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, "
         "weight_decay=WEIGHT_DECAY)\n", "    ### BEGIN SOLUTION\n"),
        ("    full_bytes = local_bytes(model.parameters())\n",
         "    full_bytes = local_bytes(model.parameters())\n"
         "    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=WEIGHT_DECAY)\n"))),
    "local_state_dict": ("rank 0 saves its own shards (to_local) instead of the full weights", (
        ("    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))\n",
         "    weights = {name: value.to_local() for name, value in model.state_dict().items()}\n"),)),
    "sharded_state_dict": ("rank 0 saves model.state_dict() as it is: sharded DTensors", (
        ("    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))\n",
         "    weights = model.state_dict()\n"),)),
}


@dataclass(frozen=True)
class CheckOptions:
    """What the script is run with: a few steps of the small model (half a second of training on a CPU)."""

    steps: int = 5
    batch_size: int = 32  # the global batch: each of the N processes computes batch_size / N samples
    lr: float = 1e-3
    seed: int = 0
    samples: int = 512

    def argv(self, out: Path) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size), "--lr", repr(self.lr),
                "--seed", str(self.seed), "--samples", str(self.samples), "--out", str(out)]


@dataclass(repr=False)  # repr: CheckReport's text table
class FSDPCheckReport(TableReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    nproc: int
    checks: list[Check]
    seconds: float = 0.0
    max_abs_diff: float | None = None  # max |w_fsdp - w_serial| over every weight
    units: list[str] = field(default_factory=list)  # the modules given to fully_shard ("": the whole model)
    state_bytes: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> measured local bytes
    formula_bytes: float | None = None  # ZeRO-3's training state per rank
    outputs: dict[int, str] = field(default_factory=dict)  # rank -> stdout
    questions = CHECK_QUESTIONS
    name_width = 8  # fixed, one wider than the widest name ("weights"), as the stored outputs show it

    def headline(self) -> str:
        return f"FSDP check of {self.script} on {self.nproc} processes: {self.summary()}"


@dataclass(frozen=True)
class SerialReference:
    weights: dict[str, torch.Tensor]
    initial: dict[str, torch.Tensor]

    @property
    def moved(self) -> float:
        """How far training moved the tensor it moved least: a weight check below it can fail."""
        return min(_max_diff(self.weights[k], self.initial[k]) for k in self.weights)

    @property
    def largest_move(self) -> float:
        """How far training moved the weight it moved most: the scale of a relative weight check."""
        return max(_max_diff(self.weights[k], self.initial[k]) for k in self.weights)


@dataclass
class RankRun:
    rank: int
    stdout: str | None  # None: this run never started on this rank
    stderr: str | None
    record: dict[str, Any] | None


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "FSDP script",
                          "lab08_model_parallel/train_fsdp.py")


# ---------------------------------------------------------------- the serial reference

def serial_reference(options: Any, of: ScriptExercise = EXERCISE) -> SerialReference:
    """Serial training's weights for ``options`` (the ``train_serially`` of the solution of exercise `of`, in this
    process: its model and data are the reference), cached."""
    def train() -> SerialReference:
        solution = of.solution_module()
        args = solution.parse_args(options.argv(Path("unused")))
        initial = solution.make_model(options.seed).state_dict()
        trained = solution.train_serially(args).state_dict()
        return SerialReference({k: v.detach().clone() for k, v in trained.items()}, initial)
    return of.cached((options,), train)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


# ---------------------------------------------------------------- running the ranks

def _split_runs(text: str, runs: int) -> list[str | None]:
    """One process's output, cut at the runner's marks into its runs' parts (None: the run never started)."""
    parts: list[str | None] = [None] * runs
    marks = {fsdp_runner.RUN_MARK.format(i): i for i in range(runs)}
    index = None
    for line in text.splitlines(keepends=True):
        if line.strip() in marks:
            index = marks[line.strip()]
            parts[index] = ""
        elif index is not None:
            parts[index] += line
    return parts


def run_ranks(scripts: list[Path], options: CheckOptions, nproc: int, workdir: Path, timeout_s: float,
              fsdp: bool = True) -> tuple[list[list[RankRun]], list[int | None], bool, float]:
    """Run the scripts one after the other in `nproc` rank processes; per script its ranks' runs, the exit
    code of each rank, whether time ran out, and the seconds it took. ``fsdp`` false: the runner records no
    FSDP units (scripts without FSDP: the ranks start faster)."""
    records = workdir / "records"
    records.mkdir(parents=True, exist_ok=True)
    with held_ports(len(scripts)) as ports:  # held until the last run ends: no other process takes one
        plan = {"records": str(records), "runs": [
            {"script": str(script), "args": options.argv(workdir / f"out{i}"), "port": port}
            for i, (script, port) in enumerate(zip(scripts, ports, strict=True))], "fsdp": fsdp}
        (workdir / "plan.json").write_text(json.dumps(plan))
        processes = script_check.start_ranks([sys.executable, "-u", str(RUNNER), str(workdir / "plan.json")],
                                             nproc, workdir, lambda rank: script_check.rank_env(rank, nproc))
        start = time.monotonic()
        timed_out = script_check.watch(processes, timeout_s, crash_grace_s=CRASH_GRACE_S)
        seconds = time.monotonic() - start
    outs = [_split_runs(read_text(script_check.rank_output(workdir, r, "out")), len(scripts)) for r in range(nproc)]
    errs = [_split_runs(read_text(script_check.rank_output(workdir, r, "err")), len(scripts)) for r in range(nproc)]
    runs = []
    for index in range(len(scripts)):
        ranks = []
        for rank in range(nproc):
            path = fsdp_runner.record_path(records, index, rank)
            record = json.loads(path.read_text()) if path.is_file() else None
            ranks.append(RankRun(rank, outs[rank][index], errs[rank][index], record))
        runs.append(ranks)
    return runs, [p.returncode for p in processes], timed_out, seconds


# ---------------------------------------------------------------- the checks

def _check_run(ranks: list[RankRun], codes: list[int | None], timed_out: bool, timeout_s: float) -> Check:
    if all(r.record is not None and r.record.get("ended") for r in ranks):
        return Check("run", PASS, f"{len(ranks)} ranks ran to their end")
    failed = [r for r in ranks if r.record is not None and not r.record.get("ended")]
    if failed:
        return Check("run", FAIL, f"rank {failed[0].rank} failed; its last lines:\n{EXERCISE.last_own_lines(failed[0].stderr)}")
    if all(r.stdout is None for r in ranks):
        return Check("run", FAIL, "not run: the script before it stopped the processes")
    if timed_out:
        waiting = [str(r.rank) for r in ranks if r.record is None]
        return Check("run", FAIL, f"did not finish within {timeout_s:.0f} s (rank {', '.join(waiting)} still "
                                  "running): a rank waits in a collective the others never call, or for a "
                                  "process group that never forms")
    ended = ", ".join(f"rank {r.rank} with exit code {codes[r.rank]}" for r in ranks if r.record is None)
    return Check("run", FAIL, f"stopped without a Python error ({ended}); the last lines:\n"
                              f"{EXERCISE.last_own_lines(''.join(r.stderr or '' for r in ranks))}")


def _saved_weights(ranks: list[RankRun], out: Path) -> tuple[dict[str, torch.Tensor] | None, str]:
    """Rank 0's checkpoint, or why there is none to compare."""
    saves = (ranks[0].record or {}).get("saves", [])
    if not saves:
        return None, f"rank 0 saved nothing: save the full weights with torch.save(weights, {out.name}/...)"
    if saves[-1]["dtensors"]:
        return None, (f"rank 0 saved {saves[-1]['dtensors']} sharded tensors (DTensors: each holds one rank's "
                      "half): gather the full weights first with get_model_state_dict(model, "
                      "options=StateDictOptions(full_state_dict=True, cpu_offload=True)) on every rank")
    try:
        checkpoint = torch.load(saves[-1]["path"], map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same answer
        return None, f"rank 0's file {saves[-1]['path']} cannot be read as weights: {error}"
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        checkpoint = checkpoint["model"]
    if not isinstance(checkpoint, dict) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return None, "rank 0 saved something else than a dict of weights (model name -> tensor)"
    return checkpoint, ""


def _check_weights(weights: dict[str, torch.Tensor] | None, problem: str, reference: SerialReference,
                   state: dict[str, Any] | None, units: list[str]) -> tuple[Check, float | None]:
    if weights is None:
        return Check("weights", FAIL, problem), None
    expected = reference.weights
    if set(weights) != set(expected):
        missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        return Check("weights", FAIL, f"the saved names differ from the model's: missing {missing[:3]}, "
                                      f"unexpected {extra[:3]}"), None
    for name, value in weights.items():
        if value.shape != expected[name].shape:
            return Check("weights", FAIL, f"{name!r} was saved with shape {list(value.shape)} where the model's "
                                          f"is {list(expected[name].shape)}: that is rank 0's shard, not the "
                                          "full weight; gather with get_model_state_dict(model, options="
                                          "StateDictOptions(full_state_dict=True, cpu_offload=True))"), None
    diff = max(_max_diff(weights[k], expected[k]) for k in expected)
    measured = f"max |Δw| = {diff:.1e} (tolerance {WEIGHT_TOLERANCE:.0e}; training moves each tensor ≥ " \
               f"{reference.moved:.1e})"
    if diff <= WEIGHT_TOLERANCE:
        return Check("weights", PASS, f"{measured} against training on one process"), diff
    unmoved = max(_max_diff(weights[k], reference.initial[k]) for k in expected) <= WEIGHT_TOLERANCE
    if unmoved and state is not None and (state["outside_model"] or state["without_grad"]):
        why = ("the weights did not move: the optimizer updates parameters the model no longer has "
               "(fully_shard replaces them by sharded ones); build the optimizer after sharding")
    elif unmoved:
        why = "the weights did not move: no optimizer step reached them"
    elif not units:
        why = ("without fully_shard nothing averages the gradients: each rank learns from its own half of "
               "every batch, and rank 0 saved its own model")
    else:
        why = "training went elsewhere than on one process"
    return Check("weights", FAIL, f"{measured}: {why}"), diff


def _check_sharded(units: list[str], blocks: list[str], full_bytes: int | None) -> Check:
    whole = f" ({full_bytes:,} bytes of weights)" if full_bytes else ""
    if not units:
        return Check("sharded", FAIL, f"fully_shard was never called: every rank holds the whole model{whole}")
    missing = [b for b in blocks if b not in units]
    if missing == blocks and "" in units:
        return Check("sharded", FAIL, "only the whole model is an FSDP unit: every weight is split, but its "
                                      f"forward gathers them all at once{whole}, as much as no sharding; call "
                                      "fully_shard(block) for each block first")
    if missing:
        return Check("sharded", FAIL, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not FSDP "
                                      "units of their own: call fully_shard on every block")
    if "" not in units:
        return Check("sharded", FAIL, "the whole model is no FSDP unit: the layers outside the blocks (input "
                                      "layer, head) stay whole on every rank; call fully_shard(model) last")
    others = [u or "the whole model" for u in units if u not in blocks and u != ""]
    extra = f" (also: {', '.join(others)})" if others else ""
    return Check("sharded", PASS, f"{len(blocks)} blocks, then the whole model{extra}: one block's weights "
                                  "are gathered at a time")


def _check_memory(ranks: list[RankRun], formula: float, nproc: int) -> Check:
    states = {r.rank: (r.record or {}).get("state") for r in ranks}
    if any(s is None for s in states.values()):
        return Check("memory", FAIL, "no optimizer step was seen on every rank: call optimizer.step()")
    lines, ok = [], True
    for rank, s in states.items():
        total = s["param_bytes"] + s["grad_bytes"] + s["optimizer_bytes"]
        ok &= abs(total - formula) <= MEMORY_TOLERANCE * formula
        lines.append(f"rank {rank}: {s['param_bytes']:,} + {s['grad_bytes']:,} + {s['optimizer_bytes']:,} = "
                     f"{total:,} bytes")
    psi = states[0]["parameters"]
    text = (f"weights + gradients + AdamW state; formula (4 + 4 + 8) × {psi:,} / {nproc} = {formula:,.0f} "
            f"(±{MEMORY_TOLERANCE:.0%})\n" + "\n".join(lines))
    if ok:
        return Check("memory", PASS, text)
    first = states[0]
    if first["without_grad"] or first["outside_model"]:
        hint = ("the optimizer's parameters get no gradients and it keeps no state: they are not the model's "
                "any more (fully_shard replaced them); build the optimizer after sharding")
    elif first["param_bytes"] >= 4 * psi:
        hint = "each rank holds all of it: nothing is sharded"
    else:
        hint = "not what ZeRO-3 keeps per rank"
    return Check("memory", FAIL, f"{hint}\n{text}")


# ---------------------------------------------------------------- the entry points

def check_fsdp_scripts(paths: list[str | os.PathLike], nproc: int = DEFAULT_NPROC, *,
                       options: CheckOptions | None = None,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> list[FSDPCheckReport]:
    """Check each FSDP script of `paths` (see :func:`check_fsdp_script`), all in one set of `nproc` processes,
    one after the other: torch is imported once. A script that fails stops the processes: the scripts after
    it are reported as not run."""
    scripts = EXERCISE.scripts(paths)
    exercise.processes(nproc)
    exercise.positive_timeout(timeout_s)
    options = options or CheckOptions()
    if options.batch_size % nproc:
        raise ValueError(f"options.batch_size={options.batch_size} does not split over nproc={nproc} processes")
    print(f"checking {', '.join(map(str, paths))} on {nproc} processes; each first imports torch ...", flush=True)
    reference = serial_reference(options)
    solution = EXERCISE.solution_module()
    blocks = [f"blocks.{i}" for i in range(solution.BLOCKS)]
    psi = sum(v.numel() for v in reference.weights.values())
    formula = sharded_memory(psi, FORMULA, nproc, OPTIMIZER, STATE_PRECISION).total_bytes
    reports = []
    with tempfile.TemporaryDirectory(prefix="fsdp-check-") as folder:
        workdir = Path(folder)
        runs, codes, timed_out, seconds = run_ranks(scripts, options, nproc, workdir, timeout_s * len(scripts))
        for index, (path, ranks) in enumerate(zip(paths, runs, strict=True)):
            report = FSDPCheckReport(str(path), nproc, [], seconds=seconds, formula_bytes=formula,
                                     outputs={r.rank: r.stdout or "" for r in ranks})
            reports.append(report)
            run = _check_run(ranks, codes, timed_out, timeout_s * len(scripts))
            if run.verdict != PASS:
                report.checks = EXERCISE.not_run(run)
                continue
            record = ranks[0].record or {}
            report.units = list(record.get("units", []))
            report.state_bytes = {r.rank: (r.record or {}).get("state") or {} for r in ranks}
            weights, problem = _saved_weights(ranks, workdir / f"out{index}")
            weights_check, report.max_abs_diff = _check_weights(weights, problem, reference, record.get("state"),
                                                                report.units)
            report.checks = [run, weights_check, _check_sharded(report.units, blocks, psi * 4),
                             _check_memory(ranks, formula, nproc)]
    return reports


def check_fsdp_script(path: str | os.PathLike, nproc: int = DEFAULT_NPROC, *, options: CheckOptions | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> FSDPCheckReport:
    """Run the FSDP script `path` on `nproc` CPU processes (gloo) and compare it with training on one process;
    the report says what is wrong, check by check (``report.ok``: all pass)."""
    return check_fsdp_scripts([path], nproc, options=options, timeout_s=timeout_s)[0]


planted = EXERCISE.planted
