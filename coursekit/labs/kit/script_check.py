"""What the code-exercise checkers share: a check's verdict, the report as text and table, running scripts.

The checkers of labs 04, 06, 07 and 08 (``amp_check``, ``ddp_check``, ``rules_check``, ``fsdp_check``) run a
participant's script in processes of their own and say, check by check, what is wrong. Each keeps its
questions, its headline and what it measured; this module holds what they do alike:

- the verdicts (:data:`PASS`, :data:`FAIL`, :data:`SKIP`), a :class:`Check` and :class:`CheckReport`, the mixin
  that gives a report dataclass ``ok``, ``failed``, ``report[name]`` and its text and HTML tables (the
  notebooks store these outputs: the format must not change);
- processes: an environment without launcher variables on the CPU, the ranks started with their output in
  files, the wait with a time limit that stops every rank soon after the first failure, stopping a process
  group, free ports, and the participant's own last error lines (the runner's and runpy's frames left out);
- :func:`plant_mistake`: a solution with one of the mistakes the tests and demos plant in it.

Standard library only: the checkers import torch when they need it, this module never does.
"""

from __future__ import annotations

import contextlib
import html
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

PASS, FAIL, SKIP = "pass", "FAIL", "not checked"
VERDICT_COLORS = {PASS: "#1a7f37", FAIL: "#cf222e", SKIP: "#6e7781"}
VERDICT_WIDTH = len(SKIP)  # the verdict column of the text table
COLUMN_GAP = "  "
STOP_GRACE_S = 3.0  # a stopped process gets this long after SIGTERM, then SIGKILL
CRASH_GRACE_S = 10.0  # once a rank has failed, the others get this long to end before they are stopped
POLL_S = 0.1
TAIL_LINES = 12
LAUNCH_PREFIXES = ("SLURM_", "SUBMITIT_", "TORCHELASTIC_", "GROUP_", "ROLE_")
LAUNCH_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# a checked script runs on the CPU with one thread (the machine runs several at once), its output unbuffered
CPU_ONE_THREAD = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
RUNPY = "runpy"  # frames of runpy.run_path, which the runners call, are not the participant's
RUNNER_BASE = "script_runner.py"  # frames of the served runners' shared base (kit/script_runner.py), neither


# ---------------------------------------------------------------- verdicts and reports

@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  # PASS | FAIL | SKIP
    detail: str


class CheckReport:
    """Mixin for a checker's report dataclass (declare it ``@dataclass(repr=False)``, so that ``repr`` stays the
    text table, and give it a ``checks: list[Check]`` field); it sets ``questions`` and writes ``headline()``."""

    checks: list[Check]
    questions: ClassVar[Mapping[str, str]] = {}  # check name -> the question it answers, for the HTML table
    name_width: ClassVar[int | None] = None  # the name column's width in the text; None: the longest name's

    @property
    def ok(self) -> bool:
        return all(c.verdict == PASS for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.verdict == FAIL]

    def __getitem__(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r}: the checks are {[c.name for c in self.checks]}")

    def headline(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must say what it checked in headline()")

    def summary(self) -> str:
        """The end of the headline: all pass, or how many problems."""
        problems = len(self.failed)
        return "all checks pass" if self.ok else f"{problems} problem{'s' * (problems != 1)}"

    def check_lines(self) -> list[str]:
        """One line per check (verdict, name, detail); a detail's further lines stand under its first."""
        width = self.name_width or max(len(c.name) for c in self.checks)
        indent = "\n" + " " * (2 * len(COLUMN_GAP) + VERDICT_WIDTH + width + len(COLUMN_GAP))
        return [f"{COLUMN_GAP}{c.verdict:<{VERDICT_WIDTH}}{COLUMN_GAP}{c.name:<{width}}{COLUMN_GAP}"
                f"{c.detail.replace(chr(10), indent)}" for c in self.checks]

    def __str__(self) -> str:
        return "\n".join([self.headline(), *self.check_lines()])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='text-align:left'>{html.escape(c.name)}: {html.escape(self.questions[c.name])}</td>"
            f"<td style='color:{VERDICT_COLORS[c.verdict]};font-weight:bold'>{html.escape(c.verdict)}</td>"
            f"<td style='text-align:left;white-space:pre-wrap;font-family:monospace'>{html.escape(c.detail)}</td></tr>"
            for c in self.checks)
        return (f"<p><b>{html.escape(self.headline())}</b></p><table><thead><tr><th>check</th><th>verdict</th>"
                f"<th>detail</th></tr></thead><tbody>{rows}</tbody></table>")


# ---------------------------------------------------------------- what a script left behind

