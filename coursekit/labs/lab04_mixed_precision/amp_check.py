"""Check a participant's mixed-precision script against the fp32 script it came from, in plain words.

``check_amp_script("lab04_mixed_precision/train_amp.py")`` runs the script (float16 by default) with the loss of one
step made infinite on purpose (``--poison-step``), and ``train_fp32.py`` (found next to it) as the
reference, then judges:

- **run**: the script runs to its end;
- **autocast**: the layers computed in the low precision under ``torch.autocast``, from float32 weights;
- **scaler**: a ``GradScaler`` scaled the loss, and its scale halved at the overflowed step;
- **skipped**: the optimizer skipped the overflowed step (the weights stay finite);
- **master_weights**: the weights the optimizer updates, and the checkpoint, are float32;
- **speed**: the time per step against float32; judged on a GPU only (a CPU has no tensor cores).

The script must take the reference's options (``--steps --batch-size --width --lr --seed --device --dtype
--poison-step --out``) and save ``{"model": state_dict}`` (or a bare state_dict) with ``torch.save``.
What it did is recorded from inside (``amp_runner.py``). On a CPU one server process
(``kit/script_server.py``) imports torch once and forks a child per run, so a check takes seconds; on a GPU
each run is a process of its own (a forked child cannot use CUDA once its parent started it), and the two
runs take turns so that their times are fair. The reference runs once per set of options and is cached.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from coursekit.labs.kit import exercise
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, Check, CheckReport, tail
from coursekit.labs.kit.script_check import STOP_GRACE_S as STOP_GRACE_S  # the tests read it here
from coursekit.labs.kit.script_server import RunnerRun
from coursekit.labs.lab04_mixed_precision import SCRIPTS

REFERENCE_NAME = "train_fp32.py"
SOLUTION = SCRIPTS / "train_amp.py"  # participants get it as lab04_mixed_precision/train_amp.py, stripped
RUNNER = Path(__file__).with_name("amp_runner.py")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
DEFAULT_TIMEOUT_S = 120.0
TIMING_WARMUP = 2  # step intervals left out of the time per step (first calls pick kernels, allocate)
MIN_SPEEDUP = 1.3  # on a GPU, float16/bfloat16 matrix products on tensor cores beat float32 by far more
BACKOFF = 0.5  # GradScaler's default backoff_factor: the scale halves after an overflow
CHECK_QUESTIONS = {
    "run": "the script runs to its end",
    "autocast": "the layers compute in low precision under autocast",
    "scaler": "a GradScaler scales the loss; its scale drops after an overflow",
    "skipped": "the step whose gradient overflowed is skipped",
    "master_weights": "the weights the optimizer updates stay float32",
    "speed": "a step is faster than in float32",
}
# the end of an error, and what it means in the participant's script
ERROR_HINTS = {
    "No inf checks were recorded prior to update": (
        "scaler.update() found no step taken by the scaler: call scaler.step(optimizer) instead of "
        "optimizer.step() (the scaler unscales the gradients and skips the step if one is inf or NaN)"),
    "Attempting to unscale FP16 gradients": (
        "the gradients are float16 because the weights are (model.half() or .to(float16)?): keep the model "
        "in float32; autocast casts the weights to float16 inside each operation"),
}


@dataclass(frozen=True)
class CheckOptions:
    """What both scripts run with: a few steps of a small model, one step's loss made infinite."""

    steps: int = 6
    batch_size: int = 32
    width: int = 64
    lr: float = 0.05
    seed: int = 0
    poison_step: int = 3

    def argv(self, device: str, dtype: str, out: Path, poison: bool) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size), "--width", str(self.width),
                "--lr", repr(self.lr), "--seed", str(self.seed), "--device", device, "--dtype", dtype,
                "--poison-step", str(self.poison_step if poison else 0), "--out", str(out)]


# on a GPU the model must be large enough for tensor cores to matter, and the run long enough to time
GPU_OPTIONS = CheckOptions(steps=30, batch_size=2048, width=4096)


