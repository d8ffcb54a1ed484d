"""The one module that knows ranks: who launched us, which device is ours, and how ranks talk.

Launchers understood, in this order of precedence:

- ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR/PORT``);
- submitit's local executor (``SUBMITIT_LOCAL_GLOBALID``, ``SUBMITIT_LOCAL_LOCALID``, ``SUBMITIT_LOCAL_NTASKS``);
- ``srun`` — a plain Slurm step or a submitit Slurm job (``SLURM_PROCID``, ``SLURM_LOCALID``,
  ``SLURM_STEP_NUM_TASKS`` or ``SLURM_NTASKS``; master = first host of the step's or job's node list).
  The batch script itself (no ``SLURM_STEP_ID``, yet ``SLURM_PROCID=0`` and ``SLURM_NTASKS=N``) and a
  JupyterHub kernel running as a Slurm job are one process: they must not wait for N - 1 peers;
- otherwise one process.

NCCL on GPUs, gloo on CPUs. Every helper below is a no-op when there is one process.

A run fails fast instead of hanging until the job's time limit: the world size is checked against the
one the job was submitted for (``COURSEKIT_EXPECTED_WORLD_SIZE``), collectives time out after
``COURSEKIT_DIST_TIMEOUT_S`` seconds (default ``DEFAULT_TIMEOUT_S``), and under submitit's local
executor, which waits for every task, a task that fails stops its sibling tasks
(:func:`stop_local_peer_tasks`, :func:`stop_peers_on_failure`).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import os
import re
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

LOCALHOST = "127.0.0.1"
MASTER_PORT_BASE = 20000  # ports derived from a job id fall in [BASE, BASE + SPAN):
MASTER_PORT_SPAN = 12000  # below Linux's ephemeral ports (32768-60999), which gloo's and NCCL's own sockets
# and every outgoing connection take: a derived port there can be in use already (EADDRINUSE)
STEPS_PER_JOB_IN_PORT = 16  # concurrent srun steps of one job get different ports
DEFAULT_TIMEOUT_S = 300  # rendezvous and every collective: a dead or stuck rank ends the run after this
EXPECTED_WORLD_SIZE_ENV = "COURSEKIT_EXPECTED_WORLD_SIZE"  # set by the job submitter: processes asked for
TIMEOUT_ENV = "COURSEKIT_DIST_TIMEOUT_S"
LOCAL_CONTROLLER_MODULE = "submitit.local._local"  # the parent process of submitit's local tasks
PEER_STOP_GRACE_S = 3.0  # a stopped peer task gets this long to end (a command it runs gets SIGTERM), then SIGKILL
PEER_STOP_POLL_S = 0.1
LOCAL_REQUEUE_EXIT_CODE = 144  # submitit's local executor: a task exits with it to be requeued (not a failure)
DEVICE_PREFERENCES = ("auto", "cpu", "cuda")


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


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None  # "nccl" | "gloo" | None (one process, no process group)
    device: torch.device = torch.device("cpu")
    launcher: str = "single"
    owns_group: bool = False  # True when init_distributed created the process group (cleanup() leaves it)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


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


# ---------------------------------------------------------------- launcher detection


def _port_from_job(job_id: str, step_id: str = "0") -> int:
    digits = int(re.sub(r"\D", "", job_id) or 0)
    step = int(step_id) if step_id.isdigit() else 0
    return MASTER_PORT_BASE + (digits * STEPS_PER_JOB_IN_PORT + step) % MASTER_PORT_SPAN


def launch_info(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Read ranks and the rendezvous address from the environment (see the module docstring)."""
    env = os.environ if env is None else env
    if "WORLD_SIZE" in env and "RANK" in env:  # torchrun, or anyone exporting the env:// variables
        world = int(env["WORLD_SIZE"])
        return LaunchInfo(
            rank=int(env["RANK"]), local_rank=int(env.get("LOCAL_RANK", env["RANK"])), world_size=world,
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", world)),
            master_addr=env.get("MASTER_ADDR", LOCALHOST),
            master_port=int(env.get("MASTER_PORT", MASTER_PORT_BASE)), launcher="torchrun")
    if env.get("SUBMITIT_EXECUTOR") == "local" and "SUBMITIT_LOCAL_GLOBALID" in env:
        world = int(env.get("SUBMITIT_LOCAL_NTASKS", 1))
        return LaunchInfo(
            rank=int(env["SUBMITIT_LOCAL_GLOBALID"]), local_rank=int(env.get("SUBMITIT_LOCAL_LOCALID", 0)),
            world_size=world, local_world_size=world, master_addr=LOCALHOST,
            master_port=int(env.get("MASTER_PORT") or _port_from_job(env.get("SUBMITIT_LOCAL_JOB_ID", "0"))),
            launcher="submitit-local")
    in_step = any(name in env for name in ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS"))
    if "SLURM_PROCID" in env and in_step and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
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


def pick_device(device_pref: str, local_rank: int) -> torch.device:
    """``auto`` = this rank's GPU when CUDA is there, else the CPU."""
    if device_pref not in DEVICE_PREFERENCES:
        raise ValueError(f"device={device_pref!r}: use one of {DEVICE_PREFERENCES}")
    if device_pref == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is visible: use device='cpu' or 'auto'")
    if device_pref == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


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


def collective_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """Seconds a rendezvous or a collective may wait for the other ranks (``COURSEKIT_DIST_TIMEOUT_S``)."""
    env = os.environ if env is None else env
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return float(DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return seconds


def init_distributed(device_pref: str = "auto", env: Mapping[str, str] | None = None,
                     timeout_s: float | None = None) -> DistContext:
    """Join the process group when the launcher started several processes; pin this rank's GPU.

    Raises :class:`WorldSizeError` before any rendezvous when the job asked for another world size.
    ``timeout_s`` (default: ``COURSEKIT_DIST_TIMEOUT_S`` or ``DEFAULT_TIMEOUT_S``) bounds the rendezvous
    and every collective, so that a rank that died makes the others fail instead of waiting forever.
    """
    info = launch_info(env)
    check_world_size(info, env)
    timeout = timeout_s if timeout_s is not None else collective_timeout_s(env)
    device = pick_device(device_pref, info.local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend, owns_group = None, False
    if info.world_size > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        if not dist.is_initialized():
            owns_group = True
            dist.init_process_group(
                backend, init_method=f"tcp://{info.master_addr}:{info.master_port}", rank=info.rank,
                world_size=info.world_size, timeout=datetime.timedelta(seconds=timeout),
                device_id=device if device.type == "cuda" else None)
    return DistContext(info.rank, info.local_rank, info.world_size, info.local_world_size, backend, device,
                       info.launcher, owns_group)


def cleanup() -> None:
    """Leave the process group (safe to call when there is none)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------- collectives


def barrier(ctx: DistContext) -> None:
    if ctx.is_distributed:
        dist.barrier()


def all_reduce_(tensor: torch.Tensor, ctx: DistContext, op: str = "sum") -> torch.Tensor:
    """In-place all-reduce (``sum``, ``mean``, ``max`` or ``min``) of a tensor on this rank's device."""
    if not ctx.is_distributed:
        return tensor
    ops = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
           "min": dist.ReduceOp.MIN}
    dist.all_reduce(tensor, op=ops[op])
    if op == "mean":
        tensor /= ctx.world_size
    return tensor


def reduce_values(values: Sequence[float | torch.Tensor], ctx: DistContext, op: str = "sum") -> list[float]:
    """All-reduce a few scalars in one message and return them as floats (one host sync)."""
    packed = torch.stack([torch.as_tensor(v, dtype=torch.float64).to(ctx.device).reshape(()) for v in values])
    return [float(v) for v in all_reduce_(packed, ctx, op).cpu()]


def broadcast_object(obj: object, ctx: DistContext, src: int = 0) -> object:
    """Rank ``src``'s object on every rank (e.g. the run folder rank 0 chose)."""
    if not ctx.is_distributed:
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=src, device=ctx.device if ctx.backend == "nccl" else None)
    return holder[0]


# ---------------------------------------------------------------- DDP wrapping


def wrap_model(model: torch.nn.Module, ctx: DistContext, sync_batchnorm: bool = False) -> torch.nn.Module:
    """DDP around the model when there are several processes (kept for labs; the engine uses
    ``coursekit.train.parallel.ddp.apply``, which this calls)."""
    from coursekit.train.parallel import ddp

    return ddp.wrap(model, ctx, sync_batchnorm=sync_batchnorm)


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The bare module inside DDP and/or torch.compile."""
    while True:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def no_sync(model: torch.nn.Module, skip_sync: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync`` for non-final micro-batches of an accumulation; a null context otherwise."""
    inner = getattr(model, "_orig_mod", model)  # look through torch.compile's wrapper
    if skip_sync and isinstance(inner, torch.nn.parallel.DistributedDataParallel):
        return inner.no_sync()
    return contextlib.nullcontext()


@contextlib.contextmanager
def process_group(device_pref: str = "auto") -> Iterator[DistContext]:
    """``with process_group() as ctx:`` — init on entry, leave the group on exit."""
    ctx = init_distributed(device_pref)
    try:
        yield ctx
    finally:
        cleanup()


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
