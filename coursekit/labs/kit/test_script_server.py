"""The runner server of the lab 04 and 05 checkers, with a stand-in runner that speaks the same protocol
without torch: forked and own-process runs, the timeout, a runner that does not start, the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coursekit.labs.kit import script_server

# the protocol of amp_runner.py and loader_runner.py, without their recorders
STAND_IN_RUNNER = """
import json, os, runpy, signal, sys
from pathlib import Path

def child(request):
    workdir = Path(request["workdir"])
    os.chdir(workdir)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        os.dup2(os.open(workdir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = [request["script"], *request["args"]]
    code = 0
    try:
        runpy.run_path(request["script"], run_name="__main__")
    except SystemExit as done:
        code = done.code or 0
    (workdir / "record.json").write_text(json.dumps({"pid": os.getpid()}))
    sys.stdout.flush()
    (workdir / "exit.txt").write_text(str(code))
    return code

if sys.argv[1:2] == ["--run"]:
    sys.exit(child(json.loads(sys.argv[2])))
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
print(json.dumps({"cuda": False}), flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os._exit(child(json.loads(line)))
    print(json.dumps({"pid": pid}), flush=True)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[script_server.RunnerServer]:
    runner = tmp_path / "runner.py"
    runner.write_text(STAND_IN_RUNNER)
    started = script_server.RunnerServer(runner, "script-server-test-")
    yield started
    started.stop()


def test_a_run_forked_from_the_server_and_one_of_its_own_read_alike(server, tmp_path: Path):
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint('args', *sys.argv[1:])\nprint('oops', file=sys.stderr)\nsys.exit(3)\n")
    assert not server.sees_gpu()
    for fork in (True, False):
        run = script_server.run_script(server, script, ["a", "b"], tmp_path / f"fork-{fork}", 30.0, fork=fork)
        assert (run.returncode, run.timed_out, run.stdout, run.stderr) == (3, False, "args a b\n", "oops\n")
        assert run.record is not None and run.seconds < 30.0
    assert server.process is not None and server.log is not None
    server.stop()
    assert server.process is None and server.log is None


def test_a_hanging_script_is_stopped_at_the_timeout(server, tmp_path: Path):
    script = tmp_path / "hang.py"
    script.write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n")
    run = script_server.run_script(server, script, [], tmp_path / "work", 0.5)
    assert run.timed_out and run.returncode is None and run.record is None
    assert run.seconds < 0.5 + 2 * script_server.STOP_GRACE_S
    assert not script_server.alive(int(run.stdout))  # the child is gone; the server serves on
    assert server.process is not None and server.process.poll() is None


def test_a_runner_that_does_not_start_shows_its_error(tmp_path: Path):
    runner = tmp_path / "broken.py"
    runner.write_text("import sys\nsys.exit('no module named torch, say')\n")
    server = script_server.RunnerServer(runner, "script-server-test-")
    with pytest.raises(RuntimeError, match="did not start: no module named torch, say"):
        server.sees_gpu()
    assert server.process is None and server.log is None


def test_the_runner_sees_the_gpu_but_no_launcher(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    env = script_server.runner_env()
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "RANK" not in env and "SLURM_JOB_ID" not in env
    assert env["OMP_NUM_THREADS"] == "1" and env["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert "CUDA_VISIBLE_DEVICES" not in script_server.runner_env()  # unset: every GPU, as for the kernel
