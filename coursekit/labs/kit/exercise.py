"""One code exercise: a participant's script, the solution it is checked against, and what every checker does alike.

A checker of labs 04–08 (``amp_check``, ``loader_check``, ``ddp_check``, ``rules_check``, ``fsdp_check``,
``pipeline_check``) declares one :class:`ScriptExercise` and keeps only its own checks. The exercise holds:

- the **solution** (the packaged copy of the participant's script) and the **planted mistakes** the tests and the
  notebooks' demos make in it (:meth:`ScriptExercise.plant_mistake`, :meth:`ScriptExercise.planted`);
- the **runner** that records what the script did, and, for runners that serve forked children (labs 04 and
  05), its :class:`~coursekit.labs.kit.script_server.RunnerServer` (:meth:`ScriptExercise.run`);
- the **questions** each check answers (the report's HTML table) and the **run gate**: a script that did not
  run to its end gets its other checks "not checked" (:meth:`ScriptExercise.not_run`);
- the **opening steps** of every entry point, with the participant's messages: the script's path, the reference
  next to it, the device, the number of processes, the time limit;
- the **reference cache**: a reference run once per session, script version and options (:meth:`cached`).

Standard library only, like :mod:`script_check` (the checkers import torch when they need it).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from coursekit.labs.kit import script_check, script_server
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.script_check import FAIL, SKIP, Check, CheckReport, tail

T = TypeVar("T")
R = TypeVar("R")
Mistakes = Mapping[str, tuple[str, tuple[tuple[str, str], ...]]]  # name -> (what it does, (old, new) pairs)
DEVICES = ("auto", "cpu", "cuda")
NOT_RUN = "the script did not run to its end"


@dataclass
class ScriptExercise:
    """A code exercise: the solution, its runner, its checks' questions, its planted mistakes and reference cache.

    ``what`` and ``example`` name the participant's script in the messages ("give the path of your
    {what}, relative to the notebook's folder, e.g. '{example}'"); ``reference_name`` is the script it was made
    from, found next to it, and ``reference_kind``, ``reference_arg`` and ``made_from`` name that reference in
    the messages. ``server_prefix``: the runner serves forked children (see :mod:`script_server`)."""

    solution: Path
    runner: Path
    questions: Mapping[str, str]
    mistakes: Mistakes
    what: str
    example: str
    reference_name: str | None = None
    reference_kind: str = ""
    reference_arg: str = "reference"
    made_from: str = "your version"
    noun: str = "script"
    server_prefix: str | None = None
    _cache: dict[tuple, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.server = (script_server.RunnerServer(self.runner, self.server_prefix)
                       if self.server_prefix is not None else None)

    # ---------------------------------------------------------------- the opening steps

    def script(self, path: str | os.PathLike) -> Path:
        """The participant's script, resolved; a plain error where there is none."""
        script = Path(path).expanduser().resolve()
        if not script.is_file():
            raise FileNotFoundError(f"path={str(path)!r}: no such {self.noun} ({script}); give the path of your "
                                    f"{self.what}, relative to the notebook's folder, e.g. '{self.example}'")
        return script

    def scripts(self, paths: list[str | os.PathLike]) -> list[Path]:
        """The participant's scripts, resolved (:meth:`script`), for a check of several at once."""
        if isinstance(paths, (str, os.PathLike)) or not paths:
            raise ValueError(f"paths={paths!r}: give a list of one or more scripts")
        return [self.script(path) for path in paths]

    def reference(self, script: Path, given: str | os.PathLike | None) -> Path:
        """The script `script` was made from: `given`, or :attr:`reference_name` next to it."""
        path = Path(given).expanduser().resolve() if given is not None else script.with_name(self.reference_name)
        if not path.is_file():
            said = (f"{self.reference_arg}={str(given)!r}" if given is not None
                    else f"no {self.reference_name} next to {script.name}")
            raise FileNotFoundError(f"{said}: no {self.reference_kind} script at {path}; pass {self.reference_arg}= "
                                    f"the script {self.made_from} was made from")
        return path

    # ---------------------------------------------------------------- planted mistakes

    def plant_mistake(self, mistake: str, target: str | os.PathLike, solution: str | os.PathLike | None = None) -> Path:
        """Write the solution with one of the planted mistakes into `target` (a .py file); its path."""
        return script_check.plant_mistake(self.mistakes, mistake, target, solution or self.solution)

    def planted(self, mistake: str, solution: str | os.PathLike | None = None) -> str:
        """The text of the solution with one of the planted mistakes made in it (each old text found once)."""
        if mistake not in self.mistakes:
            raise ValueError(f"mistake={mistake!r}: choose one of {sorted(self.mistakes)}")
        solution = solution or self.solution
        text = Path(solution).read_text()
        unclear = [old.strip() for old, _ in self.mistakes[mistake][1] if text.count(old) != 1]
        if unclear:
            raise ValueError(f"cannot plant {mistake!r}: {unclear[0]!r} is not once in {solution}")
        for old, new in self.mistakes[mistake][1]:
            text = text.replace(old, new, 1)
        return text

    def solution_module(self) -> ModuleType:
        """The packaged solution, imported once (its model, data and serial training can be the reference)."""
        return self.cached(("solution",), lambda: load_module(self.solution, f"_{self.solution.stem}_solution"))

    # ---------------------------------------------------------------- the reference cache

    @staticmethod
    def file_key(path: Path) -> tuple:
        """A script's version: its path, modification time and size."""
        stat = path.stat()
        return str(path), stat.st_mtime_ns, stat.st_size

    def cached(self, key: tuple, compute: Callable[[], T]) -> T:
        """``compute()``'s answer for `key`, computed once per session (a failure is not kept)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    # ---------------------------------------------------------------- running (runners that serve children)

    def run(self, script: Path, args: list[str], workdir: Path, timeout_s: float,
            fork: bool = True) -> script_server.RunnerRun:
        """Run `script` with `args` in `workdir` under the runner (see :func:`script_server.run_script`)."""
        return script_server.run_script(self.server, script, args, workdir, timeout_s, fork)

    def without_runner(self, stderr: str) -> str:
        """A traceback without the frames of the runner and of runpy."""
        return script_check.without_runner(stderr, self.runner.name)

    def last_own_lines(self, stderr: str) -> str:
        """The last lines of :meth:`without_runner`, indents kept."""
        return script_check.last_own_lines(stderr, self.runner.name)

    def run_failure(self, run: script_server.RunnerRun, timeout_s: float, hang: str,
                    hints: Mapping[str, str] | None = None) -> Check | None:
        """The failed "run" check of a served run (`hang`: what a run that never ends may be waiting for; `hints`:
        the end of an error -> what it means), or None where it ran to its end."""
        if run.timed_out:
            return Check("run", FAIL, f"the script did not finish within {timeout_s:.0f} s and was stopped ({hang}). "
                                      f"Its last lines:\n{tail(run.stdout + run.stderr, 3)}")
        if run.returncode is None or run.record is None:
            return Check("run", FAIL, "the script ended without the checker's record (killed by a signal, or "
                                      f"os._exit()?); the end of its error output:\n{tail(run.stderr)}")
        if run.returncode != 0:
            said = [hint for words, hint in (hints or {}).items() if words in run.stderr]
            return Check("run", FAIL, f"the script failed with exit code {run.returncode}; the end of its error "
                                      f"output:\n{tail(self.without_runner(run.stderr))}"
                                      + "".join(f"\n→ {hint}" for hint in said))
        return None

    # ---------------------------------------------------------------- the run gate

    def not_run(self, run: Check, why: str = NOT_RUN, instead: Mapping[str, Check] | None = None) -> list[Check]:
        """The checks of a script that did not run: `run`, then each other check not checked (or its `instead`)."""
        instead = instead or {}
        return [run, *(instead.get(name) or Check(name, SKIP, why) for name in self.questions if name != "run")]


class TableReport(CheckReport):
    """A report shown in the notebook as the course's results table (lab 08's checkers), not CheckReport's."""

    def table(self) -> ResultsTable:
        return ResultsTable([{"check": f"{c.name}: {self.questions[c.name]}", "verdict": c.verdict,
                              "detail": c.detail} for c in self.checks], title=self.headline())

    def _repr_html_(self) -> str:
        return self.table().to_html()


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file `path`, imported as module `name` (not put in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the entry points' arguments

def positive_timeout(timeout_s: float) -> None:
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r}: give a positive number of seconds")


def processes(nproc: Any) -> None:
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 2:
        raise ValueError(f"nproc={nproc!r}: the checker needs at least 2 processes (an int ≥ 2)")


def known_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"device={device!r}: use one of {', '.join(DEVICES)}")


def resolve_device(device: str, gpu: bool, where: str) -> str:
    """``"auto"`` as the GPU or the CPU; ``"cuda"`` refused where no GPU is visible (`where`: "here", ...)."""
    if device == "cuda" and not gpu:
        raise ValueError(f"device='cuda': no GPU is visible {where}; use device='cpu' or 'auto'")
    return ("cuda" if gpu else "cpu") if device == "auto" else device


def beside(main: Callable[[], T], reference: Callable[[], R], together: bool) -> tuple[T, R]:
    """``main()`` and ``reference()``: at the same time (the reference in a thread) where `together`, else one
    after the other (on a GPU, so that neither slows the other)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(reference) if together else None
        result = main()
        return result, (pending.result() if pending is not None else reference())
