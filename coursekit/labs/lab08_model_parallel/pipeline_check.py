"""Check a participant's two-stage pipeline script against serial training, and say in plain words what is wrong.

``check_pipeline_script("lab08_model_parallel/train_pipeline.py")`` runs the script on 2 CPU processes (gloo,
torchrun's variables) under the FSDP checker's runner (``fsdp_runner.py``: it records each rank's training state
at the end of its first optimizer step and its ``torch.save`` calls), trains the same model on one process in
this one (``train_serially`` of the packaged solution), then judges:

- **run**: both ranks ran to their end (the first failure stops them; its own error lines are shown; a rank that
  waits for a send or receive the other never makes is stopped at the time limit, with both ranks' last lines);
- **weights**: the weights of both stages (each rank saves its own) equal serial training's. The tolerance is
  relative to how far serial training moved the weights (``REL_TOLERANCE`` of its largest move), so it does not
  depend on the learning rate. What it tells apart: stage 0's weights never moved (no gradient came back), the
  weights moved m times as far as serial (the micro-batch losses added up, not averaged);
- **memory**: each rank holds its own stage only: its weights, gradients and SGD momentum (fp32: 4 + 4 + 4
  bytes per parameter of its stage, ``sharded_memory(..., "pp")`` for the stage's parameters), and it saved no
  layer of the other stage.

``check_pipeline_scripts(paths)`` checks several scripts in one pair of processes, one after the other: torch is
imported once for all of them. The scripts must take the options of ``CheckOptions.argv`` and save each stage's
``state_dict`` (the model's own names) with ``torch.save`` into ``--out``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from coursekit.labs.kit import exercise
from coursekit.labs.kit.exercise import ScriptExercise, TableReport
from coursekit.labs.kit.script_check import FAIL, PASS, Check
from coursekit.labs.lab08_model_parallel import fsdp_check
from coursekit.labs.lab08_model_parallel.strategies import STATE_PRECISION
from coursekit.train.memory import sharded_memory

SOLUTION = fsdp_check.SCRIPTS / "lab08_model_parallel" / "train_pipeline.py"
OPTIMIZER = "sgd"  # with momentum: 4 bytes of state per parameter
FORMULA = "pp"  # pipeline parallelism: each rank holds its stage's weights, gradients and optimizer state
NPROC = 2  # the script's pipeline has two stages
REL_TOLERANCE = 1e-3  # max |w - w_serial| / (serial training's largest move of a weight)
FACTOR_RANGE = 1.5  # a move between m / 1.5 and 1.5 m times serial's: the micro-batch losses were added up
# (exactly m on the first step; the later steps start from other weights)
MEMORY_TOLERANCE = 0.10
DEFAULT_TIMEOUT_S = 120.0  # per script; a check of several scripts gets this long for each
CHECK_QUESTIONS = {
    "run": "the script runs on both ranks",
    "weights": "both stages end with the weights of serial training",
    "memory": "each rank holds only its own stage: weights + gradients + momentum = the formula",
}

# Mistakes planted in the solution (SOLUTION) for the tests: name -> (what it does, replacements)
_KEEP_STAGE = """    if rank == 0:
        model.head = None
        for i in range(FIRST_STAGE_BLOCKS, BLOCKS):
            model.blocks[i] = nn.Identity()
    else:
        model.inputs = None
        for i in range(FIRST_STAGE_BLOCKS):
            model.blocks[i] = nn.Identity()
