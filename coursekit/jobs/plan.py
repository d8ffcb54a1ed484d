"""From a GPU count and a site to a job's shape (nodes, tasks, GPUs, CPUs) and submitit's parameters.

idr_pytools' rules: a count fits one node or is a whole number of nodes; one task per GPU (or per
``n_gpu_per_task`` GPUs); CPUs per task from the partition. With ``launcher="torchrun"``: one task per
node, and torchrun starts one process per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coursekit.jobs import validate
from coursekit.sites import NodeShape, Site

SIGNAL_DELAY_S = 90  # preemption/timeout signal this long before the time limit (submitit's default)
MAIL_TYPE = "ALL"


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
    """The job's shape, or ValueError naming the parameter at fault."""
    count = validate.check_gpu_count(n_gpu, node.gpus_per_node, site.name, cpu_only=node.cpu_only,
                                     multi_node=not site.is_local)
    per_task = validate.check_positive_int(n_gpu_per_task, "n_gpu_per_task")
    validate.check_positive_int(cpus_per_task, "cpus_per_task", allow_none=True)
    on_node = min(count, node.gpus_per_node)
    nodes = max(1, count // node.gpus_per_node) if count > node.gpus_per_node else 1
    if launcher == "torchrun":
        if per_task != 1:
            raise ValueError(f"n_gpu_per_task={per_task}: with launcher='torchrun', torchrun starts one "
                             "process per GPU; leave n_gpu_per_task=1")
        tasks, gpus_per_task, processes = 1, on_node, on_node
    else:
        validate.check_gpus_per_task(per_task, on_node, count)
        tasks, gpus_per_task, processes = on_node // per_task, per_task, on_node // per_task
    cpus = cpus_per_task or max(1, node.cpus_per_gpu * gpus_per_task)
    if node.cpu_only:
        return Shape(count, 1, 0, tasks, 0, cpus, processes, cpu_only=True)
    return Shape(count, nodes, on_node, tasks, gpus_per_task, cpus, processes)


@dataclass(frozen=True)
class Options:
    """The validated, site-resolved options shared by every job of one call."""

    name: str
    time_min: int
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    constraint: str | None = None
    modules: tuple[str, ...] = ()
    script_addon: tuple[str, ...] = ()
    sbatch_options: tuple[tuple[str, str | bool], ...] = ()
    exclusive: bool = False
    email: str | None = None
    gpu_binding: str = "task"
    signal_delay_s: int = SIGNAL_DELAY_S


def setup_lines(site: Site, options: Options) -> list[str]:
    """Lines run in the job script before srun: modules (``module purge; module load ...``), addons."""
    lines = []
    modules = list(options.modules) or list(site.modules)
    if modules:
        lines += ["module purge", "module load " + " ".join(modules)]
    return lines + list(options.script_addon)


def executor_parameters(shape: Shape, site: Site, options: Options) -> dict[str, Any]:
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
        if options.gpu_binding == "task":  # each task sees its own GPUs (CUDA_VISIBLE_DEVICES per task)
            params["slurm_gpus_per_task"] = f"{typed}{shape.gpus_per_task}" if typed else shape.gpus_per_task
        else:  # every task sees all the node's GPUs (idr_pytools' --gres=gpu:N)
            params["slurm_gres"] = f"gpu:{typed}{shape.gpus_per_node}"
    constraint = options.constraint or (partition_info.constraint if partition_info else None) or site.constraint
    partition = options.partition or site.partition
    if partition_info is not None and partition_info.select_by_constraint:
        partition = None
    extra: dict[str, Any] = dict(options.sbatch_options)
    if site.hint_nomultithread:
        extra.setdefault("hint", "nomultithread")
    optional = {
        "slurm_partition": partition, "slurm_qos": options.qos or site.qos,
        "slurm_account": site.full_account(options.account, options.partition),
        "slurm_constraint": constraint, "slurm_setup": setup_lines(site, options) or None,
        "slurm_exclusive": True if options.exclusive else None,
        "slurm_mail_user": options.email, "slurm_mail_type": MAIL_TYPE if options.email else None,
        "slurm_additional_parameters": extra or None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    params["slurm_signal_delay_s"] = options.signal_delay_s
    return params