@dataclass(repr=False)  # repr: CheckReport's text table
class AMPCheckReport(CheckReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    dtype: str
    device: str
    checks: list[Check]
    seconds: float = 0.0
    scales: list[tuple[int, float]] = field(default_factory=list)  # (step, scale after it)
    applied_steps: list[int] = field(default_factory=list)  # the steps the optimizer took
    step_ms: float | None = None
    reference_step_ms: float | None = None
    losses: list[float] = field(default_factory=list)
    reference_losses: list[float] = field(default_factory=list)
    output: str = ""
    questions = CHECK_QUESTIONS

    @property
    def speedup(self) -> float | None:
        return self.reference_step_ms / self.step_ms if self.step_ms and self.reference_step_ms else None

    @property
    def ok(self) -> bool:  # skipped checks do not count against the script, but it must have run
        return not self.failed and self["run"].verdict == PASS

    def headline(self) -> str:
        return f"mixed-precision check of {self.script} ({self.dtype}, {self.device}): {self.summary()}"


@dataclass
class ScriptRun(RunnerRun):
    """A run under amp_runner.py, and the checkpoint the script saved."""

    checkpoint: Any = None  # what the script saved with torch.save (None: nothing, or unreadable)
    checkpoint_note: str = ""


# Mistakes planted in the solution (SOLUTION) for the tests and the notebook:
# name -> (what it does, the (old, new) replacements that make it)
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "no_autocast": ("the forward pass and the loss outside torch.autocast", ((
        "        with torch.autocast(device.type, dtype=dtype):\n"
        "            logits = model(features[batch])\n"
        "            loss = nn.functional.cross_entropy(logits, labels[batch])\n",
        "        logits = model(features[batch])\n"
        "        loss = nn.functional.cross_entropy(logits, labels[batch])\n"),)),
    "no_scaler": ("backward on the unscaled loss, and a plain optimizer step", ((
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n",
        "        loss.backward()\n        optimizer.step()\n"),)),
    "optimizer_step": ("optimizer.step() instead of scaler.step(optimizer)", (
        ("        scaler.step(optimizer)\n", "        optimizer.step()\n"),)),
    "unscale_then_optimizer_step": ("the gradients unscaled by hand, then optimizer.step()", (
        ("        scaler.step(optimizer)\n", "        scaler.unscale_(optimizer)\n        optimizer.step()\n"),)),
    "model_half": ("the model converted to float16 (model.half())", (
        ("    model = make_model(args.width).to(device)\n", "    model = make_model(args.width).to(device, DTYPES[args.dtype])\n"),)),
}


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "mixed-precision script",
                          "lab04_mixed_precision/train_amp.py", REFERENCE_NAME, "float32",
                          made_from="your mixed-precision version", server_prefix="amp-check-server-")


# ---------------------------------------------------------------- running: one server, a child per run

def run_script(script: Path, args: list[str], workdir: Path, timeout_s: float, fork: bool = True) -> ScriptRun:
    """Run `script` with `args` in `workdir` under amp_runner.py (see :func:`script_server.run_script`), and
    load the checkpoint it saved in ``workdir/out``."""
    run = EXERCISE.run(script, args, workdir, timeout_s, fork)
    checkpoint, note = _load_checkpoint(workdir / "out")
    return ScriptRun(**vars(run), checkpoint=checkpoint, checkpoint_note=note)


def _load_checkpoint(folder: Path) -> tuple[Any, str]:
    files = sorted(folder.rglob("*.pt")) + sorted(folder.rglob("*.pth"))
    if not files:
        return None, f"no checkpoint (*.pt) was saved in --out ({folder.name}/)"
    try:
        return torch.load(files[0], map_location="cpu", weights_only=True), ""
    except Exception as error:  # noqa: BLE001 - any unreadable file is reported as such
        return None, f"cannot load {files[0].name}: {error}"


def _losses(stdout: str) -> list[float]:
    losses = []
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "step" and words[2] == "loss":
            with contextlib.suppress(ValueError):
                losses.append(float(words[3]))
    return losses


