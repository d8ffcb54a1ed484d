"""Check a participant's resumable training script: stopped by a signal, run again, it must end as if never stopped.

``check_resume_script("lab10_resilience/train_resume.py")`` runs the script three times: once uninterrupted, once
signalled after step J (``--interrupt-at-step J``: the script sends itself SIGUSR2, as Slurm does before the time
limit) and once more in the same folder, as the requeued job runs the same command again. Then it judges:

- **run**: the uninterrupted run ends; the signalled run stops (exit code 75) and the second start ends;
- **saves**: the checkpoint the signalled run left holds the model, the optimizer, the scheduler, the random
  generators' states, the epoch, the position in it and the step J, and was written atomically (a temporary file
  renamed onto the checkpoint);
- **resumes**: the second start resumed at step J (it trains step J + 1 first), not at step 0;
- **exact**: its final weights equal the uninterrupted run's (max |Δw| ≤ the tolerance). When they do not, the
  report finds the first step where the two runs' records (``steps.jsonl``) part and names what the resume
  forgot: the step counter, the sampler's epoch or the position in the epoch, the optimizer's state, the
  scheduler, the random generators, the model's weights.

On a CPU one server process (``kit/script_server.py``) imports torch once and forks a child per run; on a GPU each
run is a process of its own. What a run leaves and where two runs part is read by ``records.py``, which the
notebook's comparison of two jobs (``resume.compare_runs``) uses too.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coursekit.labs.kit import exercise
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import FAIL, PASS, Check, CheckReport, tail
from coursekit.labs.kit.script_server import RunnerRun
from coursekit.labs.lab10_resilience import SCRIPTS
from coursekit.labs.lab10_resilience.records import (
    CHECKPOINT,
    PROGRESS_KEYS,
    RELATIVE_TOLERANCE,
    WEIGHT_TOLERANCE,
    Divergence,
    checkpoint_parts,
    compare_steps,
    load_checkpoint,
    max_abs_diff,
    read_steps,
    starts,
    step_records,
)

SOLUTION = SCRIPTS / "train_resume.py"  # participants get it as lab10_resilience/train_resume.py, stripped
RUNNER = Path(__file__).with_name("resume_runner.py")
STOPPED_EXIT_CODE = 75  # the script's exit code when a signal stopped it (EX_TEMPFAIL)
DEFAULT_TIMEOUT_S = 120.0
CHECK_QUESTIONS = {
    "run": "the script runs to its end, and stops when signalled",
    "saves": "the checkpoint holds model, optimizer, scheduler, random state, epoch, position and step, "
             "written atomically",
    "resumes": "the second start resumes at the checkpoint's step, not at step 0",
    "exact": "the resumed run ends with the weights of the uninterrupted run",
}


@dataclass(frozen=True)
class CheckOptions:
    """What the three runs run with: 5 epochs of 10 steps; the signal in epoch 2, between two checkpoints."""

    steps: int = 48
    checkpoint_every: int = 10
    interrupt_at_step: int = 23  # epoch 2, 3 batches in: the epoch, the position and the signal's save all matter
    batch_size: int = 32
    data_size: int = 320
    seed: int = 0

    def argv(self, out: Path, device: str, interrupt: bool) -> list[str]:
        return ["--out", str(out), "--steps", str(self.steps), "--checkpoint-every", str(self.checkpoint_every),
                "--batch-size", str(self.batch_size), "--data-size", str(self.data_size), "--seed", str(self.seed),
                "--device", device, *(["--interrupt-at-step", str(self.interrupt_at_step)] if interrupt else [])]


@dataclass(repr=False)  # repr: CheckReport's text table
class ResumeCheckReport(CheckReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    device: str
    checks: list[Check]
    seconds: float = 0.0
    interrupt_at_step: int = 0
    resumed_at: int | None = None  # the step the second start said it resumed at
    max_abs_diff: float | None = None  # max |w_resumed - w_uninterrupted|
    tolerance: float = 0.0
    divergence: Divergence | None = None
    saved: dict[str, str] = field(default_factory=dict)  # part -> what the checkpoint held for it
    outputs: dict[str, str] = field(default_factory=dict)  # "uninterrupted", "signalled", "resumed" -> stdout
    questions = CHECK_QUESTIONS

    def headline(self) -> str:
        return (f"resume check of {self.script} (signalled after step {self.interrupt_at_step}, {self.device}): "
                f"{self.summary()}")


# Mistakes planted in the solution (SOLUTION) for the tests and the notebook:
# name -> (what it does, the (old, new) replacements that make it)
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "forget_scheduler": ("the resume leaves the scheduler at its start", (
        ("    scheduler.load_state_dict(state[\"scheduler\"])\n", ""),)),
    "forget_optimizer": ("the resume leaves the optimizer's state (momentum buffers) empty", (
        ("    optimizer.load_state_dict(state[\"optimizer\"])\n", ""),)),
    "forget_epoch": ("the resume returns epoch 0: the sampler deals epoch 0's order again", (
        ("return {\"epoch\": state[\"epoch\"],", "return {\"epoch\": 0,"),)),
    "forget_position": ("the resume returns position 0: the epoch starts again at its first batch", (
        ("\"position\": state[\"position\"], \"step\"", "\"position\": 0, \"step\""),)),
    "forget_rng": ("the resume leaves the random generators as the fresh start seeded them", (
        ("    set_rng_states(state[\"rng\"])\n", ""),)),
    "restart_step": ("the resume returns step 0: the run counts its steps from the start again", (
        ("\"step\": state[\"step\"]}", "\"step\": 0}"),)),
    "forget_model": ("the resume leaves the model's weights as initialised", (
        ("    model.load_state_dict(state[\"model\"])\n", ""),)),
    "not_atomic": ("torch.save straight onto the checkpoint's name", (
        ("    torch.save(state, temporary)\n    os.replace(temporary, path)\n", "    torch.save(state, path)\n"),)),
}

EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "resumable training script",
                          "lab10_resilience/train_resume.py", server_prefix="resume-check-server-")


# ---------------------------------------------------------------- running

def run_script(script: Path, args: list[str], workdir: Path, timeout_s: float, fork: bool) -> RunnerRun:
    """Run `script` with `args` in `workdir` under resume_runner.py (see :func:`script_server.run_script`)."""
    return EXERCISE.run(script, args, workdir, timeout_s, fork)


# ---------------------------------------------------------------- the checks

def _check_run(whole: RunnerRun, signalled: RunnerRun, resumed: RunnerRun | None, timeout_s: float,
               options: CheckOptions) -> Check:
    hang = "a loop that never ends? waiting for input?"
    for what, run in (("the uninterrupted run", whole), ("the signalled run", signalled)):
        if run.returncode == STOPPED_EXIT_CODE and run is whole:
            return Check("run", FAIL, f"{what} stopped (exit code {STOPPED_EXIT_CODE}) although nothing signalled "
                                      f"it: {tail(run.stdout, 3)}")
        if run is signalled and run.returncode == 0:
            return Check("run", FAIL, f"the run signalled after step {options.interrupt_at_step} did not stop: it ran "
                                      f"to its end. Keep the loop's stop check (StopRequest): save, then exit with "
                                      f"code {STOPPED_EXIT_CODE}")
        if run.returncode not in (0, STOPPED_EXIT_CODE) or run.timed_out:
            failure = EXERCISE.run_failure(run, timeout_s, hang)
            if failure is not None:
                return Check("run", FAIL, f"{what}: {failure.detail}")
    if resumed is not None:
        failure = EXERCISE.run_failure(resumed, timeout_s, hang)
        if failure is not None:
            return Check("run", FAIL, f"the second start (the requeued job's): {failure.detail}")
    return Check("run", PASS, f"uninterrupted {whole.seconds:.1f} s; signalled after step {options.interrupt_at_step} "
                              f"it stopped (exit code {STOPPED_EXIT_CODE}) in {signalled.seconds:.1f} s; the second "
                              f"start ended in {resumed.seconds:.1f} s")


def _check_saves(checkpoint: Any, note: str, record: dict[str, Any] | None, checkpoint_path: Path,
                 interrupt_at: int) -> tuple[Check, dict[str, str]]:
    if checkpoint is None:
        return Check("saves", FAIL, f"{note}: the signalled run must save its checkpoint there "
                                    "(save_checkpoint)"), {}
    parts = checkpoint_parts(checkpoint)
    saved = {name: ("yes" if name in parts else "missing") for name in ("model", "optimizer", "scheduler", "rng")}
    saved.update({key: str(parts[key]) if key in parts else "missing" for key in PROGRESS_KEYS})
    missing = [name for name, value in saved.items() if value == "missing"]
    words = {"model": "the model's state_dict()", "optimizer": "the optimizer's state_dict()",
             "scheduler": "the scheduler's state_dict()", "rng": "the random generators' states (rng_states())",
             "epoch": "the epoch (an int under \"epoch\")", "position": "the position in the epoch (\"position\")",
             "step": "the step (\"step\")"}
    if missing:
        return Check("saves", FAIL, "the checkpoint lacks " + ", ".join(words[m] for m in missing)
                     + ": a resume cannot continue exactly without it"), saved
    if "optimizer" in parts and not parts["optimizer"].get("state"):
        return Check("saves", FAIL, "the optimizer's saved state is empty: save optimizer.state_dict() after the "
                                    "steps (it holds the momentum buffers)"), saved
    if parts["step"] != interrupt_at:
        return Check("saves", FAIL, f"the checkpoint holds step {parts['step']}, but the signal came after step "
                                    f"{interrupt_at}: save when the signal arrives, not only every few steps"), saved
    target = str(checkpoint_path.resolve())
    saves = (record or {}).get("saves", [])
    renamed = [src for src, dst in (record or {}).get("renames", []) if dst == target]
    if target in saves:
        return Check("saves", FAIL, f"torch.save wrote straight onto {checkpoint_path.name}: a job killed in the "
                                    "middle of it leaves a broken checkpoint, and nothing to resume from. Save to a "
                                    "temporary file, then os.replace(temporary, path)"), saved
    if not renamed:
        return Check("saves", FAIL, f"{checkpoint_path.name} was not renamed into place (os.replace): save to a "
                                    "temporary file, then os.replace(temporary, path)"), saved
    return Check("saves", PASS, f"model, optimizer, scheduler, random state, epoch {parts['epoch']}, position "
                                f"{parts['position']}, step {parts['step']}; written to {Path(renamed[-1]).name}, "
                                f"then renamed onto {checkpoint_path.name}"), saved


def _check_resumes(resumed_records: list[dict[str, Any]], saved_step: int | None) -> tuple[Check, int | None]:
    start = resumed_records[0] if resumed_records and resumed_records[0].get("event") == "start" else {}
    at = start.get("resumed_at")
    steps = step_records(resumed_records)
    first = steps[0]["step"] if steps else None
    if at is None or first is None:
        return Check("resumes", FAIL, "the second start trained no step: did it think the run was over?"), at
    if at == 0 or first == 1:
        where = f" (the checkpoint holds step {saved_step})" if saved_step is not None else ""
        return Check("resumes", FAIL, f"the second start began at step {first}{where}: resume() must load the "
                                      "checkpoint and return the saved epoch, position and step"), at
    if saved_step is not None and (at != saved_step or first != saved_step + 1):
        return Check("resumes", FAIL, f"the second start said it resumed at step {at} and trained step {first} "
                                      f"first; the checkpoint holds step {saved_step}"), at
    return Check("resumes", PASS, f"the second start resumed at step {at} (epoch {start.get('epoch')}, batch "
                                  f"{start.get('position')} of it) and trained steps {first} to {steps[-1]['step']}"), at


def _check_exact(final: Any, reference: Any, divergence: Divergence | None, tolerance: float
                 ) -> tuple[Check, float | None]:
    weights, reference_weights = checkpoint_parts(final).get("model"), checkpoint_parts(reference).get("model")
    if weights is None or reference_weights is None:
        why = divergence.explanation if divergence else "the checkpoints hold no model state_dict to compare"
        return Check("exact", FAIL, f"cannot compare the final weights: {why}"), None
    diff = max_abs_diff(weights, reference_weights)
    if diff is None:
        return Check("exact", FAIL, "the two runs' final models have different parameter names or shapes"), None
    if diff <= tolerance and divergence is None:
        return Check("exact", PASS, f"max |Δw| = {diff:.3g} (tolerance {tolerance:g}); learning rate, batches, "
                                    "random state, momentum and loss agree at every resumed step"), diff
    if divergence is None:
        return Check("exact", FAIL, f"max |Δw| = {diff:.3g} > {tolerance:g}, though every resumed step's record "
                                    "agrees with the uninterrupted run's"), diff
    others = [f for f in divergence.fields[1:]]
    also = f" (at that step {', '.join(others)} differ{'s' if len(others) == 1 else ''} too)" if others else ""
    within = " is within it, but the runs parted on the way" if diff <= tolerance else ""
    return Check("exact", FAIL, f"max |Δw| = {diff:.3g} (tolerance {tolerance:g}){within}. Forgotten: "
                                f"{divergence.forgotten} — {divergence.explanation}{also}"), diff


# ---------------------------------------------------------------- the entry point

def check_resume_script(path: str | os.PathLike, *, device: str = "cpu", options: CheckOptions | None = None,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> ResumeCheckReport:
    """Run the resumable script `path` uninterrupted, signalled after a step, and again (the requeued job's start);
    the report says what is wrong, check by check, and names what a resume forgot."""
    script = EXERCISE.script(path)
    exercise.known_device(device)
    device = exercise.resolve_device(device, torch.cuda.is_available(), "in this kernel")
    exercise.positive_timeout(timeout_s)
    options = options or CheckOptions()
    if not 1 <= options.interrupt_at_step < options.steps:
        raise ValueError(f"options.interrupt_at_step={options.interrupt_at_step}: choose a step from 1 to steps - 1 "
                         f"({options.steps - 1}), so that the resumed run has steps left")
    print(f"checking {path}: {options.steps} steps uninterrupted, then signalled after step "
          f"{options.interrupt_at_step} and started again, on the {device.upper() if device == 'cpu' else 'GPU'} ...",
          flush=True)
    fork = device == "cpu"
    tolerance, relative = WEIGHT_TOLERANCE[device], RELATIVE_TOLERANCE[device]
    with tempfile.TemporaryDirectory(prefix="resume-check-") as folder:
        work = Path(folder)
        whole_out, run_out = work / "uninterrupted" / "out", work / "signalled" / "out"
        signalled_args = options.argv(run_out, device, interrupt=True)
        whole, signalled = exercise.beside(
            lambda: run_script(script, options.argv(whole_out, device, interrupt=False), work / "uninterrupted",
                               timeout_s, fork),
            lambda: run_script(script, signalled_args, work / "signalled", timeout_s, fork), together=fork)
        interrupted_checkpoint = work / "interrupted.pt"
        if (run_out / CHECKPOINT).is_file():
            shutil.copyfile(run_out / CHECKPOINT, interrupted_checkpoint)
        resumed = None
        if signalled.returncode == STOPPED_EXIT_CODE and whole.returncode == 0:
            # the same command again, as a requeued job runs it (its clock's signal came once)
            resumed = run_script(script, options.argv(run_out, device, interrupt=False), work / "resumed",
                                 timeout_s, fork)
        report = ResumeCheckReport(str(path), device, [], seconds=whole.seconds + signalled.seconds
                                   + (resumed.seconds if resumed else 0.0),
                                   interrupt_at_step=options.interrupt_at_step, tolerance=tolerance,
                                   outputs={"uninterrupted": whole.stdout, "signalled": signalled.stdout,
                                            "resumed": resumed.stdout if resumed else ""})
        run = _check_run(whole, signalled, resumed, timeout_s, options)
        if run.verdict != PASS:
            report.checks = EXERCISE.not_run(run)
            return report
        checkpoint, note = load_checkpoint(interrupted_checkpoint if interrupted_checkpoint.is_file()
                                           else run_out / CHECKPOINT)
        saves, report.saved = _check_saves(checkpoint, note, signalled.record, run_out / CHECKPOINT,
                                           options.interrupt_at_step)
        run_starts = starts(read_steps(run_out))
        saved_step = checkpoint_parts(checkpoint).get("step")
        resumes, report.resumed_at = _check_resumes(run_starts[-1] if len(run_starts) > 1 else [], saved_step)
        reference_steps = step_records(read_steps(whole_out))
        resumed_steps = step_records(run_starts[-1]) if len(run_starts) > 1 else []
        report.divergence = compare_steps(reference_steps, resumed_steps, report.resumed_at, relative)
        final, _ = load_checkpoint(run_out / CHECKPOINT)
        reference, _ = load_checkpoint(whole_out / CHECKPOINT)
    exact, report.max_abs_diff = _check_exact(final, reference, report.divergence, tolerance)
    report.checks = [run, saves, resumes, exact]
    return report


plant_mistake = EXERCISE.plant_mistake
