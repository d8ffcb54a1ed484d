"""The base of the checkers' recording runners: the served ones and the ranks' ones.

The served runners (``amp_runner.py``, ``loader_runner.py``) fork a child per run:

    python RUNNER                  # {"cuda": <bool>}, then one JSON request per line on stdin;
                                   # answers {"pid": <child>} per line
    python RUNNER --run REQUEST    # one run, in this process (GPU runs: a forked child and CUDA do not mix)

A runner defines what it records, ``new_record()`` and ``install(record)``, and hands them to :func:`main`;
it loads this file by its path (``runpy.run_path(BASE)``), not as ``coursekit``'s module: a runner imports
nothing from coursekit, and starts with torch alone. Importing torch costs seconds of CPU; a forked child
starts at once, so the checker can run the reference and several scripts quickly. A request names the
script, its arguments, a work folder (and may name environment variables). The child leads its own session
(the checker stops it, and whatever it started, with killpg), writes its output to ``stdout.txt`` and
``stderr.txt`` in the work folder and runs the script as ``python SCRIPT ARGS`` would (``__main__``, its
folder on ``sys.path``), with the runner's recorders around it. It writes ``record.json`` and ``exit.txt``
when the script ends, also when it fails. Children are reaped by the system (SIGCHLD is ignored): the
checker polls for the child's end (see ``script_server.py``). The checkers leave this file's frames out of
the participant's traceback (``script_check.RUNNER_BASE``).

The ranks' runners (``ddp_runner.py``, ``fsdp_runner.py``) run the script in their own process, as one rank
(:func:`run_as_main`), and leave without the interpreter's teardown (:func:`leave`). This file imports torch
only when a served runner's child or server needs it: a rank's runner starts without it.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

STDOUT, STDERR, RECORD, EXIT = "stdout.txt", "stderr.txt", "record.json", "exit.txt"
NewRecord = Callable[[], dict[str, Any]]
Install = Callable[[dict[str, Any]], None]


def child(request: dict[str, Any], new_record: NewRecord, install: Install) -> int:
    """Run the script of `request` in this (forked) process with the recorders installed; its exit code."""
    import torch

    workdir = Path(request["workdir"])
    os.chdir(workdir)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the server's request pipe
    for fd, name in ((1, STDOUT), (2, STDERR)):
        os.dup2(os.open(workdir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.environ.update(request.get("env", {}))
    torch.set_num_threads(int(request.get("threads", 1)))
    record = new_record()
    install(record)
    script = str(Path(request["script"]).resolve())
    sys.argv = [script, *request["args"]]
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the script's own error: shown to the participant
        traceback.print_exc()
        code = 1
    finally:
        record["cuda"] = torch.cuda.is_initialized()
        (workdir / RECORD).write_text(json.dumps(record))
        sys.stdout.flush()
        sys.stderr.flush()
        (workdir / EXIT).write_text(str(code))
    return code


def serve(new_record: NewRecord, install: Install) -> None:
    """Say whether a GPU is visible (without starting CUDA: the checker's script_server expects this first
    line), then fork a child per request line until stdin closes."""
    import torch

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the system reaps the children
    print(json.dumps({"cuda": torch.cuda.is_available()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the script reaps its own children (DataLoader workers)
                code = child(request, new_record, install)
            finally:
                os._exit(code)
        print(json.dumps({"pid": pid}), flush=True)


def main(new_record: NewRecord, install: Install) -> None:
    """A runner's ``__main__`` (its own folder already left ``sys.path``: the scripts' folders take its place)."""
    if sys.argv[1:2] == ["--run"]:  # one run in this process (on a GPU: CUDA and fork do not mix)
        sys.exit(child(json.loads(sys.argv[2]), new_record, install))
    serve(new_record, install)


def run_as_main(script: str, args: list[str]) -> None:
    """Run `script` as ``python SCRIPT ARGS`` would, in the runner's place (its folder first on ``sys.path``); an
    exit with code 0 or None returns, any other failure is raised."""
    sys.argv = [script, *args]
    sys.path[0] = str(Path(script).resolve().parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise


def leave() -> NoReturn:
    """The scripts succeeded: leave without the interpreter's teardown, where gloo's worker threads can still free
    a collective's tensors and abort the process (SIGABRT, "terminate called without an active exception"; seen
    with torch 2.14 on CPU) - a torch problem the participant cannot fix."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
