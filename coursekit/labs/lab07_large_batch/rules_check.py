"""Check a participant's large-batch rules (``lab07_large_batch/my_rules.py``) against the training engine, in plain words.

``check_large_batch_rules("lab07_large_batch/my_rules.py")`` runs the file in its own process (``rules_runner.py``:
a crash or a hang stays there; a time limit; the file's own error lines shown) and compares, part by part:

- **scaling**: ``scaled_lr(base_lr, base_batch, batch)`` against the linear rule on a few cases
  (``coursekit.train.optim.scaled_lr`` with ``lr_scaling="linear"``); a square-root or inverted rule is named;
- **warmup**: ``warmup_then_decay(step, warmup_steps, total_steps)`` at every step against the engine's
  ``lr_factor(..., schedule="linear")`` with its start factor for an LR set directly (1 / warmup_steps), as in
  lab 07's runs; off by one, never reaching 1 and no decay are named;
- **scheduler**: the learning rates ``warmup_scheduler`` (a ``LambdaLR``) gives an optimizer step by step,
  against the engine's ``build_scheduler``;
- **lars**: 3 steps of the file's ``LARS`` on a small fixed float64 model with fixed gradients against
  ``coursekit.train.optim.lars.LARS`` (weights equal within 1e-6), and each layer's local LR (trust ratio) read
  from the first step, shown in a table; the layer that differs most is named with the likely cause.

The engine's answers are computed here, beside the file's process (both start by importing torch: this module
imports it only then), once per session. The solution ships as ``scripts/lab07_large_batch/my_rules.py`` (``SOLUTION``); participants get it as ``lab07_large_batch/my_rules.py``, stripped.
The questions and the report (``RulesCheckReport``) live in ``rules_report.py``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from coursekit.labs.kit import exercise, script_check
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, STOP_GRACE_S, Check
from coursekit.labs.lab07_large_batch import rules_runner as runner
from coursekit.labs.lab07_large_batch.rules_report import CHECK_QUESTIONS, RulesCheckReport, _fmt
from coursekit.labs.lab07_large_batch.settings import scaled_lr as lab_scaled_lr

SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab07_large_batch"  # the participants' lab07_large_batch/ is made from it
SOLUTION = SCRIPTS / "my_rules.py"
RUNNER = Path(runner.__file__)
LR_TOLERANCE = 1e-9  # relative, for learning rates and factors (float64 arithmetic on both sides)
WEIGHT_TOLERANCE = 1e-6  # max |Δw| after the LARS steps, in float64
RATIO_TOLERANCE = 1e-6  # relative, for a layer's local LR
DEFAULT_TIMEOUT_S = 60.0
POLL_S = 0.05
TAIL_LINES = 8
NOT_WRITTEN = "NotImplementedError"

# Mistakes planted in the solution (SOLUTION) for the tests: name -> (what it does, (old, new) pairs)
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "sqrt_scaling": ("the square-root rule instead of the linear one", (
        ("return base_lr * batch / base_batch", "return base_lr * math.sqrt(batch / base_batch)"),
        ("from collections.abc import", "import math\nfrom collections.abc import"))),
    "warmup_off_by_one": ("the warm-up one step ahead: it reaches 1 one step early", (
        ("(1 - start) * step / warmup_steps", "(1 - start) * (step + 1) / warmup_steps"),)),
    "warmup_from_zero": ("the warm-up starts at 0 (the first step does nothing)", (
        ("return start + (1 - start) * step / warmup_steps", "return step / warmup_steps"),)),
    "decay_from_step_zero": ("the decay counted from step 0: after warm-up the factor never reaches 1", (
        ("return 1 - (step - warmup_steps) / (total_steps - warmup_steps)", "return 1 - step / total_steps"),)),
    "no_decay": ("no decay: the factor stays 1 after warm-up", (
        ("return 1 - (step - warmup_steps) / (total_steps - warmup_steps)", "return 1.0"),)),
    "scheduler_one_step_ahead": ("the scheduler asks for the factor of the next step", (
        ("lambda step: warmup_then_decay(step, ", "lambda step: warmup_then_decay(step + 1, "),)),
    "ratio_without_weight_decay": ("the trust ratio without weight_decay * ||w|| in its denominator", (
        ("eta * w_norm / (g_norm + decay * w_norm)", "eta * w_norm / g_norm"),)),
    "ratio_on_every_layer": ("the trust ratio also on biases and batch-norm parameters", (
        ('if group["layer_adaptation"]:', "if True:"),)),
    "ratio_without_norm_guard": ("no local LR of 1 where ||w|| is 0: such a layer never moves", (
        ("if w_norm > 0 and g_norm > 0:", "if True:"),)),
}


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "rules", "lab07_large_batch/my_rules.py",
                          noun="file")


def _close(a: float, b: float, rel: float = LR_TOLERANCE) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)


# ---------------------------------------------------------------- running the file

def _env() -> dict[str, str]:
    """This environment on the CPU with one thread, the coursekit in use first on the path (the runner needs it)."""
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, **script_check.CPU_ONE_THREAD}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return env


def run_file(script: Path, timeout_s: float) -> tuple[dict[str, Any], str, bool]:
    """Measure `script` in its own process: (what it measured, its stderr, whether time ran out)."""
    with tempfile.TemporaryDirectory(prefix="rules-check-") as folder:
        out = Path(folder) / "measured.json"
        with open(Path(folder) / "stderr", "wb") as err:
            process = subprocess.Popen([sys.executable, "-u", str(RUNNER), str(script), str(out)], cwd=folder,
                                       env=_env(), stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            deadline = time.monotonic() + timeout_s
            try:
                engine_answers()  # meanwhile: both processes start by importing torch
                timed_out = script_check.wait_for([process], deadline, poll_s=POLL_S)
            finally:
                script_check.stop_group(process, STOP_GRACE_S)
        stderr = (Path(folder) / "stderr").read_text(errors="replace")
        measured = json.loads(out.read_text()) if out.is_file() else {}
    return measured, stderr, timed_out


def _tail(text: str) -> str:
    return script_check.tail(text, TAIL_LINES)


def _error_detail(error: str, function: str) -> str:
    if NOT_WRITTEN in error:
        return f"{function} is not written yet (its TODO still raises NotImplementedError)"
    return f"{function} raised an error:\n{_tail(error)}"


# ---------------------------------------------------------------- the engine's answers

def engine_answers() -> dict[str, Any]:
    """The engine's answers to every part, on the runner's inputs (computed once: they never change):
    ``scaling`` (list), ``factors`` and ``lrs`` (per schedule key), ``lars`` (``lars_trajectory``'s dict)."""
    return EXERCISE.cached(("engine",), _engine_answers)


def _engine_answers() -> dict[str, Any]:
    from coursekit.train.config import TrainConfig
    from coursekit.train.optim import scaled_lr as engine_scaled_lr
    from coursekit.train.optim.lars import LARS
    from coursekit.train.schedule import build_scheduler, default_warmup_start_factor, lr_factor

    peak, factors, lrs = runner.SCHEDULER_PEAK_LR, {}, {}
    for warmup, total in runner.SCHEDULE_CASES:
        start = default_warmup_start_factor(peak, peak, warmup)  # an LR set directly, as in lab 07's runs
        factors[runner.schedule_key(warmup, total)] = [
            lr_factor(s, schedule="linear", steps_per_epoch=total, total_steps=total, warmup_steps=warmup,
                      warmup_start_factor=start) for s in range(total + 1)]
        config = TrainConfig(schedule="linear", warmup_steps=warmup, lr=peak)
        make = partial(build_scheduler, cfg=config, steps_per_epoch=total, total_steps=total)
        lrs[runner.schedule_key(warmup, total)] = runner.scheduler_lrs(make, warmup, total)
    scaling = [engine_scaled_lr(SimpleNamespace(lr=lr, base_batch=b0, lr_scaling="linear"), b)
               for lr, b0, b in runner.SCALING_CASES]
    return {"scaling": scaling, "factors": factors, "lrs": lrs, "lars": runner.lars_trajectory(LARS)}


# ---------------------------------------------------------------- the checks

def check_scaling(measured: dict[str, Any], engine: list[float]) -> Check:
    if "error" in measured:
        return Check("scaling", FAIL, _error_detail(measured["error"], "scaled_lr"))
    cases = [(*case, yours, ref) for case, yours, ref in zip(runner.SCALING_CASES, measured["values"], engine,
                                                              strict=True)]
    shown = "\n".join(f"scaled_lr({b_lr:g}, {b0}, {b}) = {yours:.4g} (engine: {ref:.4g})"
                      for b_lr, b0, b, yours, ref in cases)
    if all(_close(yours, ref) for *_, yours, ref in cases):
        return Check("scaling", PASS, shown)
    rules = {"the square-root rule": lambda lr, b0, b: lab_scaled_lr(lr, b0, b, "sqrt"),
             "no scaling": lambda lr, b0, b: lr,
             "the rule turned upside down (base_batch / batch)": lambda lr, b0, b: lr * b0 / b}
    named = [name for name, rule in rules.items()
             if all(_close(yours, rule(lr, b0, b)) for lr, b0, b, yours, _ in cases)]
    lr, b0, b, yours, ref = next(c for c in cases if not _close(c[3], c[4]))
    why = (f"that is {named[0]}. " if named else "") + (
        f"The linear rule multiplies the LR by k = batch / base_batch = {b / b0:g}: {lr:g} x {b / b0:g} = {ref:.4g}")
    return Check("scaling", FAIL, f"scaled_lr({lr:g}, {b0}, {b}) gives {yours:.4g}, the engine {ref:.4g}: {why}\n{shown}")


def _probe_steps(warmup: int, total: int) -> list[int]:
    steps = [0, warmup // 2, warmup - 1, warmup, (warmup + total) // 2, total - 1] if warmup else [0, total // 2,
                                                                                                    total - 1]
    return sorted({s for s in steps if 0 <= s < total})


def _why_factors_differ(yours: list[float], ref: list[float], warmup: int, total: int) -> str:
    """The likely mistake behind factors that differ from the engine's, in words."""
    warm = range(warmup)
    if warmup and all(_close(yours[s], ref[s + 1]) for s in warm):
        return ("your warm-up is one step ahead: at step s you give the engine's factor of step s + 1. At step 0 "
                f"the factor is 1 / warmup_steps = {ref[0]:.4g}; it reaches 1 at step warmup_steps, not before")
    if warmup and _close(yours[0], 0.0):
        return (f"your warm-up starts at 0, so the first step does nothing; the engine starts at 1 / warmup_steps "
                f"= {ref[0]:.4g} and rises in a straight line to 1 at step warmup_steps")
    after = range(warmup, total)
    if all(_close(yours[s], 1.0) for s in after):
        return "after the warm-up your factor stays at 1: no decay. It should fall in a straight line to 0 at step " \
               "total_steps"
    if max(yours[:total]) < 1 - LR_TOLERANCE:
        return (f"your factor never reaches 1 (its largest is {max(yours[:total]):.4g}): the peak LR is never used. "
                "The decay starts at 1 at step warmup_steps: count its progress from there, (step - warmup_steps) / "
                "(total_steps - warmup_steps)")
    first = next(s for s in range(total + 1) if not _close(yours[s], ref[s]))
    part = "warm-up" if first < warmup else "decay"
    return f"the first difference is at step {first}, in the {part}"


def check_warmup(measured: dict[str, Any], engine: dict[str, list[float]]) -> Check:
    if "error" in measured:
        return Check("warmup", FAIL, _error_detail(measured["error"], "warmup_then_decay"))
    lines, problem = [], ""
    for warmup, total in runner.SCHEDULE_CASES:
        key = runner.schedule_key(warmup, total)
        yours, ref = measured["factors"][key], engine[key]
        probes = ", ".join(f"{s}: {yours[s]:.3f}" + ("" if _close(yours[s], ref[s]) else f" (engine {ref[s]:.3f})")
                           for s in _probe_steps(warmup, total))
        lines.append(f"{warmup} warm-up steps of {total}: step {probes}")
        if not problem and not all(_close(a, b) for a, b in zip(yours, ref, strict=True)):
            problem = (f"with {warmup} warm-up steps of {total}: "
                       f"{_why_factors_differ(yours, ref, warmup, total)}")
    shown = "\n".join(lines)
    return Check("warmup", FAIL, f"{problem}\n{shown}") if problem else Check("warmup", PASS, shown)


def check_scheduler(measured: dict[str, Any], engine: dict[str, list[float]], warmup: Check) -> Check:
    if "error" in measured:
        if warmup.verdict == FAIL:
            return Check("scheduler", FAIL, "expected while the warm-up check fails: the scheduler calls "
                                            "warmup_then_decay; fix it first")
        return Check("scheduler", FAIL, _error_detail(measured["error"], "warmup_scheduler"))
    peak = runner.SCHEDULER_PEAK_LR
    for warmup_steps, total in runner.SCHEDULE_CASES:
        key = runner.schedule_key(warmup_steps, total)
        yours, ref = measured["lrs"][key], engine[key]
        wrong = [s for s in range(total + 1) if not _close(yours[s], ref[s])]
        if not wrong:
            continue
        s = wrong[0]
        if warmup.verdict == FAIL:
            why = "expected while the warm-up check fails: fix warmup_then_decay first"
        elif all(_close(yours[t], ref[t + 1]) for t in range(total)):
            why = ("your scheduler is one step ahead: LambdaLR passes the number of steps done so far, starting at "
                   "0; give it to warmup_then_decay as it is")
        else:
            why = "the scheduler's factor must be warmup_then_decay(step, warmup_steps, total_steps)"
        return Check("scheduler", FAIL, f"with {warmup_steps} warm-up steps of {total} and a peak LR of {peak:g}, the "
                                        f"LR at step {s} is {yours[s]:.4g}, the engine's {ref[s]:.4g}: {why}")
    return Check("scheduler", PASS, f"the same LR as the engine's scheduler at every step of the "
                                    f"{len(runner.SCHEDULE_CASES)} schedules (peak LR {peak:g})")


def _trust_table(yours: dict[str, float], reference: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, engine in reference["local_lr"].items():
        mine = yours.get(name, math.nan)
        rows.append({"layer": name, "group": "trust" if reference["adapted"][name] else "plain SGD",
                     "w_norm": reference["weight_norms"][name], "g_norm": reference["grad_norms"][name],
                     "engine": engine, "yours": mine,
                     "same": math.isclose(mine, engine, rel_tol=RATIO_TOLERANCE, abs_tol=RATIO_TOLERANCE)})
    return rows


def _why_ratios_differ(rows: list[dict[str, Any]]) -> str:
    eta, decay = runner.LARS_TRUST_COEFFICIENT, runner.LARS_WEIGHT_DECAY

    def matches(row: dict[str, Any], value: float) -> bool:
        return math.isclose(row["yours"], value, rel_tol=RATIO_TOLERANCE, abs_tol=RATIO_TOLERANCE)

    trust = [r for r in rows if r["group"] == "trust" and r["w_norm"] > 0]
    plain = [r for r in rows if r["group"] == "plain SGD"]
    zero = [r for r in rows if r["group"] == "trust" and r["w_norm"] == 0]
    wrong_plain = [r["layer"] for r in plain if not r["same"]]
    if wrong_plain:
        return (f"biases and batch-norm parameters ({', '.join(wrong_plain)}) got a local LR other than 1: they are in "
                "the group with layer_adaptation False, where local_lr stays 1")
    if trust and all(matches(r, eta * r["w_norm"] / r["g_norm"]) for r in trust):
        return "your trust ratio is eta ||w|| / ||g||: the denominator is missing weight_decay * ||w||"
    if trust and all(matches(r, 1.0) for r in trust):
        return "every layer got a local LR of 1: compute the trust ratio where group['layer_adaptation'] is True"
    if trust and all(matches(r, r["w_norm"] / (r["g_norm"] + decay * r["w_norm"])) for r in trust):
        return "your trust ratio is missing the trust coefficient eta (0.001) in front"
    if zero and not all(r["same"] for r in zero):
        names = ", ".join(r["layer"] for r in zero)
        return (f"||w|| is 0 at the start in {names} (a layer initialised to 0): there the local LR must be 1, "
                "else the layer never moves; keep 1 where ||w|| or ||g|| is 0")
    return "the local LR must be eta ||w|| / (||g|| + weight_decay ||w||), see the class docstring"


def check_lars(measured: dict[str, Any], reference: dict[str, Any]) -> tuple[Check, list[dict[str, Any]], float | None]:
    if "error" in measured:
        return Check("lars", FAIL, _error_detail(measured["error"], "LARS")), [], None
    rows = _trust_table(measured["local_lr"], reference)
    diffs = []
    for step, (yours, ref) in enumerate(zip(measured["weights"], reference["weights"], strict=True), start=1):
        per_layer = {n: max(abs(a - b) for a, b in zip(yours[n], ref[n], strict=True)) for n in ref}
        diffs.append((step, per_layer))
    max_diff = max(max(d.values()) for _, d in diffs)
    setting = (f"{runner.LARS_STEPS} steps at lr {runner.LARS_LR:g}, momentum {runner.LARS_MOMENTUM:g}, weight decay "
               f"{runner.LARS_WEIGHT_DECAY:g}, trust coefficient {runner.LARS_TRUST_COEFFICIENT:g}")
    measured_text = f"max |Δw| = {max_diff:.1e} (tolerance {WEIGHT_TOLERANCE:.0e}) after {setting}"
    if max_diff <= WEIGHT_TOLERANCE and all(r["same"] for r in rows):
        return Check("lars", PASS, f"{measured_text}; every layer's local LR as the engine's"), rows, max_diff
    wrong = [r for r in rows if not r["same"]]
    if wrong:
        worst = max(wrong, key=lambda r: abs(math.log(max(r["yours"], 1e-300) / max(r["engine"], 1e-300)))
                    if r["yours"] == r["yours"] else math.inf)
        detail = (f"the local LR of {worst['layer']} differs most: yours {_fmt(worst['yours'])}, the engine's "
                  f"{_fmt(worst['engine'])}; {_why_ratios_differ(rows)}\n{measured_text}")
    else:
        step, layer = next((s, max(d, key=d.get)) for s, d in diffs if max(d.values()) > WEIGHT_TOLERANCE)
        detail = (f"every layer's local LR is the engine's, but the weights differ from step {step} on (most in "
                  f"{layer}): the update must be v = momentum v + lr local_lr (g + weight_decay w), w = w - v\n"
                  f"{measured_text}")
    return Check("lars", FAIL, detail), rows, max_diff


# ---------------------------------------------------------------- the entry point

def judge(measured: dict[str, Any], path: str, *, seconds: float = 0.0, stderr: str = "", timed_out: bool = False,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> RulesCheckReport:
    """The report on what the runner measured (``rules_runner.measure``'s dict, perhaps partial)."""
    engine = engine_answers()
    report = RulesCheckReport(path, [], seconds=seconds)
    load = measured.get("load")
    if load is None or "error" in load:
        if load is not None:
            run = Check("run", FAIL, f"the file cannot be loaded:\n{_tail(load['error'])}")
        elif timed_out:
            run = Check("run", FAIL, f"loading the file did not finish within {timeout_s:.0f} s: does it wait for "
                                     "something, or loop forever, when it is imported?")
        else:
            run = Check("run", FAIL, f"the checker's process ended before loading the file:\n{_tail(stderr)}")
        report.checks = EXERCISE.not_run(run, "the file did not load")
        return report
    report.checks.append(Check("run", PASS, f"loaded and measured in {seconds:.1f} s"))
    judges: dict[str, Callable[[dict[str, Any]], Check]] = {
        "scaling": lambda m: check_scaling(m, engine["scaling"]),
        "warmup": lambda m: check_warmup(m, engine["factors"]),
        "scheduler": lambda m: check_scheduler(m, engine["lrs"], report["warmup"])}
    for part in runner.PARTS:
        if part not in measured:
            if measured.get("running") == part:
                why = (f"did not finish within {timeout_s:.0f} s: does it loop forever?" if timed_out else
                       f"the checker's process ended here:\n{_tail(stderr)}")
                report.checks.append(Check(part, FAIL, why))
            else:
                report.checks.append(Check(part, SKIP, "not run: an earlier part did not finish"))
        elif part == "lars":
            check, report.trust_ratios, report.max_abs_diff = check_lars(measured[part], engine["lars"])
            report.checks.append(check)
        else:
            report.checks.append(judges[part](measured[part]))
    return report


def check_large_batch_rules(path: str | os.PathLike, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> RulesCheckReport:
    """Run the rules in `path` (your ``lab07_large_batch/my_rules.py``) in their own process and compare them with the
    training engine; the report says what is wrong, check by check."""
    script = EXERCISE.script(path)
    exercise.positive_timeout(timeout_s)
    start = time.monotonic()
    measured, stderr, timed_out = run_file(script, timeout_s)
    return judge(measured, str(path), seconds=time.monotonic() - start, stderr=stderr, timed_out=timed_out,
                 timeout_s=timeout_s)


plant_mistake = EXERCISE.plant_mistake
