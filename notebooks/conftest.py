"""nbval runs of the lab notebooks: the local site (unless one is chosen), a throw-away course folder, and no
job left running when a notebook's run ends.

The integration test that runs notebooks against the CI's Slurm sets ``COURSEKIT_SITE=slurm`` (and, if
it likes, ``COURSEKIT_COURSE_DIR``) before pytest starts; both are kept. The kernel nbval starts
inherits this process's environment, so setting it here is enough. The pseudonym is ``ada`` (labs 01-09
take the one chosen in lab 00, which nbval runs separately; a set ``$COURSEKIT_PSEUDONYM`` is never written
to the user's config).

Course folders: each pytest process (the xdist controller and each worker) makes its own. xdist's workers
inherit the controller's environment, so a folder made by this conftest in a parent pytest process
(``$COURSEKIT_NBVAL_COURSE`` names it) is replaced, not shared: the jobs of a folder are then those of the
notebooks of one process, run one after another, and ending a notebook never cancels another worker's jobs.
A folder given by the caller is kept, and only jobs submitted since this process started are cancelled
(several workers given one folder may then cancel each other's jobs at a notebook's end).

Jobs (local jobs outlive their kernel by design; lab 07's sweep kept both cores busy for minutes after its
pytest run was killed). Every ending cancels what the course folder's registry still has running, through
``Job.cancel`` (local or Slurm), waits a few seconds for the local jobs' processes (the job's controller and
every process under it, recorded before cancelling), then stops those still there (SIGTERM, SIGKILL):

- a notebook ends, whether its cells passed, failed or timed out: after its last cell item, before nbval
  stops its kernel (``pytest_runtest_teardown``);
- Ctrl-C: pytest's own unwinding (``pytest_sessionfinish``, before nbval stops the kernel, then
  ``pytest_unconfigure``, before the folder is deleted);
- SIGTERM (``timeout 600 python -m pytest``): the handler cancels at once, then raises KeyboardInterrupt so
  pytest unwinds as for Ctrl-C (a second SIGTERM ends the process as before);
- SIGKILL: a detached reaper process started in ``pytest_configure`` (this file run as a script) waits for
  this process to end; unless told by a line on its pipe that the run ended normally, it cancels the jobs
  and deletes the folder this process made. It touches nothing outside that course folder.

Scripts: the notebooks open the participants' scripts beside them (``lab07_large_batch/my_rules.py``), whose only
copy is the package's; ``pytest_configure`` links them into this folder (``exercises.link_kit_scripts``,
git-ignored), so that a fresh clone runs the notebooks with no build step.

Six notebooks run in CI as a participant meets them instead (``RUN_ELSEWHERE``): 00 in a JupyterHub server
on the real Slurm, 09 as a participant's copy in another server of that hub (the instructor's baseline
posted first), 06 as a participant's copy in the browser on the real Slurm (these fail when Slurm is not
up), 04, 05 and 10 as participants' copies in the browser on the local site, their scripts completed in the
editor. A run of the whole folder on the local site leaves them to those tests rather than execute them twice
(CI's budget). Named on the command line, they run here too.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SITE_ENV = "COURSEKIT_SITE"
COURSE_DIR_ENV = "COURSEKIT_COURSE_DIR"
PSEUDONYM_ENV = "COURSEKIT_PSEUDONYM"  # labs 01-09 take the pseudonym chosen in lab 00; nbval runs each alone
MADE_ENV = "COURSEKIT_NBVAL_COURSE"  # the course folder this conftest made (inherited by xdist's workers)
# notebooks that CI runs as a participant does, not by the local nbval run -> the test that runs them
RUN_ELSEWHERE = {
    "00_cluster.ipynb": "tests/hub/test_hub_browser.py",  # in a JupyterHub server, on Slurm
    "06_data_parallel.ipynb": "tests/browser/test_participant_ddp.py",  # the participant's copy, on Slurm
    "04_mixed_precision.ipynb": "tests/browser/test_participant_exercises.py",  # the participant's copy
    "05_data_loading.ipynb": "tests/browser/test_participant_exercises.py",
    "10_resilience.ipynb": "tests/browser/test_participant_exercises.py",
    "09_race.ipynb": "tests/hub/test_hub_browser.py",  # bob's copy on the hub, the instructor's baseline
}
CANCEL_GRACE_S = 3.0  # after Job.cancel: how long the jobs' processes have to end by themselves
TERM_GRACE_S = 1.0  # then SIGTERM to those still there, and SIGKILL this long after
POLL_S = 0.1
REAPER_POLL_S = 1.0  # the reaper looks at this process this often (its pipe tells at once)
RUN_ENDED = b"ended\n"  # written to the reaper's pipe when the run ended normally: nothing left to do
REAP_COMMAND = "reap"


@dataclass
class CourseRun:
    """This process's course folder and what ends its jobs."""

    course: Path
    made: bool  # made here (deleted at the end) or given by the caller (kept)
    started: float  # jobs submitted before (a given folder's) are not this run's
    previous_env: dict[str, str | None]
    reaper: subprocess.Popen | None = None
    reaper_pipe: int | None = None  # the write end: closed without RUN_ENDED means this process died
    previous_sigterm: Any = None  # the SIGTERM handler this run replaced (restored at its end)
    sigterm_installed: bool = False
    closing: bool = False
    notebook_started: dict[Path, float] = field(default_factory=dict)

    def since(self, started: float | None = None) -> float | None:
        """Which jobs a cleanup may cancel: all of a folder made here, those submitted since then otherwise."""
        return None if self.made else (started if started is not None else self.started)