"""
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "whole_model_on_each_rank": ("keep_stage removes nothing: each rank holds the whole model", (
        (_KEEP_STAGE, ""),)),
    "no_gradient_back": ("rank 1 sends no gradient back, rank 0 runs no backward", (
        ("            gradient = torch.empty_like(activations)\n            dist.recv(gradient, src=1)\n"
         "            activations.backward(gradient)\n", "            pass\n"),
        ("        dist.send(activations.grad, dst=0)\n", ""))),
    "losses_summed": ("the micro-batch losses are added up, not averaged", (
        ("part.to(device)) / microbatches\n", "part.to(device))\n"),)),
}


@dataclass(frozen=True)
class CheckOptions:
    """What the script is run with: a few steps of the small model (a fraction of a second on a CPU)."""

    steps: int = 3
    batch_size: int = 32
    microbatches: int = 4
    lr: float = 0.05
    seed: int = 0
    samples: int = 512

    def argv(self, out: Path) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size), "--microbatches",
                str(self.microbatches), "--lr", repr(self.lr), "--seed", str(self.seed), "--samples",
                str(self.samples), "--out", str(out)]


@dataclass(repr=False)  # repr: CheckReport's text table
class PipelineCheckReport(TableReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    nproc: int
    checks: list[Check]
    seconds: float = 0.0
    max_abs_diff: float | None = None  # max |w_pipeline - w_serial| over every weight
    relative_diff: float | None = None  # max_abs_diff / serial training's largest move
    state_bytes: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> measured bytes
    formula_bytes: dict[int, float] = field(default_factory=dict)  # rank -> its stage's state by the formula
    stage_parameters: dict[int, int] = field(default_factory=dict)  # rank -> parameters of its stage
    outputs: dict[int, str] = field(default_factory=dict)  # rank -> stdout
    questions = CHECK_QUESTIONS
    name_width = 8

    def headline(self) -> str:
        return f"pipeline check of {self.script} on {self.nproc} processes: {self.summary()}"


EXERCISE = ScriptExercise(SOLUTION, fsdp_check.RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "pipeline script",
                          "lab08_model_parallel/train_pipeline.py")


def serial_reference(options: CheckOptions) -> fsdp_check.SerialReference:
    """Serial training's weights for ``options`` (the solution's ``train_serially``, in this process), cached."""
    return fsdp_check.serial_reference(options, EXERCISE)


def stage_of(name: str) -> int:
    """The stage a weight of the model belongs to (the solution's split: input layer and first blocks, then the
    rest and the head)."""
    solution = EXERCISE.solution_module()
    if name.startswith("inputs."):
        return 0
    if name.startswith("blocks."):
        return 0 if int(name.split(".")[1]) < solution.FIRST_STAGE_BLOCKS else 1
    return 1


def _layer(name: str) -> str:
    """``blocks.2.up.weight`` -> ``blocks.2``, ``head.bias`` -> ``head``."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]


# ---------------------------------------------------------------- the checks

def _check_run(ranks: list[fsdp_check.RankRun], codes: list[int | None], timed_out: bool,
               timeout_s: float) -> Check:
    check = fsdp_check._check_run(ranks, codes, timed_out, timeout_s)
    if check.verdict == PASS or not check.detail.startswith("did not finish"):
        return check
    waiting = [r for r in ranks if r.record is None]
    lines = "\n".join(f"rank {r.rank}'s last lines:\n{EXERCISE.last_own_lines((r.stderr or '') + (r.stdout or ''))}"
                      for r in waiting)
    return Check("run", FAIL, f"did not finish within {timeout_s:.0f} s (rank {', '.join(str(r.rank) for r in waiting)} "
                              "still running): a rank waits for a dist.recv or dist.send the other rank never "
                              f"makes; every send needs its receive on the other rank, in the same order\n{lines}")


def _saved_stages(ranks: list[fsdp_check.RankRun]) -> tuple[dict[int, dict[str, torch.Tensor]], str]:
    """What each rank saved last ({rank: {name: tensor}}), or why there is nothing to compare."""
    saved = {}
    for run in ranks:
        saves = (run.record or {}).get("saves", [])
        if not saves:
            return {}, f"rank {run.rank} saved nothing: save its stage with torch.save(model.state_dict(), path)"
        path = saves[-1]["path"] + (f".rank{run.rank}" if run.rank else "")  # the runner's name of another rank's file
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001 - any unreadable file gets the same answer
            return {}, f"rank {run.rank}'s file {saves[-1]['path']} cannot be read as weights: {error}"
        if not isinstance(checkpoint, dict) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
            return {}, f"rank {run.rank} saved something else than a dict of weights (name -> tensor)"
        saved[run.rank] = checkpoint
    return saved, ""