def _step_ms(record: dict[str, Any] | None) -> float | None:
    """Median time between two backward passes (one whole step), after the warm-up steps."""
    times = (record or {}).get("backward_times", [])
    intervals = [b - a for a, b in zip(times, times[1:], strict=False)][TIMING_WARMUP:]
    return 1000 * statistics.median(intervals) if intervals else None


def reference_run(reference: Path, options: CheckOptions, device: str, timeout_s: float) -> ScriptRun:
    """The fp32 script's run (no poisoned step); once per session, script version, options and device."""
    def fp32() -> ScriptRun:
        with tempfile.TemporaryDirectory(prefix="amp-check-fp32-") as folder:
            run = run_script(reference, options.argv(device, "float16", Path(folder) / "out", poison=False),
                             Path(folder), timeout_s, fork=device == "cpu")
        if run.returncode != 0:
            why = f"did not finish within {timeout_s:.0f} s" if run.timed_out else (
                f"failed (exit code {run.returncode}): {tail(EXERCISE.without_runner(run.stderr))}")
            raise RuntimeError(f"the float32 reference {reference} {why}")
        return run
    return EXERCISE.cached((*EXERCISE.file_key(reference), options, device), fp32)


# ---------------------------------------------------------------- the checks

def _check_run(run: ScriptRun, timeout_s: float, steps: int) -> Check:
    return (EXERCISE.run_failure(run, timeout_s, "a loop that never ends? waiting for input?", ERROR_HINTS)
            or Check("run", PASS, f"{run.record['backwards']} of {steps} steps ran a backward pass, in "
                                  f"{run.seconds:.1f} s"))


def _check_autocast(record: dict[str, Any], dtype: str) -> Check:
    layers = record["layers"]
    if not layers:
        return Check("autocast", FAIL, "no layer with weights ran a forward pass (the checker watches torch.nn "
                                       "layers such as nn.Linear)")
    wanted = str(DTYPES[dtype])
    names = sorted({entry[0] for entry in layers})
    weights = sorted({entry[4].removeprefix("torch.") for entry in layers})
    off = [entry for entry in layers if not entry[1]]
    other = sorted({entry[2].removeprefix("torch.") for entry in layers if entry[1] and entry[2] != wanted})
    if off and all(entry[3] == wanted for entry in off):
        return Check("autocast", FAIL, f"the layers computed in {dtype} only because their weights are {dtype} "
                                       "(model.half()?): autocast was off. Keep the weights float32 and run the "
                                       "forward pass under torch.autocast(device.type, dtype=dtype)")
    if off:
        some = "the layers" if len(off) == len(layers) else f"some layers ({', '.join(sorted({e[0] for e in off}))})"
        return Check("autocast", FAIL, f"{some} computed in {', '.join(sorted({e[3].removeprefix('torch.') for e in off}))}"
                                       f": autocast was off during the forward pass. Run the forward pass and the "
                                       f"loss under torch.autocast(device.type, dtype=dtype), on the device the "
                                       f"model runs on ({off[0][5]})")
    if other:
        return Check("autocast", FAIL, f"autocast computed in {', '.join(other)}, but the run asked --dtype {dtype}: "
                                       "pass dtype=dtype (from --dtype) to torch.autocast")
    return Check("autocast", PASS, f"{', '.join(names)} layers computed in {dtype} under autocast; their weights "
                                   f"are {', '.join(weights)}")