RUN_KEY = pytest.StashKey[CourseRun]()


# ---------------------------------------------------------------- cancelling a course folder's jobs


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot; tells it from a later one with the same pid), None
    when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _process_table() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, start time)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(stat.parent.name)] = (int(fields[1]), fields[19])
    return table


def _add_descendants(processes: dict[int, str]) -> None:
    """Add to ``processes`` (pid -> start time) every live process under one of them still alive."""
    table = _process_table()
    alive = [pid for pid, start in processes.items() if table.get(pid, (0, None))[1] == start]
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    while alive:
        for child in children.get(alive.pop(), []):
            if child not in processes:
                processes[child] = table[child][1]
                alive.append(child)


def _alive(processes: dict[int, str]) -> dict[int, str]:
    return {pid: start for pid, start in processes.items() if _start_time(pid) == start}


def _signal(processes: dict[int, str], signum: int) -> None:
    for pid in _alive(processes):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_gone(processes: dict[int, str], jobs: list[Any], deadline: float) -> dict[int, str]:
    """Wait until the processes have ended and the jobs say they are done, or ``deadline``; what is left."""
    while True:
        _add_descendants(processes)  # a task started meanwhile, a worker of a task
        left = _alive(processes)
        jobs[:] = [job for job in jobs if not _done(job)]
        if (not left and not jobs) or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_S)


def _done(job: Any) -> bool:
    try:
        return job.done()
    except Exception:  # noqa: BLE001 - Slurm unreachable: it is not ours to wait for any longer
        return True