def _displacement_ratio(weights: dict[str, torch.Tensor], reference: fsdp_check.SerialReference) -> float:
    """How far the weights moved, as a multiple of serial training's move (least squares over every weight)."""
    moved = torch.cat([(weights[k].double() - reference.initial[k].double()).flatten() for k in weights])
    serial = torch.cat([(reference.weights[k].double() - reference.initial[k].double()).flatten() for k in weights])
    return float(moved @ serial / (serial @ serial))


def _check_weights(saved: dict[int, dict[str, torch.Tensor]], problem: str, reference: fsdp_check.SerialReference,
                   microbatches: int) -> tuple[Check, float | None, float | None]:
    if problem:
        return Check("weights", FAIL, problem), None, None
    expected = reference.weights
    weights = {k: v for rank, stage in saved.items() for k, v in stage.items() if k in expected and stage_of(k) == rank}
    missing = sorted({_layer(k) for k in expected if k not in weights})
    if missing:
        owners = ", ".join(f"{layer} (rank {stage_of(k)})" for layer, k in
                           {_layer(k): k for k in expected if k not in weights}.items() if layer in missing)
        return Check("weights", FAIL, f"no rank saved the weights of {owners}: each rank saves its own stage's "
                                      "state_dict, with the model's names"), None, None
    for name, value in weights.items():
        if value.shape != expected[name].shape:
            return Check("weights", FAIL, f"{name!r} was saved with shape {list(value.shape)} where the model's is "
                                          f"{list(expected[name].shape)}"), None, None
    diff = max(fsdp_check._max_diff(weights[k], expected[k]) for k in expected)
    scale = reference.largest_move
    relative = diff / scale
    measured = (f"max |Δw| = {diff:.1e} = {relative:.1e} of serial training's largest move {scale:.1e} "
                f"(tolerance {REL_TOLERANCE:.0e})")
    if relative <= REL_TOLERANCE:
        return Check("weights", PASS, f"{measured}: both stages equal training on one process"), diff, relative
    stage0 = [k for k in expected if stage_of(k) == 0]
    unmoved0 = max(fsdp_check._max_diff(weights[k], reference.initial[k]) for k in stage0) <= REL_TOLERANCE * scale
    ratio = _displacement_ratio(weights, reference)
    if unmoved0:
        why = ("stage 0's weights never moved: no gradient reached them. Rank 1 must send the gradient of the "
               "activations it received back to rank 0 (dist.send(activations.grad, dst=0)), and rank 0 must "
               "receive it and go on with the backward (activations.backward(gradient))")
    elif microbatches > 1 and microbatches / FACTOR_RANGE <= ratio <= microbatches * FACTOR_RANGE:
        why = (f"the weights moved {ratio:.1f} times as far as on one process, about the number of micro-batches "
               f"({microbatches}): the micro-batch losses are added up, not averaged; divide each micro-batch's "
               "loss by the number of micro-batches")
    else:
        why = f"training went elsewhere than on one process (the weights moved {ratio:.2f} times as far)"
    return Check("weights", FAIL, f"{measured}: {why}"), diff, relative