def _check_scaler(record: dict[str, Any], dtype: str, poison_step: int) -> tuple[Check, list[tuple[int, float]]]:
    scalers, updates = record["scalers"], [(int(s), float(v)) for s, v in record["updates"]]
    enabled = [s for s in scalers if s["enabled"]]
    if dtype == "bfloat16":
        note = " (an enabled one does no harm)" if enabled else ""
        return Check("scaler", PASS, f"bfloat16 has the range of float32: no scaler needed{note}"), updates
    if not scalers:
        return Check("scaler", FAIL, "no torch.amp.GradScaler was created: float16 gradients below 3e-8 (2^-25) become 0 "
                                     "(underflow) and an overflow goes unnoticed. Create scaler = "
                                     "torch.amp.GradScaler(device.type)"), updates
    if not enabled:
        return Check("scaler", FAIL, "the GradScaler is disabled (enabled=False), but the run computes in float16: "
                                     "enable it for float16"), updates
    if record["scale_calls"] == 0:
        return Check("scaler", FAIL, "the loss was never scaled: call scaler.scale(loss).backward() instead of "
                                     "loss.backward(), so that small gradients survive in float16"), updates
    if not updates:
        return Check("scaler", FAIL, "scaler.update() was never called: the scale never moves. Call it once per "
                                     "step, after scaler.step(optimizer)"), updates
    scale_at = dict(updates)
    if poison_step not in scale_at:
        return Check("scaler", FAIL, f"scaler.update() was not called at step {poison_step} (its loss was made "
                                     "infinite): call it every step, after scaler.step(optimizer)"), updates
    before = scale_at.get(poison_step - 1, enabled[0]["init_scale"])
    after = scale_at[poison_step]
    shown = ", ".join(f"{scale:g}" for _, scale in updates)
    if after == before * BACKOFF:
        return Check("scaler", PASS, f"the scale went {before:g} → {after:g} at step {poison_step}, whose loss was "
                                     f"made infinite (scale after each step: {shown})"), updates
    return Check("scaler", FAIL, f"the scale stayed {after:g} at step {poison_step} (was {before:g}), although its "
                                 f"loss was made infinite (scale after each step: {shown}): the scaler must see "
                                 "the gradients: scaler.scale(loss).backward(), scaler.step(optimizer), "
                                 "scaler.update()"), updates


def _check_skipped(run: ScriptRun, dtype: str, poison_step: int, steps: int) -> Check:
    if dtype == "bfloat16":
        return Check("skipped", SKIP, "bfloat16 needs no scaler: no step was made to overflow")
    applied, finite = run.record["applied"], run.record["finite_after"]
    if not applied:
        return Check("skipped", FAIL, "the optimizer never took a step: call scaler.step(optimizer) every step")
    if poison_step in applied:
        broken = not finite[applied.index(poison_step)]
        what = "the weights became inf or NaN, and training is lost" if broken else "the weights moved"
        return Check("skipped", FAIL, f"step {poison_step}'s gradient was infinite, and the optimizer applied it: "
                                      f"{what}. scaler.step(optimizer) checks the gradients and skips such a step; "
                                      "optimizer.step() does not")
    if not all(finite):
        return Check("skipped", FAIL, "the weights became inf or NaN at a step the optimizer took")
    return Check("skipped", PASS, f"step {poison_step} (infinite gradient) was skipped; the optimizer took "
                                  f"{len(applied)} of {steps} steps and the weights stayed finite")


def _weights(checkpoint: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        checkpoint = checkpoint["model"]
    if isinstance(checkpoint, dict) and checkpoint and all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        return {k: v for k, v in checkpoint.items() if v.is_floating_point()}
    return None


def _check_master_weights(run: ScriptRun) -> Check:
    weights = _weights(run.checkpoint)
    seen = sorted({entry[4].removeprefix("torch.") for entry in (run.record or {}).get("layers", [])})
    if weights is None:
        if seen and seen != ["float32"]:
            return _low_precision_weights(", ".join(seen), "the layers' weights were")
        note = run.checkpoint_note or "the checkpoint holds no state_dict"
        return Check("master_weights", FAIL, f"{note}: save {{'model': model.state_dict()}} with torch.save in --out")
    dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in weights.values()})
    if dtypes != ["float32"]:
        return _low_precision_weights(", ".join(dtypes), "the saved weights are")
    return Check("master_weights", PASS, f"the {len(weights)} saved weight tensors are float32: the optimizer updated "
                                        "float32 weights")


def _low_precision_weights(dtypes: str, what: str) -> Check:
    return Check("master_weights", FAIL, f"{what} {dtypes}: the model was converted (model.half() or "
                                         ".to(float16)?). An update smaller than half a unit of a float16 weight's "
                                         "last digit is lost when added to it. Keep the model float32: autocast "
                                         "casts a low-precision copy inside each operation")