def read_text(path: Path) -> str:
    """A file a script wrote, or "" where it wrote none."""
    return path.read_text(errors="replace") if path.is_file() else ""


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` non-blank lines of `text`."""
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:]) if kept else "(nothing)"


def _participant_lines(stderr: str, runner_name: str) -> Iterator[str]:
    """The lines of a traceback outside the frames of the checker's runner (file `runner_name`, and the served
    runners' base) and of runpy."""
    skipping = False
    for line in stderr.splitlines():
        if line.startswith("  File "):
            skipping = runner_name in line or RUNPY in line or RUNNER_BASE in line
        elif skipping and not line.startswith("    "):
            skipping = False
        if not skipping:
            yield line


def without_runner(stderr: str, runner_name: str) -> str:
    """A traceback without the frames of the checker's runner and of runpy: the participant's own frames."""
    return "\n".join(_participant_lines(stderr, runner_name))


def last_own_lines(stderr: str, runner_name: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` non-blank lines of :func:`without_runner`, each as it was (indents kept)."""
    kept = [line for line in _participant_lines(stderr, runner_name) if line.strip()]
    return "\n".join(kept[-lines:]) if kept else "(nothing)"


# ---------------------------------------------------------------- processes

def launcher_free_env() -> dict[str, str]:
    """This process's environment without launcher variables (a checker runs inside a Slurm job too), on the
    CPU with one thread per process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_PREFIXES) and k not in LAUNCH_NAMES}
    env.update(CPU_ONE_THREAD)
    return env


def rank_env(rank: int, nproc: int) -> dict[str, str]:
    """:func:`launcher_free_env` with torchrun's variables for `rank` of `nproc` on this machine (the caller
    adds MASTER_PORT)."""
    env = launcher_free_env()
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
               MASTER_ADDR="127.0.0.1")
    return env


def rank_output(workdir: Path, rank: int, stream: str) -> Path:
    """Where :func:`start_ranks` writes `rank`'s ``"out"`` or ``"err"`` stream."""
    return workdir / f"rank{rank}.{stream}"


def start_ranks(command: list[str], nproc: int, workdir: Path,
                env_of: Callable[[int], dict[str, str]]) -> list[subprocess.Popen]:
    """Start `command` as ranks 0 ... nproc-1 in `workdir`, rank r with ``env_of(r)``, each leading its own
    session (so that :func:`stop_group` stops what it starts), its output in :func:`rank_output`'s files."""
    processes: list[subprocess.Popen] = []
    try:
        for rank in range(nproc):
            with open(rank_output(workdir, rank, "out"), "wb") as out, \
                    open(rank_output(workdir, rank, "err"), "wb") as err:
                processes.append(subprocess.Popen(command, cwd=workdir, env=env_of(rank), stdout=out, stderr=err,
                                                  stdin=subprocess.DEVNULL, start_new_session=True))
    except BaseException:  # the ranks started so far would wait for the others forever
        for process in processes:
            stop_group(process)
        raise
    return processes


def stop_group(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a process this module's caller started, and its children (it leads its own session)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def wait_for(processes: list[subprocess.Popen], deadline: float, *, crash_grace_s: float = CRASH_GRACE_S,
             poll_s: float = POLL_S) -> bool:
    """Wait until every process has ended, the clock (``time.monotonic``) passes `deadline`, or `crash_grace_s`
    after the first failure (the others would wait for it forever); they are left running. True: time ran out."""
    failed_at = None
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in processes):
            failed_at = now
        if now > deadline:
            return True
        if failed_at is not None and now - failed_at > crash_grace_s:
            return False
        time.sleep(poll_s)
    return False


def watch(processes: list[subprocess.Popen], timeout_s: float, *, crash_grace_s: float = CRASH_GRACE_S,
          poll_s: float = POLL_S) -> bool:
    """:func:`wait_for` at most `timeout_s` from now, then stop whatever still runs. True: time ran out."""
    try:
        return wait_for(processes, time.monotonic() + timeout_s, crash_grace_s=crash_grace_s, poll_s=poll_s)
    finally:
        for process in processes:
            stop_group(process)


# ---------------------------------------------------------------- planted mistakes

def plant_mistake(mistakes: Mapping[str, tuple[str, tuple[tuple[str, str], ...]]], mistake: str,
                  target: str | os.PathLike, solution: str | os.PathLike) -> Path:
    """Write `solution` with ``mistakes[mistake]`` (what it does, its (old, new) replacements, each made once,
    in turn) into `target` (a .py file); its path."""
    if mistake not in mistakes:
        raise ValueError(f"mistake={mistake!r}: choose one of {sorted(mistakes)}")
    text = Path(solution).read_text()
    for old, new in mistakes[mistake][1]:
        if old not in text:
            raise ValueError(f"cannot plant {mistake!r}: {old.strip()!r} is not in {solution}")
        text = text.replace(old, new, 1)
    path = Path(target)
    path.write_text(text)
    return path