def _check_memory(ranks: list[fsdp_check.RankRun], saved: dict[int, dict[str, torch.Tensor]],
                  formula: dict[int, float], stage_parameters: dict[int, int]) -> Check:
    states = {r.rank: (r.record or {}).get("state") for r in ranks}
    if any(s is None for s in states.values()):
        return Check("memory", FAIL, "no optimizer step was seen on every rank: call optimizer.step() on both")
    lines, problems = [], []
    for rank, s in states.items():
        total = s["param_bytes"] + s["grad_bytes"] + s["optimizer_bytes"]
        lines.append(f"rank {rank}: {s['param_bytes']:,} + {s['grad_bytes']:,} + {s['optimizer_bytes']:,} = "
                     f"{total:,} bytes; formula (4 + 4 + 4) × {stage_parameters[rank]:,} = {formula[rank]:,.0f}")
        foreign = sorted({_layer(k) for k in saved.get(rank, {}) if stage_of(k) != rank})
        if foreign or s["parameters"] > stage_parameters[rank]:
            held = f" ({', '.join(foreign)})" if foreign else ""
            problems.append(f"rank {rank} holds layers of the other stage too{held}: {s['parameters']:,} parameters "
                            f"where its stage has {stage_parameters[rank]:,}; remove them (keep_stage) before "
                            "building the optimizer")
        elif s["without_grad"]:
            problems.append(f"{s['without_grad']} weight tensors of rank {rank} got no gradient, so they have no "
                            "momentum either (see weights)")
        elif abs(total - formula[rank]) > MEMORY_TOLERANCE * formula[rank]:
            problems.append(f"rank {rank} holds another amount than its stage's weights, gradients and momentum")
    text = (f"fp32 SGD with momentum, ±{MEMORY_TOLERANCE:.0%}; the whole model: "
            f"{sum(stage_parameters.values()):,} parameters\n" + "\n".join(lines))
    if problems:
        return Check("memory", FAIL, "\n".join([*problems, text]))
    return Check("memory", PASS, f"each rank holds only its own stage: {text}")


# ---------------------------------------------------------------- the entry points

def check_pipeline_scripts(paths: list[str | os.PathLike], *, options: CheckOptions | None = None,
                           timeout_s: float = DEFAULT_TIMEOUT_S) -> list[PipelineCheckReport]:
    """Check each pipeline script of `paths` (see :func:`check_pipeline_script`), all in one pair of processes,
    one after the other: torch is imported once. A script that fails stops the processes: the scripts after it
    are reported as not run."""
    scripts = EXERCISE.scripts(paths)
    exercise.positive_timeout(timeout_s)
    options = options or CheckOptions()
    if options.microbatches < 1 or options.batch_size % options.microbatches:
        raise ValueError(f"options.microbatches={options.microbatches}: give a number ≥ 1 that divides "
                         f"options.batch_size={options.batch_size}")
    print(f"checking {', '.join(map(str, paths))} on {NPROC} processes; each first imports torch ...", flush=True)
    reference = serial_reference(options)
    stage_parameters = {rank: sum(v.numel() for k, v in reference.weights.items() if stage_of(k) == rank)
                        for rank in range(NPROC)}
    formula = {rank: sharded_memory(psi, FORMULA, 1, OPTIMIZER, STATE_PRECISION).total_bytes
               for rank, psi in stage_parameters.items()}
    reports = []
    with tempfile.TemporaryDirectory(prefix="pipeline-check-") as folder:
        runs, codes, timed_out, seconds = fsdp_check.run_ranks(scripts, options, NPROC, Path(folder),
                                                               timeout_s * len(scripts), fsdp=False)
        for path, ranks in zip(paths, runs, strict=True):
            report = PipelineCheckReport(str(path), NPROC, [], seconds=seconds, formula_bytes=formula,
                                         stage_parameters=stage_parameters,
                                         outputs={r.rank: r.stdout or "" for r in ranks})
            reports.append(report)
            run = _check_run(ranks, codes, timed_out, timeout_s * len(scripts))
            if run.verdict != PASS:
                report.checks = EXERCISE.not_run(run)
                continue
            report.state_bytes = {r.rank: (r.record or {}).get("state") or {} for r in ranks}
            saved, problem = _saved_stages(ranks)
            weights, report.max_abs_diff, report.relative_diff = _check_weights(saved, problem, reference,
                                                                                options.microbatches)
            report.checks = [run, weights, _check_memory(ranks, saved, formula, stage_parameters)]
    return reports


def check_pipeline_script(path: str | os.PathLike, *, options: CheckOptions | None = None,
                          timeout_s: float = DEFAULT_TIMEOUT_S) -> PipelineCheckReport:
    """Run the two-stage pipeline script `path` on 2 CPU processes (gloo) and compare it with training on one
    process; the report says what is wrong, check by check (``report.ok``: all pass)."""
    return check_pipeline_scripts([path], options=options, timeout_s=timeout_s)[0]


planted = EXERCISE.planted