def cancel_course_jobs(course: Path, since: float | None = None, grace_s: float = CANCEL_GRACE_S) -> list[str]:
    """Cancel every job of ``course``'s registry (submitted at ``since`` or later, when given) that is not done,
    wait up to ``grace_s`` for their processes, then SIGTERM and SIGKILL those still there; what went wrong."""
    registry_file = course / "jobs" / "registry.jsonl"
    if not registry_file.is_file():
        return []
    from coursekit.jobs import registry
    from coursekit.jobs.handle import Job

    problems: list[str] = []
    previous = os.environ.get(COURSE_DIR_ENV)
    os.environ[COURSE_DIR_ENV] = str(course)  # a handle records the states it learns in this course's registry
    try:
        records = [r for r in registry.merged_records(registry_file)
                   if since is None or float(r.get("submitted_at") or 0) >= since]
        jobs = [job for job in map(Job.from_record, records) if not _done(job)]
        processes: dict[int, str] = {}
        for job in jobs:  # the processes first: once cancelled, a job's controller no longer tells its tasks
            start = _start_time(job.pid) if job.scheduler == "local" and job.pid else None
            if start is not None and start == job.pid_start:
                processes[job.pid] = start
        _add_descendants(processes)
        for job in jobs:
            try:
                job.cancel()
            except Exception as error:  # noqa: BLE001 - the others are still to be cancelled
                problems.append(f"job {job.job_id} ({job.name}) could not be cancelled: {error}")
        left = _wait_gone(processes, jobs, time.monotonic() + grace_s)
        for signum in (signal.SIGTERM, signal.SIGKILL):
            if not left:
                break
            _signal(left, signum)
            left = _wait_gone(left, [], time.monotonic() + TERM_GRACE_S)
        if left:
            problems.append(f"processes of {course}'s jobs still running after SIGKILL: {sorted(left)}")
    finally:
        if previous is None:
            os.environ.pop(COURSE_DIR_ENV, None)
        else:
            os.environ[COURSE_DIR_ENV] = previous
    return problems


def _cleanup(run: CourseRun, since: float | None, when: str) -> None:
    """Cancel the run's jobs; a problem is a warning, never an error of the test that ended."""
    try:
        problems = cancel_course_jobs(run.course, since)
    except Exception as error:  # noqa: BLE001 - a broken registry must not hide the notebook's own result
        problems = [f"{type(error).__name__}: {error}"]
    for problem in problems:
        warnings.warn(pytest.PytestWarning(f"coursekit nbval {when}: {problem}"), stacklevel=2)


# ---------------------------------------------------------------- the reaper (this file run as a script)


