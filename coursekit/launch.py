"""Who launched this process, and failing fast when its peers cannot run: torch-free.

Launchers understood, in this order of precedence:

- the ``env://`` variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR/PORT``),
  set by ``torchrun`` for the processes it starts, and by coursekit's task wrapper for every srun or submitit
  task (``coursekit.jobs.tasks``). The launcher is named by what only it sets: ``torchrun`` by its
  ``TORCHELASTIC_*`` variables, then submitit's local executor and ``srun`` by theirs (below); a process given
  the ``env://`` variables by hand and nothing else is named ``torchrun`` (it was started the way torchrun starts one);
- submitit's local executor (``SUBMITIT_LOCAL_GLOBALID``, ``SUBMITIT_LOCAL_LOCALID``, ``SUBMITIT_LOCAL_NTASKS``);
- ``srun`` — a plain Slurm step or a submitit Slurm job (``SLURM_PROCID``, ``SLURM_LOCALID``,
  ``SLURM_STEP_NUM_TASKS`` or ``SLURM_NTASKS``; master = first host of the step's or job's node list).
  The batch script itself (no ``SLURM_STEP_ID``, yet ``SLURM_PROCID=0`` and ``SLURM_NTASKS=N``) and a
  JupyterHub kernel running as a Slurm job are one process: they must not wait for N - 1 peers;
- otherwise one process.

A run fails fast instead of hanging until the job's time limit: the world size is checked against the
one the job was submitted for (``COURSEKIT_EXPECTED_WORLD_SIZE``, :func:`check_world_size`), and under
submitit's local executor, which waits for every task, a task that fails stops its sibling tasks
(:func:`stop_local_peer_tasks`, :func:`stop_peers_on_failure`). The process group itself (devices, NCCL or
gloo, collectives and their timeout) is ``coursekit.train.parallel.process_group``; this module imports no
torch, so that the job layer (``coursekit.jobs.tasks``) can use it on a login node.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

LOCALHOST = "127.0.0.1"
MASTER_PORT_BASE = 20000  # ports derived from a job id fall in [BASE, BASE + SPAN):
MASTER_PORT_SPAN = 12000  # below Linux's ephemeral ports (32768-60999), which gloo's and NCCL's own sockets
# and every outgoing connection take: a derived port there can be in use already (EADDRINUSE)
STEPS_PER_JOB_IN_PORT = 16  # concurrent srun steps of one job get different ports
EXPECTED_WORLD_SIZE_ENV = "COURSEKIT_EXPECTED_WORLD_SIZE"  # set by the job submitter: processes asked for
LOCAL_CONTROLLER_MODULE = "submitit.local._local"  # the parent process of submitit's local tasks
PEER_STOP_GRACE_S = 3.0  # a stopped peer task gets this long to end (a command it runs gets SIGTERM), then SIGKILL
PEER_STOP_POLL_S = 0.1
LOCAL_REQUEUE_EXIT_CODE = 144  # submitit's local executor: a task exits with it to be requeued (not a failure)


@dataclass(frozen=True)
class LaunchInfo:
    """What the launcher told this process: its ranks and where rank 0 listens."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    master_addr: str = LOCALHOST
    master_port: int = MASTER_PORT_BASE
    launcher: str = "single"  # "torchrun" | "submitit-local" | "srun" | "single"


