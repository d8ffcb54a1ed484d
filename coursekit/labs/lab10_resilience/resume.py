"""A job given less time than it needs: the site signals it before its time limit, it checkpoints, is requeued and
resumes; the notebook proves the resumed run equals the uninterrupted one.

``start_resume_runs(script, ...)`` submits the resumable script (``lab10_resilience/train_resume.py``) twice, with
``coursekit.submit_jobs``: once with a short ``time_max`` and ``requeue=True`` (the job to be signalled), once with
time to spare (the uninterrupted reference). It returns at once: a notebook can go on while they run.

Who sends the pre-timeout signal (SIGUSR2, what submitit asks Slurm for):

- ``signal_after_s=None``: the site's own clock. On Slurm, ``--signal=USR2@<delay>`` (``time_max`` minus the
  signal delay, or up to 60 s earlier: Slurm's resolution of such events). On the local site, submitit's controller sends it
  ``LOCAL_SIGNAL_DELAY_S`` (30 s) before ``time_max``: a 1-minute job is signalled 30 s after its start;
  coursekit's ``signal_delay_s`` does not reach the local controller, so 30 s is the soonest.
- ``signal_after_s=T``: :func:`follow_runs` sends it itself T seconds after the job's first step, to the processes
  the site's clock would signal (local: the job's tasks, as the controller does; Slurm: ``scancel --signal=USR2``,
  as tests/integration does). The requeue that follows is the site's own either way.

Then submitit's handler in the job's task requeues it (Slurm: ``scontrol requeue``; local: exit code 144, and the
controller starts the task again); the script, told to stop (SIGUSR2 on Slurm, the SIGTERM of the task's end on the
local site), saves at the end of its step and exits; the requeued start resumes from that checkpoint.
:func:`follow_runs` waits for both jobs; :func:`compare_runs` compares them component by component (weights,
optimizer state, scheduler, random state, data order) and :func:`check_resume_claims` checks the lab's two claims.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coursekit import slurm_cli
from coursekit.jobs import local_process
from coursekit.jobs.handle import Job
from coursekit.jobs.submit import submit_jobs
from coursekit.labs.kit.claims import ClaimResult, check_claim
from coursekit.labs.kit.progress import JobsBar
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab10_resilience.records import (
    CHECKPOINT,
    WEIGHT_TOLERANCE,
    checkpoint_parts,
    load_checkpoint,
    max_abs_diff,
    read_steps,
    starts,
    step_records,
)
from coursekit.sites import load_site

LOCAL_SIGNAL_DELAY_S = 30  # submitit's LocalExecutor signals this long before time_max (its signal_delay_s default)
REQUEUED_MARK = "Requeued job"  # what submitit logs in the job's output when it requeues it
STARTED_MARK = "Starting with JobEnvironment"  # what submitit logs at each start of a job
POLL_S = 0.5
REFERENCE_TIME_MAX = "00:10:00"  # the uninterrupted reference: time to spare
# The claim's tolerance: max |Δ| of the weights and optimizer state, per device (resume_check.WEIGHT_TOLERANCE). On a
# CPU a right resume is exact (measured 0.0): the same operations in the same order give the same bits. On a GPU the
# MLP's kernels are deterministic and dropout's masks come from the restored CUDA generator: 0.0 measured on an H200
# as well; 1e-5 leaves room for kernels that add in another order, while a resume that forgets the sampler's epoch
# or the scheduler moves the weights by 0.3 or more (test_resume_check.py, test_resume.py).
TOLERANCE = WEIGHT_TOLERANCE


@dataclass
class ResumeRuns:
    """The two submitted jobs and their output folders."""

    interrupted: Job  # short time limit, requeue=True
    reference: Job  # uninterrupted
    interrupted_out: Path
    reference_out: Path
    device: str
    signal_after_s: float | None
    signalled_at: float | None = None  # time.time() when follow_runs sent the signal itself
    states: dict[str, str] = field(default_factory=dict)


def _command(script: Path, out: Path, steps: int, checkpoint_every: int, step_time: float, seed: int, device: str,
             extra: list[str]) -> str:
    return " ".join([str(script), "--out", str(out), "--steps", str(steps), "--checkpoint-every",
                     str(checkpoint_every), "--seed", str(seed), "--device", device,
                     *(["--step-time", repr(step_time)] if step_time else []), *extra])


def start_resume_runs(script: str | os.PathLike, *, steps: int, checkpoint_every: int, time_max: str | int,
                      step_time: float = 0.0, signal_after_s: float | None = None, device: str = "cpu",
                      seed: int = 0, extra_args: list[str] | None = None, name: str = "resume",
                      site: str | None = None, env: dict[str, str] | None = None,
                      signal_delay_s: int | None = None) -> ResumeRuns:
    """Submit the resumable `script` with `time_max` and ``requeue=True``, and the same run uninterrupted; returns
    at once. `step_time`: each step lasts at least this long (the interrupted job only: a larger job's pace, so
    that it needs more time than the site's clock gives it before its signal). `signal_delay_s`: how long before
    `time_max` the site's clock signals (``submit_jobs``'s; None: the site's default)."""
    path = Path(script).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"script={str(script)!r}: no such script ({path}); give the path of your resumable "
                                "script, relative to the notebook's folder, e.g. 'lab10_resilience/train_resume.py'")
    for value, parameter in ((steps, "steps"), (checkpoint_every, "checkpoint_every")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{parameter}={value!r}: give a whole number ≥ 1")
    if signal_after_s is not None and not signal_after_s > 0:
        raise ValueError(f"signal_after_s={signal_after_s!r}: give a positive number of seconds, or None for the "
                         "site's own clock")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r}: use 'cpu' or 'cuda'")
    the_site = load_site(site)
    root = the_site.paths().run_root(name)
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="run-", dir=root))  # fresh: a checkpoint from an earlier run is not resumed
    interrupted_out, reference_out = folder / "interrupted", folder / "uninterrupted"
    extra = list(extra_args or [])
    interrupted = submit_jobs(
        _command(path, interrupted_out, steps, checkpoint_every, step_time, seed, device, extra),
        name=name, time_max=time_max, requeue=True, site=site, env=env, signal_delay_s=signal_delay_s)[0]
    reference = submit_jobs(_command(path, reference_out, steps, checkpoint_every, 0.0, seed, device, extra),
                                      name=f"{name}-reference", time_max=REFERENCE_TIME_MAX, site=site, env=env)[0]
    return ResumeRuns(interrupted, reference, interrupted_out, reference_out, device, signal_after_s)


