"""Check a participant's resumable training script: stopped by a signal, run again, it must end as if never stopped.

``check_resume_script("lab10_resilience/train_resume.py")`` runs the script three times: once uninterrupted, once
signalled after step J (``--interrupt-at-step J``: the script sends itself SIGUSR2, as Slurm does before the time
limit) and once more in the same folder, as the requeued job runs the same command again. Then it judges:

- **run**: the uninterrupted run ends; the signalled run stops (exit code 75) and the second start ends;
- **saves**: the checkpoint the signalled run left holds the model, the optimizer, the scheduler, the random
  generators' states, the epoch, the position in it and the step J, and was written atomically (a temporary file
  renamed onto the checkpoint);
- **resumes**: the second start continued at step J + 1, not at step 1;
- **exact**: its final weights equal the uninterrupted run's (max |Δw| ≤ the tolerance). When they do not, the
  report finds the first step where the two runs' records (``steps.jsonl``) part and names what the resume
  forgot: the step counter, the sampler's epoch or the position in the epoch, the optimizer's state, the
  scheduler, the random generators, the model's weights.

On a CPU one server process (``kit/script_server.py``) imports torch once and forks a child per run; on a GPU each
run is a process of its own. :func:`compare_steps` and :func:`checkpoint_parts` are what the notebook's comparison
of two jobs (``resume.compare_runs``) uses too.
"""

from __future__ import annotations

import json
import math
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

SOLUTION = SCRIPTS / "train_resume.py"  # participants get it as lab10_resilience/train_resume.py, stripped
RUNNER = Path(__file__).with_name("resume_runner.py")
CHECKPOINT = "checkpoint.pt"  # what the script writes in --out (its CHECKPOINT and STEPS_LOG)
STEPS_LOG = "steps.jsonl"
STOPPED_EXIT_CODE = 75  # the script's exit code when a signal stopped it (EX_TEMPFAIL)
DEFAULT_TIMEOUT_S = 120.0
# max |Δw| of the final weights. On a CPU the same operations in the same order give the same bits: a right resume
# gives 0.0 (measured); 1e-6 leaves room for nothing else. On a GPU, dropout's masks come from the restored CUDA
# generator and the MLP's kernels are deterministic: max |Δw| = 0.0 measured on an H200 (torch 2.11; widths 64 and
# 4096, batches 32 to 8192, resumed mid-epoch); 1e-5 covers kernels that add in another order. A planted mistake
# moves the weights by 0.3 to 1.5 (test_resume_check.py): 10^5 times the GPU's tolerance and more.
WEIGHT_TOLERANCE = {"cpu": 1e-6, "cuda": 1e-5}
RELATIVE_TOLERANCE = {"cpu": 1e-9, "cuda": 1e-5}  # per-step learning rate, momentum and loss of the two runs
RNG_STATE_BYTES = 5056  # torch.get_rng_state(): the CPU generator (mt19937) in 5056 bytes
PROGRESS_KEYS = ("epoch", "position", "step")
CHECK_QUESTIONS = {
    "run": "the script runs to its end, and stops when signalled",
    "saves": "the checkpoint holds model, optimizer, scheduler, random state, epoch, position and step, "
             "written atomically",
    "resumes": "the second start continues at the checkpoint's step, not at step 1",
    "exact": "the resumed run ends with the weights of the uninterrupted run",
}
# what a resume forgot, by the record that first differs (in this order of precedence at that step)
FORGOTTEN = {
    "batch": "data order",
    "momentum": "optimizer state",
    "lr": "scheduler",
    "rng": "random state",
    "loss": "model weights",
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


@dataclass(frozen=True)
class Divergence:
    """The first step where a resumed run's records part from the uninterrupted run's, and what that names."""

    step: int
    fields: tuple[str, ...]  # the records that differ at that step (batch, momentum, lr, rng, loss, step)
    forgotten: str  # what the resume forgot (a FORGOTTEN value, or "step counter")
    explanation: str


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
