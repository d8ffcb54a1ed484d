"""Check a participant's loader script against the starving script it came from, in plain words.

``check_loader_script("lab05_data_loading/train_fed.py")`` runs the script and ``train_starving.py`` (found next
to it) as the reference, a few steps each, and judges:

- **run**: the script runs to its end, within the time limit;
- **output**: it wrote its per-step times (waiting for data, whole step) to ``--out``;
- **workers**: its DataLoader has worker processes (``num_workers``);
- **pinning**: ``pin_memory=True`` and copies with ``non_blocking=True``, both: pinned memory alone
  shortens each copy but the process still waits for it; with ``non_blocking`` the process queues the copy
  and goes on without waiting for it (the copy itself still runs after the work already queued on the GPU:
  overlapping it with that work needs a second CUDA stream); ``non_blocking`` from pageable memory waits anyway;
- **persistent**: the workers stay between epochs (``persistent_workers=True``);
- **wait_share**: the share of step time spent waiting for data fell clearly below the starving script's.

The first four are read from what the script did, recorded from inside (``loader_runner.py``): they are
the checks that count. The measured one works on any machine, also on two busy CPU cores, because the
scripts' images wait to be "read" (as files on a shared file system do), and workers overlap such waits
even without cores of their own. On a CPU one server process (``kit/script_server.py``) imports torch
once and forks a child per run, so a check takes seconds; on a GPU each run is a process of its own (a
forked child cannot use CUDA once its parent started it). The reference runs once per set of options and
is cached.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coursekit.labs.kit import exercise
from coursekit.labs.kit.exercise import ScriptExercise
from coursekit.labs.kit.script_check import FAIL, PASS, SKIP, Check, CheckReport, tail
from coursekit.labs.kit.script_check import STOP_GRACE_S as STOP_GRACE_S  # the tests read it here
from coursekit.labs.kit.script_server import RunnerRun
from coursekit.labs.lab05_data_loading import SCRIPTS

REFERENCE_NAME = "train_starving.py"
SOLUTION = SCRIPTS / "train_fed.py"  # participants get it as lab05_data_loading/train_fed.py, stripped
RUNNER = Path(__file__).with_name("loader_runner.py")
TIMES_FILE = "loader_times.json"  # what the scripts write to --out
DEFAULT_TIMEOUT_S = 60.0
MAX_SHARE_RATIO = 0.5  # a fed loader waits at most half the starving script's share of step time
CHECK_QUESTIONS = {
    "run": "the script runs to its end",
    "output": "the script writes its per-step times to --out",
    "workers": "worker processes prepare the batches",
    "pinning": "pin_memory=True and copies with non_blocking=True, together",
    "persistent": "the workers stay between epochs",
    "wait_share": "the step waits for data clearly less than in the starving script",
}


@dataclass(frozen=True)
class CheckOptions:
    """What both scripts run with: a few steps, an epoch boundary among them, images slow to read."""

    steps: int = 10
    batch_size: int = 8
    read_ms: float = 6.0
    width: int = 1024
    seed: int = 0

    def argv(self, device: str, out: Path) -> list[str]:
        return ["--steps", str(self.steps), "--batch-size", str(self.batch_size), "--read-ms", repr(self.read_ms),
                "--width", str(self.width), "--seed", str(self.seed), "--device", device, "--out", str(out)]


# on a GPU the step computes in well under a millisecond: shorter reads, a wider model, so that four
# workers keep up with the step while the starving script still waits most of each step
GPU_OPTIONS = CheckOptions(steps=20, batch_size=16, read_ms=0.1, width=8192)


@dataclass(repr=False)  # repr: CheckReport's text table
class LoaderCheckReport(CheckReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    script: str
    device: str
    checks: list[Check]
    seconds: float = 0.0
    loader: dict[str, Any] | None = None  # the DataLoader's settings, as the script passed them
    wait_share: float | None = None  # of the script, first step left out
    reference_wait_share: float | None = None  # of train_starving.py
    output: str = ""
    questions = CHECK_QUESTIONS

    @property
    def ok(self) -> bool:  # skipped checks do not count against the script, but it must have run
        return not self.failed and self["run"].verdict == PASS

    def headline(self) -> str:
        return f"loader check of {self.script} ({self.device}): {self.summary()}"


@dataclass
class ScriptRun(RunnerRun):
    """A run under loader_runner.py, and the times the script wrote."""

    times: dict[str, Any] | None = None  # what the script wrote to --out (None: nothing, or not JSON)
    times_note: str = ""


# Mistakes planted in the solution (SOLUTION) for the tests and the notebook:
# name -> (what it does, the (old, new) replacements that make it)
_SOLUTION_LOADER = ("    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=4, "
                    "pin_memory=True,\n                      persistent_workers=True, prefetch_factor=4)\n")
_SOLUTION_COPY = "    return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)\n"
PLANTED_MISTAKES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "no_workers": ("the training process loads every batch itself (num_workers=0)", ((
        _SOLUTION_LOADER,
        "    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, pin_memory=True)\n"),)),
    "blocking_copies": ("pin_memory=True, but the copies block (no non_blocking=True)", (
        (_SOLUTION_COPY, "    return images.to(device), labels.to(device)\n"),)),
    "no_pin_memory": ("non_blocking=True copies from memory that is not pinned", (
        (_SOLUTION_LOADER, _SOLUTION_LOADER.replace("pin_memory=True", "pin_memory=False")),)),
    "not_persistent": ("the workers start again at every epoch", (
        (_SOLUTION_LOADER, _SOLUTION_LOADER.replace("persistent_workers=True", "persistent_workers=False")),)),
    "no_output": ("the times are never written to --out", (
        ("    write_times(args.out, device, waits, steps)\n", ""),)),
}


EXERCISE = ScriptExercise(SOLUTION, RUNNER, CHECK_QUESTIONS, PLANTED_MISTAKES, "loader script",
                          "lab05_data_loading/train_fed.py", REFERENCE_NAME, "starving",
                          server_prefix="loader-check-server-")


# ---------------------------------------------------------------- running: one server, a child per run

def run_script(script: Path, args: list[str], workdir: Path, timeout_s: float, fork: bool = True) -> ScriptRun:
    """Run `script` with `args` in `workdir` under loader_runner.py (see :func:`script_server.run_script`),
    and read the times it wrote to ``workdir/TIMES_FILE``."""
    run = EXERCISE.run(script, args, workdir, timeout_s, fork)
    times, note = _read_times(workdir / TIMES_FILE)
    return ScriptRun(**vars(run), times=times, times_note=note)


def _read_times(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The times a script wrote, or why there are none."""
    if not path.is_file():
        return None, f"no file was written to --out ({path.name}): keep write_times(...) at the end of main()"
    try:
        times = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"--out ({path.name}) is not JSON ({error}): keep write_times(...) as it is"
    waits, steps = (times.get("wait_s"), times.get("step_s")) if isinstance(times, dict) else (None, None)
    if not (isinstance(waits, list) and isinstance(steps, list) and len(waits) == len(steps) >= 2
            and all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in waits + steps)):
        return None, (f"--out ({path.name}) holds no per-step times (lists 'wait_s' and 'step_s' of equal length, "
                      "2 steps or more): keep write_times(...) as it is")
    return times, ""


