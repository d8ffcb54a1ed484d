"""From a GPU count and a site to a job's shape (nodes, tasks, GPUs, CPUs) and submitit's parameters.

idr_pytools' rules: a count fits one node or is a whole number of nodes; one task per GPU (or per
``n_gpu_per_task`` GPUs); CPUs per task from the partition. With ``launcher="torchrun"``: one task per
node, and torchrun starts one process per GPU. A multi-GPU job's tasks see every GPU of their node and
pick theirs by local rank (``gpu_binding="node"``, idr_pytools' ``--gres=gpu:N``); ``"task"`` gives each
task only its own. The script says in words what it runs, and a task that fails ends the whole job.
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coursekit.jobs import validate
from coursekit.sites import NodeShape, Site
from coursekit.slurm_cli import BEGIN_AFTER_S

SIGNAL_DELAY_S = 90  # pre-timeout signal this long before the time limit (submitit's default) ...
SIGNAL_DELAY_FRACTION = 0.25  # ... or this share of a short job's time limit, whichever is less
SLURM_SIGNAL_RESOLUTION_S = 60  # Slurm may send --signal up to this much earlier than asked (sbatch(1))
MAIL_TYPE = "ALL"
SRUN_ARGS = ("--kill-on-bad-exit=1",)  # one task failing ends the job's other tasks at once (srun(1))
EXPECTED_WORLD_SIZE_ENV = "COURSEKIT_EXPECTED_WORLD_SIZE"  # processes the job was submitted with
COMMANDS_VARIABLE = "COURSEKIT_COMMANDS"


@dataclass(frozen=True)
class Shape:
    """The resources of one job."""

    n_gpu: int  # GPUs (or CPU processes where the site has no GPU)
    nodes: int
    gpus_per_node: int  # GPUs each node gives the job (0 on a CPU-only machine)
    tasks_per_node: int
    gpus_per_task: int  # 0 on a CPU-only machine
    cpus_per_task: int
    processes_per_node: int  # what the command sees: tasks, or torchrun's processes
    cpu_only: bool = False


def job_shape(n_gpu: Any, node: NodeShape, site: Site, n_gpu_per_task: Any = 1, launcher: str = "srun",
              cpus_per_task: Any = None) -> Shape:
    """The job's shape, or ValueError naming the parameter at fault (``n_gpu`` where the cluster or the
    site's profile has not enough nodes, ``cpus_per_task`` where a node has not enough CPUs)."""
    count = validate.check_gpu_count(n_gpu, node.gpus_per_node, site.name, cpu_only=node.cpu_only,
                                     multi_node=not site.is_local)
    per_task = validate.check_positive_int(n_gpu_per_task, "n_gpu_per_task")
    validate.check_positive_int(cpus_per_task, "cpus_per_task", allow_none=True)
    on_node = min(count, node.gpus_per_node)
    nodes = max(1, count // node.gpus_per_node) if count > node.gpus_per_node else 1
    if node.max_nodes is not None and nodes > node.max_nodes:
        largest = node.max_nodes * node.gpus_per_node
        raise ValueError(
            f"n_gpu={count}: the cluster has {node.max_nodes} node(s) with {node.gpus_per_node} GPUs each "
            f"(sinfo), so a job fits on at most {largest} GPUs: use n_gpu <= {largest}")
    if launcher == "torchrun":
        if per_task != 1:
            raise ValueError(f"n_gpu_per_task={per_task}: with launcher='torchrun', torchrun starts one "
                             "process per GPU; leave n_gpu_per_task=1")
        tasks, gpus_per_task, processes = 1, on_node, on_node
    else:
        validate.check_gpus_per_task(per_task, on_node, count)
        tasks, gpus_per_task, processes = on_node // per_task, per_task, on_node // per_task
    cpus = cpus_per_task or max(1, node.cpus_per_gpu * gpus_per_task)
    node_cpus = node.cpus_per_gpu * node.gpus_per_node
    if not node.cpu_only and cpus * tasks > node_cpus:
        raise ValueError(f"cpus_per_task={cpus}: {tasks} task(s) per node x {cpus} CPUs is more than the "
                         f"{node_cpus} CPUs of a node; use at most {max(1, node_cpus // tasks)}")
    if node.cpu_only:
        return Shape(count, 1, 0, tasks, 0, cpus, processes, cpu_only=True)
    return Shape(count, nodes, on_node, tasks, gpus_per_task, cpus, processes)


def signal_delay(time_min: int, requested: Any = None, warn: bool = True) -> int:
    """Seconds before the time limit at which Slurm signals the job (submitit's USR2): ``requested``, or
    ``SIGNAL_DELAY_S`` scaled down to a share of a short limit. ValueError when ``requested`` does not fit;
    with ``warn``, a warning when Slurm may send it right at the start (a limit of a minute or so)."""
    limit_s = time_min * 60
    scaled = min(SIGNAL_DELAY_S, max(1, int(limit_s * SIGNAL_DELAY_FRACTION)))
    if requested is None:
        delay = scaled
    else:
        delay = validate.check_positive_int(requested, "signal_delay_s")  # type: ignore[assignment]
        if delay >= limit_s:
            raise ValueError(f"signal_delay_s={delay}: the job's time limit is {limit_s} s (time_max), so the "
                             f"signal would come before the job starts; use less, e.g. {scaled}")
    if warn and limit_s - delay < SLURM_SIGNAL_RESOLUTION_S:
        warnings.warn(
            f"time_max={time_min} min: Slurm sends the pre-timeout signal {delay} s before the end, but may "
            f"send it up to {SLURM_SIGNAL_RESOLUTION_S} s early, i.e. as soon as the job starts; give at least "
            f"{(delay + SLURM_SIGNAL_RESOLUTION_S + 59) // 60} minutes if the job must not see it early",
            stacklevel=3)
    return delay


@dataclass(frozen=True)
class Options:
    """The validated, site-resolved options shared by every job of one call."""

    name: str
    time_min: int
    partition: str | None = None  # resolved: the partition the job goes to (None: the cluster's default)
    qos: str | None = None
    account: str | None = None
    constraint: str | None = None
    modules: tuple[str, ...] = ()
    script_addon: tuple[str, ...] = ()
    sbatch_options: tuple[tuple[str, str | bool], ...] = ()
    exclusive: bool = False
    email: str | None = None
    gpu_binding: str | None = None  # None: "node" for a multi-GPU job, "task" for one GPU
    signal_delay_s: int = SIGNAL_DELAY_S


def gpu_binding(shape: Shape, options: Options) -> str:
    """``options.gpu_binding``, else ``"node"`` for a multi-GPU job (NCCL can use peer-to-peer between the
    node's GPUs) and ``"task"`` for one GPU."""
    return options.gpu_binding or ("node" if shape.n_gpu > 1 and not shape.cpu_only else "task")


def world_size(shape: Shape) -> int:
    """The processes of the whole job: tasks, or torchrun's processes, on every node."""
    return shape.processes_per_node * shape.nodes


def display_command(words: Sequence[str], singularity: str | None = None) -> str:
    """What one process runs, as a shell would show it: ``python -u train.py --lr 0.1``."""
    interpreter, rest = validate.split_interpreter(list(words))
    prefix = ["singularity", "exec", "--nv", singularity] if singularity else []
    return shlex.join([*prefix, interpreter or "python", "-u", *rest])


def command_lines(commands: Sequence[str], shape: Shape, launcher: str) -> list[str]:
    """Lines that say what the job runs: comments for the reader of the script, and an ``echo`` into the
    first task's log. ``commands``: one per array task (``display_command``)."""
    layout = f"{shape.nodes} node(s) x {shape.tasks_per_node} task(s) (srun {' '.join(SRUN_ARGS)})"
    if launcher == "torchrun":
        layout += f", torchrun starts {shape.processes_per_node} process(es) per node"
    if len(commands) == 1:
        return [f"# coursekit: {layout}; each process runs:", f"#   {commands[0]}",
                "echo " + shlex.quote(f"coursekit: {layout}; each process runs: {commands[0]}")]
    listing = [f"#   [{i}] {c}" for i, c in enumerate(commands)]
    return [f"# coursekit: {layout}; each process of array task N runs command [N]:", *listing,
            f"{COMMANDS_VARIABLE}=(" + " ".join(shlex.quote(c) for c in commands) + ")",
            f'echo "coursekit: {layout}; each process runs: ${{{COMMANDS_VARIABLE}[${{SLURM_ARRAY_TASK_ID:-0}}]}}"']


def setup_lines(site: Site, options: Options, commands: Sequence[str] = (), shape: Shape | None = None,
                launcher: str = "srun") -> list[str]:
    """Lines run in the job script before srun: what the job runs (``command_lines``), modules
    (``module purge``, the partition's architecture module, ``module load ...``), then ``script_addon``,
    which always comes after a command so that sbatch never reads it as part of the ``#SBATCH`` header."""
    lines = command_lines(commands, shape, launcher) if commands and shape is not None else [": coursekit setup"]
    modules = list(options.modules) or list(site.modules)
    if modules:
        info = site.partition_info(options.partition)
        arch = [f"module load {info.arch_module}"] if info is not None and info.arch_module else []
        lines += ["module purge", *arch, "module load " + " ".join(modules)]
    return lines + list(options.script_addon)


def executor_parameters(shape: Shape, site: Site, options: Options, commands: Sequence[str] = (),
                        launcher: str = "srun") -> dict[str, Any]:
    """submitit AutoExecutor parameters (generic ones, and ``slurm_*`` for Slurm sites)."""
    params: dict[str, Any] = {"name": options.name, "timeout_min": options.time_min,
                              "tasks_per_node": shape.tasks_per_node, "cpus_per_task": shape.cpus_per_task}
    if site.is_local:
        params["gpus_per_node"] = shape.gpus_per_node
        return params
    params["nodes"] = shape.nodes
    partition_info = site.partition_info(options.partition)
    gpu_type = partition_info.gpu_type if partition_info else None
    typed = f"{gpu_type}:" if gpu_type else ""
    if shape.gpus_per_node:
        if gpu_binding(shape, options) == "task":  # each task sees its own GPUs (CUDA_VISIBLE_DEVICES per task)
            params["slurm_gpus_per_task"] = f"{typed}{shape.gpus_per_task}" if typed else shape.gpus_per_task
        else:  # every task sees all the node's GPUs (idr_pytools' --gres=gpu:N)
            params["slurm_gres"] = f"gpu:{typed}{shape.gpus_per_node}"
    constraint = options.constraint or (partition_info.constraint if partition_info else None) or site.constraint
    partition = options.partition or site.partition
    if partition_info is not None and partition_info.select_by_constraint:
        partition = None
    extra: dict[str, Any] = dict(options.sbatch_options)
    extra["begin"] = f"now+{BEGIN_AFTER_S}"  # started at once when its folder exists (SlurmBackend.release)
    if site.hint_nomultithread:
        extra.setdefault("hint", "nomultithread")
    optional = {
        "slurm_partition": partition, "slurm_qos": options.qos or site.qos,
        "slurm_account": site.full_account(options.account, options.partition),
        "slurm_constraint": constraint, "slurm_setup": setup_lines(site, options, commands, shape, launcher),
        "slurm_exclusive": True if options.exclusive else None,
        "slurm_mail_user": options.email, "slurm_mail_type": MAIL_TYPE if options.email else None,
        "slurm_additional_parameters": extra or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    params["slurm_srun_args"] = list(SRUN_ARGS)
    params["slurm_signal_delay_s"] = options.signal_delay_s
    return params