def _check_speed(report: AMPCheckReport, autocast_ok: bool) -> Check:
    ms, reference_ms, speedup = report.step_ms, report.reference_step_ms, report.speedup
    if speedup is None:
        return Check("speed", SKIP, "too few steps to time")
    measured = (f"float32 {reference_ms:.2f} ms, {report.dtype} {ms:.2f} ms per step (median after "
                f"{TIMING_WARMUP + 1} steps): ×{speedup:.2f}")
    if report.device != "cuda":
        return Check("speed", SKIP, f"{measured}; not judged on a CPU: it has no tensor cores, and {report.dtype} "
                                    "often runs slower there")
    if speedup >= MIN_SPEEDUP:
        return Check("speed", PASS, measured)
    why = "" if autocast_ok else " (autocast is not on: see above)"
    return Check("speed", FAIL, f"{measured}, less than ×{MIN_SPEEDUP}{why}")


# ---------------------------------------------------------------- the entry point

def check_amp_script(path: str | os.PathLike, reference: str | os.PathLike | None = None, *,
                     dtype: str = "float16", device: str = "auto", options: CheckOptions | None = None,
                     timeout_s: float = DEFAULT_TIMEOUT_S) -> AMPCheckReport:
    """Run the mixed-precision script `path` (one step's loss made infinite) and the fp32 script (default:
    train_fp32.py next to `path`); the report says what is wrong, check by check."""
    script = EXERCISE.script(path)
    reference_path = EXERCISE.reference(script, reference)
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: use one of {', '.join(DTYPES)}")
    exercise.known_device(device)
    device = exercise.resolve_device(device, torch.cuda.is_available(), "in this kernel")
    exercise.positive_timeout(timeout_s)
    options = options or (GPU_OPTIONS if device == "cuda" else CheckOptions())
    if not 1 <= options.poison_step <= options.steps - 1:
        raise ValueError(f"options.poison_step={options.poison_step}: choose a step from 1 to steps - 1 "
                         f"({options.steps - 1}), so that a step follows it")
    poison = dtype == "float16"
    print(f"checking {path}: {script.name} in {dtype} beside {reference_path.name} in float32, {options.steps} "
          f"steps each on the {device.upper() if device == 'cpu' else 'GPU'}"
          + (f"; the loss of step {options.poison_step} is made infinite on purpose" if poison else "") + " ...",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="amp-check-") as folder:
        # on a CPU the reference runs beside the script; on a GPU after it, so that neither slows the other
        run, fp32 = exercise.beside(
            lambda: run_script(script, options.argv(device, dtype, Path(folder) / "out", poison), Path(folder),
                               timeout_s, fork=device == "cpu"),
            lambda: reference_run(reference_path, options, device, timeout_s), together=device == "cpu")
    report = AMPCheckReport(str(path), dtype, device, [], seconds=run.seconds, output=run.stdout,
                            step_ms=_step_ms(run.record), reference_step_ms=_step_ms(fp32.record),
                            losses=_losses(run.stdout), reference_losses=_losses(fp32.stdout))
    checked = replace(options, poison_step=options.poison_step if poison else 0)
    run_check = _check_run(run, timeout_s, options.steps)
    if run_check.verdict != PASS:
        # float16 weights are often why it failed (GradScaler refuses to unscale float16 gradients): say so
        seen = sorted({e[4].removeprefix("torch.") for e in (run.record or {}).get("layers", [])})
        master = _low_precision_weights(", ".join(seen), "the layers' weights were") if seen not in ([], ["float32"]) else None
        report.checks = EXERCISE.not_run(run_check, instead={"master_weights": master} if master else None)
        return report
    autocast = _check_autocast(run.record, dtype)
    scaler, report.scales = _check_scaler(run.record, dtype, checked.poison_step)
    report.applied_steps = list(run.record["applied"])
    report.checks = [run_check, autocast, scaler, _check_skipped(run, dtype, checked.poison_step, options.steps),
                     _check_master_weights(run)]
    report.checks.append(_check_speed(report, autocast.verdict == PASS))
    return report


plant_mistake = EXERCISE.plant_mistake