def _start_reaper(run: CourseRun) -> None:
    """One detached process per pytest process: it outlives a SIGKILL of this one (see the module docstring)."""
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    spec = importlib.util.find_spec("coursekit")
    if spec is not None and spec.origin:  # coursekit where this process finds it, installed or not
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(spec.origin).parents[1]), env.get("PYTHONPATH"))
                                            if p)
    command = [sys.executable, str(Path(__file__).resolve()), REAP_COMMAND, str(os.getpid()),
               str(_start_time(os.getpid())), str(run.course), "made" if run.made else "given",
               repr(run.since()), str(read_end)]
    try:
        run.reaper = subprocess.Popen(command, pass_fds=(read_end,), env=env, start_new_session=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run.reaper_pipe = write_end
    except OSError as error:
        os.close(write_end)
        warnings.warn(pytest.PytestWarning(f"coursekit nbval: no reaper for {run.course} ({error}): jobs of a "
                                           "killed run will go on"), stacklevel=2)
    finally:
        os.close(read_end)


def _stop_reaper(run: CourseRun) -> None:
    if run.reaper_pipe is not None:
        with contextlib.suppress(OSError):
            os.write(run.reaper_pipe, RUN_ENDED)
        os.close(run.reaper_pipe)
        run.reaper_pipe = None
    if run.reaper is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            run.reaper.wait(REAPER_POLL_S * 2)
        run.reaper = None


def reap(pid: int, start: str, course: Path, made: bool, since: float | None, pipe: int) -> None:
    """Wait until process ``pid`` (started at ``start``) has ended; unless it said on ``pipe`` that its run
    ended normally, cancel the jobs of ``course`` and delete it if that process made it."""
    heard = b""
    while True:
        ready, _, _ = select.select([pipe], [], [], REAPER_POLL_S)
        if ready:
            data = os.read(pipe, 64)
            heard += data
            if RUN_ENDED in heard:
                return
            if not data:  # the write end closed without a word: the process died
                break
        if _start_time(pid) != start:
            break
    try:
        cancel_course_jobs(course, since)
    finally:
        if made:
            shutil.rmtree(course, ignore_errors=True)


# ---------------------------------------------------------------- pytest's hooks


def _on_sigterm(run: CourseRun) -> Any:
    def handler(signum: int, frame: object) -> None:
        if run.closing:  # pytest is already unwinding (a first SIGTERM, Ctrl-C, the end of the run): die as
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # without this handler; the reaper does the rest
            os.kill(os.getpid(), signal.SIGTERM)
            return
        run.closing = True
        _cleanup(run, run.since(), "SIGTERM")
        raise KeyboardInterrupt("SIGTERM: the run is stopped; its notebooks' jobs were cancelled")
    return handler


def pytest_configure(config: pytest.Config) -> None:
    from coursekit.labs.kit.exercises import link_kit_scripts

    link_kit_scripts(Path(__file__).resolve().parent)  # the solved scripts the notebooks open, from the package
    os.environ.setdefault(SITE_ENV, "local")
    os.environ.setdefault(PSEUDONYM_ENV, "ada")
    previous = {name: os.environ.get(name) for name in (COURSE_DIR_ENV, MADE_ENV)}
    given = os.environ.get(COURSE_DIR_ENV)
    if given and given != os.environ.get(MADE_ENV):
        run = CourseRun(Path(given), made=False, started=time.time(), previous_env=previous)
    else:  # none, or a parent pytest process's (xdist's controller): this process's own
        course = tempfile.mkdtemp(prefix="coursekit-nbval-")
        os.environ[COURSE_DIR_ENV] = os.environ[MADE_ENV] = course
        run = CourseRun(Path(course), made=True, started=time.time(), previous_env=previous)
    config.stash[RUN_KEY] = run
    _start_reaper(run)
    with contextlib.suppress(ValueError):  # signal handlers: main thread only (the reaper still covers it)
        run.previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm(run))
        run.sigterm_installed = True


def _ends_notebook(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether ``item`` is the last cell item of its notebook (a worker runs several, one after another)."""
    return item.path.suffix == ".ipynb" and (nextitem is None or nextitem.path != item.path)


def pytest_runtest_setup(item: pytest.Item) -> None:
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None and item.path.suffix == ".ipynb":
        run.notebook_started.setdefault(item.path, time.time())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """The end of a notebook, whichever way its cells ended: its jobs, before nbval stops the kernel."""
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None and _ends_notebook(item, nextitem):
        _cleanup(run, run.since(run.notebook_started.pop(item.path, None)), f"end of {item.path.name}")
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """An interrupted run (Ctrl-C, SIGTERM) skips the teardown above: the jobs, before nbval stops kernels."""
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.closing = True
        _cleanup(run, run.since(), "end of the session")
    return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    run.closing = True
    _cleanup(run, run.since(), "end of the run")  # before the folder goes: a job must not outlive it
    if run.sigterm_installed:
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGTERM, run.previous_sigterm if run.previous_sigterm is not None else signal.SIG_DFL)
    if run.made:
        shutil.rmtree(run.course, ignore_errors=True)
    for name, value in run.previous_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _stop_reaper(run)
    del config.stash[RUN_KEY]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The notebooks of RUN_ELSEWHERE are left to their tests, unless this run is one of them or names them."""
    if collection_path.name not in RUN_ELSEWHERE or os.environ.get(SITE_ENV) != "local":
        return None
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return None if collection_path.resolve() in named else True


if __name__ == "__main__" and sys.argv[1:2] == [REAP_COMMAND]:
    _pid, _start, _course, _made, _since, _pipe = sys.argv[2:8]
    reap(int(_pid), _start, Path(_course), _made == "made", None if _since == "None" else float(_since), int(_pipe))