def signal_job(job: Job, signum: int = signal.SIGUSR2) -> list[int]:
    """Send `signum` to the job's tasks, as the site's clock does before the time limit: on Slurm ``scancel
    --signal`` (every process of its steps), on the local site the controller's children (its tasks, as
    submitit's controller forwards it). The local tasks signalled ([] on Slurm)."""
    if job.scheduler != "local":
        slurm_cli.scancel([job.job_id], signal=signal.Signals(signum).name.removeprefix("SIG"))
        return []
    tasks = local_process.child_pids(job.pid)
    for pid in tasks:
        os.kill(pid, signum)
    return tasks


def _first_step_logged(out: Path) -> bool:
    return any(step_records(read_steps(out)))


def follow_runs(runs: ResumeRuns, timeout_s: float) -> dict[str, str]:
    """Wait for both jobs (sending the signal `signal_after_s` after the interrupted job's first step, where asked);
    their final states. TimeoutError when they are not done within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    first_step_at: float | None = None
    with JobsBar(2, "resume jobs") as bar:  # a wait of minutes on a GPU: never silent
        while not (runs.interrupted.done() and runs.reference.done()):
            bar.done(int(runs.interrupted.done()) + int(runs.reference.done()))
            if time.monotonic() > deadline:
                raise TimeoutError(f"the resume jobs ({runs.interrupted.job_id}, {runs.reference.job_id}) did not "
                                   f"end within {timeout_s:.0f} s: states {runs.interrupted.state}, "
                                   f"{runs.reference.state}")
            if runs.signal_after_s is not None and runs.signalled_at is None:
                if first_step_at is None and _first_step_logged(runs.interrupted_out):
                    first_step_at = time.monotonic()
                if first_step_at is not None and time.monotonic() - first_step_at >= runs.signal_after_s:
                    signal_job(runs.interrupted)
                    runs.signalled_at = time.time()
            time.sleep(POLL_S)
        bar.done(2)
    runs.states = {"interrupted": runs.interrupted.wait(timeout_s), "reference": runs.reference.wait(timeout_s)}
    return runs.states


# ---------------------------------------------------------------- the comparison

@dataclass
class ResumeComparison:
    """The resumed run against the uninterrupted one, and what the interrupted job's log and records show."""

    table: ResultsTable  # one row per component: max |Δ| and whether it is within the tolerance
    device: str
    tolerance: float
    starts: int  # how many times the interrupted run started (steps.jsonl)
    stop_signals: list[str]  # the signals that stopped its earlier starts
    resumed_at: list[int]  # the step each later start resumed at
    requeued_in_log: int  # how many times the job's log says submitit requeued it
    started_in_log: int  # how many times the job's log says submitit started it
    state: str  # the interrupted job's final state
    reference_state: str
    steps: int  # steps the resumed run trained in all

    @property
    def worst(self) -> float:
        """The largest difference over every component (inf where one could not be compared)."""
        return max((row["max_abs_diff"] for row in self.table), default=float("inf"))

    def _repr_html_(self) -> str:
        return self.table.to_html()

    def __str__(self) -> str:
        return str(self.table)

    __repr__ = __str__  # a plain-text front end shows the table, not the dataclass's fields


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for key in sorted(value, key=str) for t in _tensors(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _tensor_diff(a: Any, b: Any) -> float:
    """max |a - b| over the tensors of two nested states (inf where their shapes differ)."""
    left, right = _tensors(a), _tensors(b)
    if len(left) != len(right) or any(x.shape != y.shape for x, y in zip(left, right, strict=True)):
        return float("inf")
    return max((float((x.double() - y.double()).abs().max()) for x, y in zip(left, right, strict=True)
                if x.numel()), default=0.0)


def _scalars_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """max |a - b| over the numbers of two schedulers' states (inf where a key or a length differs)."""
    worst = 0.0
    for key in set(a) | set(b):
        x, y = a.get(key), b.get(key)
        xs, ys = (x if isinstance(x, list) else [x]), (y if isinstance(y, list) else [y])
        numbers = [(u, v) for u, v in zip(xs, ys, strict=False) if isinstance(u, (int, float)) and isinstance(v, (int, float))]
        if len(xs) != len(ys):
            return float("inf")
        worst = max([worst, *(abs(float(u) - float(v)) for u, v in numbers)])
    return worst


def _last_per_step(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The record of each step, the last one where a step ran twice (the steps after the last checkpoint)."""
    return {r["step"]: r for r in step_records(records)}


def compare_folders(interrupted_out: Path, reference_out: Path, device: str) -> ResultsTable:
    """One row per component of the two runs' final checkpoints and step records: max |Δ| and whether it is within
    the device's tolerance (scheduler, random state and data order must be equal)."""
    tolerance = TOLERANCE[device]
    resumed, _ = load_checkpoint(interrupted_out / CHECKPOINT)
    reference, _ = load_checkpoint(reference_out / CHECKPOINT)
    mine, theirs = checkpoint_parts(resumed), checkpoint_parts(reference)
    inf = float("inf")

    def part(name: str) -> tuple[Any, Any]:
        return mine.get(name), theirs.get(name)

    model_diff = max_abs_diff(*part("model")) if None not in part("model") else None
    optimizer = part("optimizer")
    optimizer_diff = (_tensor_diff(optimizer[0]["state"], optimizer[1]["state"]) if None not in optimizer else inf)
    if None not in optimizer:  # the learning rate the optimizer holds is part of its state too
        lrs = [(g["lr"], h["lr"]) for g, h in zip(optimizer[0]["param_groups"], optimizer[1]["param_groups"],
                                                   strict=False)]
        optimizer_diff = max([optimizer_diff, *(abs(x - y) for x, y in lrs)])
    scheduler = part("scheduler")
    scheduler_diff = _scalars_diff(*scheduler) if None not in scheduler else inf
    rng = part("rng")
    rng_diff = _tensor_diff(rng[0], rng[1]) if None not in rng else inf
    ours, others = _last_per_step(read_steps(interrupted_out)), _last_per_step(read_steps(reference_out))
    differing = [s for s in others if ours.get(s, {}).get("batch") != others[s].get("batch")]
    extra = [s for s in ours if s not in others]
    rows = [
        ("weights", "the model's parameters", inf if model_diff is None else model_diff, tolerance),
        ("optimizer state", "momentum buffers and learning rate", optimizer_diff, tolerance),
        ("scheduler", "last step and learning rates", scheduler_diff, 0.0),
        ("random state", "the generators' bytes", rng_diff, 0.0),
        ("data order", f"steps whose batch differs (of {len(others)})", float(len(differing) + len(extra)), 0.0),
    ]
    return ResultsTable([{"component": name, "compared": what, "max_abs_diff": diff, "tolerance": allowed,
                          "equal": diff <= allowed} for name, what, diff, allowed in rows],
                        title=f"the resumed run against the uninterrupted one ({device})")


def _interrupted_log(runs: ResumeRuns) -> str:
    path = runs.interrupted.stdout
    return path.read_text(errors="replace") if path.is_file() else ""


def requeue_lines(runs: ResumeRuns) -> list[str]:
    """The lines of the interrupted job's log where submitit started it and requeued it (submitit's own lines,
    which ``job.tail`` leaves out)."""
    return [line for line in _interrupted_log(runs).splitlines() if REQUEUED_MARK in line or STARTED_MARK in line]


def compare_runs(runs: ResumeRuns) -> ResumeComparison:
    """Compare the two finished jobs: :func:`compare_folders`, and what the interrupted job's log and records show."""
    records = read_steps(runs.interrupted_out)
    by_start = starts(records)
    stops = [r.get("signal", "?") for r in records if r.get("event") == "stopped"]
    log = _interrupted_log(runs)
    return ResumeComparison(
        table=compare_folders(runs.interrupted_out, runs.reference_out, runs.device), device=runs.device,
        tolerance=TOLERANCE[runs.device], starts=len(by_start), stop_signals=stops,
        resumed_at=[s[0].get("resumed_at", 0) for s in by_start[1:]], requeued_in_log=log.count(REQUEUED_MARK),
        started_in_log=log.count(STARTED_MARK), state=runs.states.get("interrupted", runs.interrupted.state),
        reference_state=runs.states.get("reference", runs.reference.state),
        steps=len(_last_per_step(records)))


def check_resume_claims(comparison: ResumeComparison) -> list[ClaimResult]:
    """The lab's two claims on the comparison (each raises AssertionError when it does not hold)."""
    c = comparison
    requeued = (c.requeued_in_log >= 1 and c.started_in_log >= 2 and c.starts >= 2 and bool(c.stop_signals)
                and c.state == "COMPLETED" and all(at > 0 for at in c.resumed_at))
    first = check_claim(
        "the job was signalled and requeued: its log shows the requeue, and it started twice or more",
        requeued,
        f"log: {c.requeued_in_log} requeue(s), {c.started_in_log} start(s); the script started {c.starts} times, "
        f"stopped by {', '.join(c.stop_signals) or 'nothing'}, resumed at step(s) "
        f"{', '.join(map(str, c.resumed_at)) or '-'}; final state {c.state}")
    failing = [row["component"] for row in c.table if not row["equal"]]
    shown = ", ".join(f"{row['component']} {row['max_abs_diff']:.3g}" for row in c.table)
    second = check_claim(
        f"the resumed run equals the uninterrupted one within {c.tolerance:g} (weights and optimizer state; "
        "scheduler, random state and data order exactly)",
        not failing and c.reference_state == "COMPLETED",
        f"max |Δ|: {shown}" + (f"; differ: {', '.join(failing)}" if failing else "")
        + f"; tolerance {c.tolerance:g}: " + ("on a CPU the same operations in the same order give the same bits"
                                              if c.device == "cpu" else "GPU kernels may add in another order"))
    return [first, second]