def wait_share(times: dict[str, Any] | None) -> float | None:
    """The share of a step spent waiting for data, median over the steps, the first one (which starts the
    loader) left out: the median, as the scripts print it, so that one slow step of a busy machine (or the
    first batch of an epoch) does not decide."""
    if times is None:
        return None
    shares = [w / s for w, s in zip(times["wait_s"][1:], times["step_s"][1:], strict=True) if s > 0]
    return statistics.median(shares) if shares else None


def reference_run(reference: Path, options: CheckOptions, device: str, timeout_s: float) -> ScriptRun:
    """The starving script's run; once per session, script version, options and device."""
    def starving() -> ScriptRun:
        with tempfile.TemporaryDirectory(prefix="loader-check-starving-") as folder:
            run = run_script(reference, options.argv(device, Path(folder) / TIMES_FILE), Path(folder), timeout_s,
                             fork=device == "cpu")
        if run.returncode != 0 or run.times is None:
            why = ("did not finish in time" if run.timed_out else
                   f"failed: {run.times_note or tail(EXERCISE.without_runner(run.stderr))}")
            raise RuntimeError(f"the starving reference {reference} {why}")
        return run
    return EXERCISE.cached((*EXERCISE.file_key(reference), options, device), starving)


# ---------------------------------------------------------------- the checks

def _check_run(run: ScriptRun, timeout_s: float) -> Check:
    return (EXERCISE.run_failure(run, timeout_s, "a loop that never ends? workers waiting for each other?")
            or Check("run", PASS, f"ran to its end in {run.seconds:.1f} s"))


def _check_output(run: ScriptRun) -> Check:
    if run.times is None:
        return Check("output", FAIL, run.times_note)
    return Check("output", PASS, f"{len(run.times['step_s'])} steps timed")


def main_loader(record: dict[str, Any]) -> dict[str, Any] | None:
    """The DataLoader that yielded the most batches (the training loader)."""
    used = [entry for entry in record["loaders"] if entry["batches"]]
    return max(used, key=lambda entry: entry["batches"]) if used else None


def _check_workers(loader: dict[str, Any]) -> Check:
    workers = loader["num_workers"]
    if workers == 0:
        return Check("workers", FAIL, "num_workers=0: the training process reads and decodes every batch itself, "
                                      "between two steps, and the step waits. Pass num_workers=4 to the DataLoader: "
                                      "worker processes prepare the next batches while the step computes")
    return Check("workers", PASS, f"num_workers={workers}: {workers} worker process{'es' * (workers > 1)} prepare "
                                  "the batches while the step computes")