# ---------------------------------------------------------------- Slurm host lists

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets: ``a[1,2],b`` -> ``["a[1,2]", "b"]``."""
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise ValueError(f"unbalanced brackets in Slurm node list {text!r}")
    parts.append("".join(current))
    return [p for p in parts if p]


def _expand_ranges(body: str, nodelist: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]`` (zero padding kept)."""
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ValueError(f"cannot read range {item!r} in Slurm node list {nodelist!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        width = len(low)
        values += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return values


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand a compressed Slurm host list: ``node[01-03,07],gpu1`` -> ``node01 node02 node03 node07 gpu1``.

    Several bracket groups in one name give their product (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2).
    """
    hosts: list[str] = []
    for group in _split_top_level(nodelist.strip()):
        pieces = re.split(r"\[([^\]]*)\]", group)  # text, ranges, text, ranges, ..., text
        choices = [[pieces[i]] if i % 2 == 0 else _expand_ranges(pieces[i], nodelist) for i in range(len(pieces))]
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    return hosts


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list (where task 0 of a step runs)."""
    hosts = expand_nodelist(nodelist)
    if not hosts:
        raise ValueError(f"empty Slurm node list {nodelist!r}")
    return hosts[0]


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """Tasks on node ``node_id`` from Slurm's ``2(x3),1`` notation."""
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        match = re.match(r"^(\d+)(?:\(x(\d+)\))?$", item.strip())
        if not match:
            raise ValueError(f"cannot read Slurm tasks per node {tasks_per_node!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[min(node_id, len(counts) - 1)]


# ---------------------------------------------------------------- ports held for a rendezvous


@contextlib.contextmanager
def held_ports(count: int) -> Iterator[list[int]]:
    """`count` distinct free ports, held until the block ends: each stays bound (``SO_REUSEADDR``, never
    listening), so no other process's ``bind`` or outgoing connection can take it meanwhile, while a rank's
    store (c10d's ``TCPStore`` also sets ``SO_REUSEADDR``) can still listen on it. A port chosen, released and
    used seconds later was taken by another test in CI (EADDRINUSE): hold it for as long as its runs last."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    with contextlib.ExitStack() as stack:
        for sock in sockets:
            stack.enter_context(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", 0))
        yield [sock.getsockname()[1] for sock in sockets]


# ---------------------------------------------------------------- launcher detection


def _port_from_job(job_id: str, step_id: str = "0") -> int:
    digits = int(re.sub(r"\D", "", job_id) or 0)
    step = int(step_id) if step_id.isdigit() else 0
    return MASTER_PORT_BASE + (digits * STEPS_PER_JOB_IN_PORT + step) % MASTER_PORT_SPAN


def _is_local_task(env: Mapping[str, str]) -> bool:
    return env.get("SUBMITIT_EXECUTOR") == "local" and "SUBMITIT_LOCAL_GLOBALID" in env


def _in_srun_step(env: Mapping[str, str]) -> bool:
    in_step = any(name in env for name in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS"))
    return "SLURM_PROCID" in env and in_step and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env)


def env_launcher(env: Mapping[str, str]) -> str:
    """Who set this process's ``env://`` variables: ``torchrun`` (only it sets ``TORCHELASTIC_*``), else the
    launcher whose own variables are there (coursekit's task wrapper exports ``RANK``... for those tasks)."""
    if any(name.startswith("TORCHELASTIC_") for name in env):
        return "torchrun"
    if _is_local_task(env):
        return "submitit-local"
    if _in_srun_step(env):
        return "srun"
    return "torchrun"  # the env:// variables alone, set by hand as torchrun would


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Read ranks and the rendezvous address from the environment (see the module docstring)."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" in env and "RANK" in env:  # torchrun, or coursekit's task wrapper (srun, submitit-local)
        world = int(env["WORLD_SIZE"])
        return LaunchInfo(
            rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", env["RANK"])), world_size=world,
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
            master_addr=env.get("MASTER_ADDR", LOCALHOST),
            master_port=int(env.get("MASTER_PORT", MASTER_PORT_BASE)), launcher=env_launcher(env))
    if _is_local_task(env):
        world = int(env.get("SUBMITIT_LOCAL_NTASKS", 1))
        return LaunchInfo(
            rank=int(env["SUBMITIT_LOCAL_GLOBALID"]), local_rank=int(env.get("SUBMITIT_LOCAL_LOCALID", 0)),
            world_size=world, local_world_size=world, master_addr=LOCALHOST,
            master_port=int(env.get("MASTER_PORT") or _port_from_job(env.get("SUBMITIT_LOCAL_JOB_ID", "0"))),
            launcher="submitit-local")
    if _in_srun_step(env):
        world = int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"])
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        local_world = tasks_on_node(per_node, int(env.get("SLURM_NODEID", 0))) if per_node else world
        port = env.get("MASTER_PORT") or _port_from_job(env.get("SLURM_JOB_ID", "0"), env.get("SLURM_STEP_ID", "0"))
        return LaunchInfo(
            rank=int(env["SLURM_PROCID"]), local_rank=int(env.get("SLURM_LOCALID", 0)), world_size=world,
            local_world_size=local_world, master_addr=first_host(nodelist) if nodelist else LOCALHOST,
            master_port=int(port), launcher="srun")
    return LaunchInfo()


class WorldSizeError(ValueError):
    """The launcher started a different number of processes than the job was submitted for."""


def check_world_size(info: LaunchInfo, env: Mapping[str, str] | None = None) -> None:
    """Refuse at once when ``COURSEKIT_EXPECTED_WORLD_SIZE`` (set by the job submitter) disagrees."""
    env = os.environ if env is None else env
    expected = env.get(EXPECTED_WORLD_SIZE_ENV, "").strip()
    if not expected:
        return
    if not expected.isdigit() or int(expected) < 1:
        raise WorldSizeError(f"{EXPECTED_WORLD_SIZE_ENV}={expected!r} is not a positive integer")
    if int(expected) != info.world_size:
        raise WorldSizeError(
            f"this job was submitted for {expected} processes (n_gpu={expected}) but the launcher "
            f"({info.launcher}) started {info.world_size}: rank {info.rank} stops before joining the process "
            f"group. Submit with n_gpu={info.world_size}, or make the launcher start {expected} processes "
            "(srun: --ntasks-per-node x --nodes; torchrun: --nproc_per_node x --nnodes)")


# ---------------------------------------------------------------- failing fast under submitit's local executor


def _command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an ended task its controller has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def stop_local_peer_tasks(env: Mapping[str, str] | None = None, grace_s: float = PEER_STOP_GRACE_S) -> list[int]:
    """Stop this task's sibling tasks when it runs under submitit's local executor; return their pids.

    submitit's local controller waits until *every* task has exited (srun can kill a step whose task fails,
    the local controller cannot), so a task whose rank failed must stop the others, or they wait in a
    collective until the time limit. Each sibling gets SIGINT (what the local executor's cancel sends: a
    ``KeyboardInterrupt``, which stops a command the task runs), and SIGKILL after ``grace_s`` if it is
    still there (a rank blocked inside a C++ rendezvous or collective does not see the interrupt).
    Elsewhere (Slurm, torchrun, plain processes) this does nothing.
    """
    env = os.environ if env is None else env
    if env.get("SUBMITIT_EXECUTOR") != "local":
        return []
    controller = os.getppid()
    if LOCAL_CONTROLLER_MODULE not in _command_line(controller):
        return []  # not started by submitit's local controller: touch nothing
    peers = [pid for pid in _children(controller) if pid != os.getpid()]
    for pid in peers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    if peers:
        print(f"coursekit: this task failed; stopping its {len(peers)} sibling task(s) {peers}",
              file=sys.stderr, flush=True)
    deadline = time.monotonic() + grace_s
    while any(_running(pid) for pid in peers) and time.monotonic() < deadline:
        time.sleep(PEER_STOP_POLL_S)
    for pid in peers:
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return peers


@contextlib.contextmanager
def stop_peers_on_failure() -> Iterator[None]:
    """``with stop_peers_on_failure(): ...`` — on an exception, stop the sibling tasks of submitit's local
    executor, then let the exception go on. Not on an interrupt (that is how peers are stopped) nor on a
    successful or requeue exit."""
    try:
        yield
    except KeyboardInterrupt:
        raise
    except SystemExit as error:
        if error.code not in (None, 0, LOCAL_REQUEUE_EXIT_CODE):
            stop_local_peer_tasks()
        raise
    except BaseException:
        stop_local_peer_tasks()
        raise