def _check_pinning(loader: dict[str, Any], copies: list[dict[str, Any]]) -> Check:
    pinned = loader["pin_memory"]
    if not copies:
        return Check("pinning", FAIL, "the batches were never copied with .to(device) (or .cuda()): copy the "
                                      "images and the labels to the device in to_device()")
    blocking = sum(not c["non_blocking"] for c in copies)
    if pinned and blocking == 0:
        return Check("pinning", PASS, f"pin_memory=True, and all {len(copies)} copies of batch tensors are "
                                      "non_blocking=True: on a GPU the training process queues each copy and goes on "
                                      "without waiting for it")
    if pinned:
        some = "none" if blocking == len(copies) else f"{len(copies) - blocking} of {len(copies)}"
        return Check("pinning", FAIL, f"pin_memory=True, but {some} of the copies of batch tensors are "
                                      "non_blocking=True: each copy still makes the training process wait. Copy "
                                      "with .to(device, non_blocking=True), the images and the labels")
    if blocking < len(copies):
        return Check("pinning", FAIL, "copies with non_blocking=True, but pin_memory is off: from ordinary "
                                      "(pageable) memory the GPU cannot copy asynchronously, and the copy waits "
                                      "anyway. Pass pin_memory=True to the DataLoader")
    return Check("pinning", FAIL, "pin_memory is off and the copies block: pass pin_memory=True to the DataLoader "
                                  "and copy with .to(device, non_blocking=True)")


def _check_persistent(loader: dict[str, Any]) -> Check:
    if loader["num_workers"] == 0:
        return Check("persistent", SKIP, "there are no workers to keep (see workers)")
    prefetch = f"; prefetch_factor={loader['prefetch_factor']}: each worker keeps that many batches ready"
    if not loader["persistent_workers"]:
        return Check("persistent", FAIL, f"persistent_workers is off: at every epoch the workers are stopped and "
                                         f"started again, and the first batches of the epoch wait for them. Pass "
                                         f"persistent_workers=True to the DataLoader{prefetch}")
    return Check("persistent", PASS, f"persistent_workers=True over {loader['epochs']} epochs{prefetch}")


def _check_wait_share(share: float | None, reference: float | None) -> Check:
    if share is None or reference is None:
        return Check("wait_share", SKIP, "no times to compare (see output)")
    measured = (f"waiting for data: {100 * reference:.0f} % of a step in {REFERENCE_NAME}, {100 * share:.0f} % "
                "in yours (median over the steps, the first one left out)")
    if share <= MAX_SHARE_RATIO * reference:
        return Check("wait_share", PASS, measured)
    return Check("wait_share", FAIL, f"{measured}: more than {MAX_SHARE_RATIO:.0%} of the starving script's. "
                                     "More workers, or more batches prefetched, keep the step fed")


# ---------------------------------------------------------------- the entry point

def check_loader_script(path: str | os.PathLike, reference: str | os.PathLike | None = None, *,
                        device: str = "auto", options: CheckOptions | None = None,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> LoaderCheckReport:
    """Run the loader script `path` and the starving script (default: train_starving.py next to `path`);
    the report says what is wrong, check by check."""
    script = EXERCISE.script(path)
    reference_path = EXERCISE.reference(script, reference)
    exercise.known_device(device)
    exercise.positive_timeout(timeout_s)
    device = exercise.resolve_device(device, EXERCISE.server.sees_gpu() if device != "cpu" else False, "here")
    options = options or (GPU_OPTIONS if device == "cuda" else CheckOptions())
    if options.steps < 2:
        raise ValueError(f"options.steps={options.steps}: give 2 steps or more (the first one is left out)")
    print(f"checking {path}: {script.name} beside {reference_path.name}, {options.steps} steps each on the "
          f"{device.upper() if device == 'cpu' else 'GPU'} ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="loader-check-") as folder:
        # on a CPU the reference runs beside the script (it mostly waits); on a GPU after it
        run, starving = exercise.beside(
            lambda: run_script(script, options.argv(device, Path(folder) / TIMES_FILE), Path(folder), timeout_s,
                               fork=device == "cpu"),
            lambda: reference_run(reference_path, options, device, timeout_s), together=device == "cpu")
    report = LoaderCheckReport(str(path), device, [], seconds=run.seconds, output=run.stdout,
                               wait_share=wait_share(run.times), reference_wait_share=wait_share(starving.times))
    run_check = _check_run(run, timeout_s)
    if run_check.verdict != PASS:
        report.checks = EXERCISE.not_run(run_check)
        return report
    loader = report.loader = main_loader(run.record)
    checks = [run_check, _check_output(run)]
    if loader is None:
        checks += [Check("workers", FAIL, "no torch DataLoader yielded a batch: load the batches with the "
                                          "DataLoader that make_loader() returns"),
                   *(Check(name, SKIP, "no DataLoader was used (see workers)") for name in ("pinning", "persistent"))]
    else:
        checks += [_check_workers(loader), _check_pinning(loader, run.record["copies"]), _check_persistent(loader)]
    checks.append(_check_wait_share(report.wait_share, report.reference_wait_share))
    report.checks = checks
    return report


plant_mistake = EXERCISE.plant_mistake
