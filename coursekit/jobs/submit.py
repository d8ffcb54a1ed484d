"""Submitting: ``gpu_jobs_submitter`` (idr_pytools' parameters), ``submit_jobs`` and ``submit_function``.

Built on submitit: every job gets the folder ``<jobs folder>/<name>/%j`` (``Site.paths()``, a
``coursekit.course.CoursePaths``; script kept, never overwritten), ``COURSEKIT_RUN_ROOT=<jobs folder>/<name>`` and ``COURSEKIT_EXPECTED_WORLD_SIZE`` in its
environment, and the parameters of submitit's AutoExecutor. A sweep (GPU counts x commands) is validated
entirely, every shape against the cluster or the site's profile, before anything is sent; jobs with the
same resources go in one job array (``executor.batch()``), so 32 jobs take one sbatch. Should sbatch
still refuse part of a sweep, what this call had submitted is cancelled and the error says so.
Submitting from inside a Slurm job (a JupyterHub kernel) hides the kernel's SLURM_* variables. What
differs between the local executor and Slurm is the site's backend (``jobs/local.py``, ``jobs/slurm.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError, JobPaths

from coursekit.course import CoursePaths
from coursekit.jobs import plan, registry, validate
from coursekit.jobs.handle import BACKENDS, Backend, Job
from coursekit.jobs.slurm import SlurmBackend
from coursekit.jobs.tasks import CommandTask, FunctionTask
from coursekit.metrics import RUN_ROOT_ENV
from coursekit.sites import Site, load_site
from coursekit.slurm_cli import SlurmError, submission_error

DEFAULT_TIME = "02:00:00"
MAX_TIMEOUT_REQUEUES = 3  # a checkpointable job is requeued at most this many times


@dataclass
class InterpreterCommandTask(CommandTask):
    """A command given with its interpreter (``python3 train.py``, ``/opt/env/bin/python -m x``), run
    with that interpreter as idr_pytools runs ``srun python3 train.py``."""

    interpreter: str = "python"

    def argv(self, job_id: str = "0") -> list[str]:
        command = super().argv(job_id)
        at = len(command) - len(self.words) - 2  # [..., python, "-u", *words]
        if at < 0 or command[at + 1:] != ["-u", *self.words]:
            raise RuntimeError(f"coursekit: cannot place the interpreter in {command}")
        command[at] = self.interpreter
        return command


def _backend(site: Site) -> type[Backend]:
    """How jobs of ``site`` are submitted and followed (``jobs/local.py``, ``jobs/slurm.py``)."""
    return BACKENDS.get(site.scheduler, SlurmBackend)


def _options(site: Site, name: str, time_max: Any, qos: Any, partition: Any, constraint: Any, account: Any,
             module: Any, script_addon: Any, slurm_addon: Any, exclusive: Any, email: Any,
             gpu_binding: Any, signal_delay_s: Any) -> plan.Options:
    validate.check_name(name)
    if not isinstance(exclusive, bool):
        raise ValueError(f"exclusive={exclusive!r}: use True or False")
    if gpu_binding is not None:
        validate.check_choice(gpu_binding, "gpu_binding", validate.GPU_BINDINGS)
    validate.check_value(partition, "partition")
    validate.check_value(account, "account")
    validate.check_value(constraint, "constraint", validate.CONSTRAINT_PATTERN)
    if partition is not None and site.partitions:
        site.partition_info(partition)  # ValueError naming the allowed partitions
    backend = _backend(site)
    partition, info = backend.placement(site, partition, constraint, account)
    validate.check_value(qos, "qos", allowed=info.qos if info is not None and qos is not None else ())
    time_min = validate.parse_time(time_max)
    return plan.Options(
        name=name, time_min=time_min, partition=partition, qos=qos, account=account,
        constraint=constraint, modules=tuple(validate.check_modules(module)),
        script_addon=tuple(validate.check_script_addon(script_addon)),
        sbatch_options=tuple(validate.parse_slurm_addon(slurm_addon).items()), exclusive=exclusive,
        email=validate.check_email(email), gpu_binding=gpu_binding,
        signal_delay_s=plan.signal_delay(time_min, signal_delay_s, warn=backend.warns_signal_delay))


def _check_launcher(site: Site, launcher: Any, image: str | None) -> str:
    """The launcher, when the site and this Python can use it; ValueError naming ``launcher`` otherwise."""
    validate.check_choice(launcher, "launcher", validate.LAUNCHERS)
    if launcher not in site.launchers:
        raise ValueError(f"launcher={launcher!r}: site {site.name!r} cannot use it; use one of {list(site.launchers)}")
    if launcher == "torchrun" and image is None and importlib.util.find_spec("torch") is None:
        raise ValueError(f"launcher='torchrun': torch is not installed for {sys.executable}, which starts "
                         "torchrun in the job; install it, or use launcher='srun'")
    return launcher


def _cancel_submitted(error: SlurmError, site: Site, jobs: Sequence[Job]) -> SlurmError:
    """``error``, saying that what this call had already submitted was cancelled (nothing half-submitted)."""
    if not jobs:
        return error
    ids = sorted({j.job_id.split("_")[0] for j in jobs})
    try:
        _backend(site).cancel_all(jobs)
        note = f"the {len(jobs)} job(s) this call had already submitted were cancelled ({', '.join(ids)})"
    except SlurmError as cancel_error:
        note = (f"the {len(jobs)} job(s) this call had already submitted could not be cancelled "
                f"({cancel_error.message}): cancel them with `scancel {' '.join(ids)}`")
    return SlurmError(f"{error.message}; {note}", error.command, error.returncode)


def _warn_ignored(site: Site, given: dict[str, Any]) -> None:
    ignored = _backend(site).ignored(given)
    if ignored:
        warnings.warn(f"site {site.name!r} runs jobs on this machine: {', '.join(ignored)} ignored", stacklevel=3)


def _executor(site: Site, folder: Path, params: dict[str, Any]) -> submitit.AutoExecutor:
    executor = submitit.AutoExecutor(folder=folder, cluster=_backend(site).cluster,
                                     slurm_max_num_timeout=MAX_TIMEOUT_REQUEUES)
    executor.update_parameters(**params)
    return executor


def _submit_group(executor: submitit.AutoExecutor, calls: Sequence[tuple[Callable[..., Any], tuple, dict]],
                  backend: type[Backend]) -> list:
    """Submit calls sharing resources: one job array on Slurm (the local executor starts each); on Slurm the
    array is submitted to begin later and started once submitit has made the jobs' folders."""
    staging = JobPaths.get_first_id_independent_folder(executor.folder)
    before = set(staging.iterdir()) if staging.is_dir() else set()
    try:
        with submitit.helpers.clean_env():  # a kernel running as a Slurm job must not leak SLURM_*
            with executor.batch():
                jobs = [executor.submit(fn, *args, **kwargs) for fn, args, kwargs in calls]
    except (FailedJobError, FailedSubmissionError) as error:
        for leftover in set(staging.iterdir()) - before if staging.is_dir() else ():
            if leftover.is_file() or leftover.is_symlink():  # submitit's staged pickles and script
                leftover.unlink()
        raise submission_error(error) from error
    _drop_placeholder_folder(Path(str(executor.folder)))
    backend.release([str(job.job_id) for job in jobs])  # their folders exist now
    return jobs


def _drop_placeholder_folder(folder: Path) -> None:
    """submitit makes the folder ``.../%j`` literally; once jobs have their own folders it stays empty."""
    if "%" in folder.name and folder.is_dir():
        with contextlib.suppress(OSError):  # not empty: another submission is using it right now
            folder.rmdir()


def _handle(submitted: Any, site: Site, options: plan.Options, paths: CoursePaths, command: str, kind: str,
            shape: plan.Shape) -> Job:
    job_id = str(submitted.job_id)
    job = Job(job_id, options.name, paths.job_folder(options.name, job_id), site=site.name, scheduler=site.scheduler, command=command,
              kind=kind, n_gpu=shape.n_gpu, num_tasks=shape.tasks_per_node * shape.nodes,
              submitted_at=time.time(), time_limit_min=options.time_min, submitit_job=submitted,
              lab=registry.current_lab(), **_backend(site).process_ids(job_id))
    registry.append(job.record())
    return job


def submit_jobs(srun_commands: str | Sequence[str], n_gpu: int | Sequence[int] = 1, module: Any = None,
                singularity: str | None = None, name: str | None = None, n_gpu_per_task: int = 1,
                time_max: str | int = DEFAULT_TIME, qos: str | None = None, partition: str | None = None,
                constraint: str | None = None, cpus_per_task: int | None = None, exclusive: bool = False,
                account: str | None = None, verbose: int = 0, email: str | None = None, slurm_addon: Any = None,
                script_addon: Any = None, *, launcher: str = "srun", site: str | Site | None = None,
                env: dict[str, str] | None = None, gpu_binding: str | None = None, requeue: bool = False,
                signal_delay_s: int | None = None) -> list[Job]:
    """Submit every GPU count x command (GPU counts outer, as idr_pytools); the handles in that order.
    See gpu_jobs_submitter."""
    the_site = site if isinstance(site, Site) else load_site(site)
    commands = validate.as_list(srun_commands, "srun_commands")
    words = [validate.check_command(c) for c in commands]
    counts = validate.as_list(n_gpu, "n_gpu")
    job_name = name if name is not None else validate.default_name(commands[0])
    options = _options(the_site, job_name, time_max, qos, partition, constraint, account, module, script_addon,
                       slurm_addon, exclusive, email, gpu_binding, signal_delay_s)
    image = validate.check_singularity(singularity)
    split = [validate.split_interpreter(w) for w in words]
    _check_launcher(the_site, launcher, image)
    extra_env = validate.check_env(env)
    if not isinstance(requeue, bool):
        raise ValueError(f"requeue={requeue!r}: use True or False")
    if isinstance(verbose, bool) or not isinstance(verbose, int):
        raise ValueError(f"verbose={verbose!r}: use 0 (quiet) or 1 (print the job ids)")
    node = the_site.node_shape(options.partition)
    shapes = {n: plan.job_shape(n, node, the_site, n_gpu_per_task, launcher, cpus_per_task) for n in counts}
    _warn_ignored(the_site, {"module": module, "script_addon": script_addon, "slurm_addon": slurm_addon,
                             "qos": qos, "partition": partition, "account": account, "constraint": constraint,
                             "email": email, "exclusive": exclusive})
    backend, paths = _backend(the_site), the_site.paths()
    root = paths.run_root(job_name)
    shown = [plan.display_command(w, image) for w in words]
    handles: list[Job] = []
    for count in counts:  # one executor (one array of every command) per GPU count
        shape = shapes[count]
        params = plan.executor_parameters(shape, the_site, options, shown, launcher)
        executor = _executor(the_site, paths.job_folder(job_name), params)
        task_env = {**extra_env, RUN_ROOT_ENV: str(root), plan.EXPECTED_WORLD_SIZE_ENV: str(plan.world_size(shape)),
                    **backend.task_env()}
        bind = shape.gpus_per_task if backend.binds_own_gpus(launcher, plan.gpu_binding(shape, options)) else 0
        tasks = [_command_task(interpreter, rest, task_env, launcher, shape, image, bind, requeue)
                 for interpreter, rest in split]
        try:
            submitted = _submit_group(executor, [(t, (), {}) for t in tasks], backend)
        except SlurmError as error:
            raise _cancel_submitted(error, the_site, handles) from error
        handles += [_handle(job, the_site, options, paths, commands[c], "command", shape)
                    for c, job in enumerate(submitted)]
        if verbose:
            print(f"submitted {len(submitted)} job(s) of {count} GPU(s): {[j.job_id for j in submitted]}")
    return handles


def _command_task(interpreter: str | None, words: list[str], env: dict[str, str], launcher: str,
                  shape: plan.Shape, image: str | None, bind: int, requeue: bool) -> CommandTask:
    common = dict(words=words, env=env, launcher=launcher, nnodes=shape.nodes,
                  nproc_per_node=shape.processes_per_node, singularity=image, bind_local_gpus=bind, requeue=requeue)
    return CommandTask(**common) if interpreter is None else InterpreterCommandTask(**common, interpreter=interpreter)


def gpu_jobs_submitter(srun_commands: str | Sequence[str], n_gpu: int | Sequence[int] = 1, module: Any = None,
                       singularity: str | None = None, name: str | None = None, n_gpu_per_task: int = 1,
                       time_max: str | int = DEFAULT_TIME, qos: str | None = None, partition: str | None = None,
                       constraint: str | None = None, cpus_per_task: int | None = None, exclusive: bool = False,
                       account: str | None = None, verbose: int = 0, email: str | None = None,
                       slurm_addon: Any = None, script_addon: Any = None, *, launcher: str = "srun",
                       site: str | Site | None = None, env: dict[str, str] | None = None,
                       gpu_binding: str | None = None, requeue: bool = False) -> list[str]:
    """idr_pytools' submitter: run ``python -u <command>`` for every GPU count x command; the job ids.

    ``srun_commands`` and ``n_gpu`` are a value or a list; the ids come GPU counts outer, as idr_pytools
    orders them: ``n_gpu=[1, 2]`` with commands ``[a, b]`` gives ``[a@1, b@1, a@2, b@2]``. A command is
    ``script.py args``, ``-m module args`` or ``-c code``, optionally after its interpreter
    (``python3 script.py``, a path to a python). A GPU count fits one node or is a multiple of the site's
    GPUs per node, and fits the cluster (``sinfo``) or the site's profile; one task per ``n_gpu_per_task``
    GPUs (``launcher="torchrun"``: one task per node, torchrun spawns one process per GPU); a multi-GPU
    job's tasks see the node's GPUs (``gpu_binding="node"``; ``"task"``: only their own). ``module``
    (names to load), ``script_addon`` (shell lines, never ``#SBATCH``) and ``slurm_addon`` (``#SBATCH``
    lines from an allow-list) shape the script; ``singularity`` runs the command in that image. Everything
    is checked before anything is sent; a job whose task fails ends at once (``srun --kill-on-bad-exit``).
    """
    jobs = submit_jobs(srun_commands, n_gpu, module, singularity, name, n_gpu_per_task, time_max, qos, partition,
                       constraint, cpus_per_task, exclusive, account, verbose, email, slurm_addon, script_addon,
                       launcher=launcher, site=site, env=env, gpu_binding=gpu_binding, requeue=requeue)
    return [j.job_id for j in jobs]


def submit_function(fn: Callable[..., Any], *args: Any, n_gpu: int = 1, name: str | None = None,
                    time_max: str | int = DEFAULT_TIME, site: str | Site | None = None, n_gpu_per_task: int = 1,
                    partition: str | None = None, qos: str | None = None, account: str | None = None,
                    constraint: str | None = None, cpus_per_task: int | None = None, module: Any = None,
                    env: dict[str, str] | None = None, gpu_binding: str | None = None,
                    signal_delay_s: int | None = None, **kwargs: Any) -> Job:
    """Run ``fn(*args, **kwargs)`` as a job on ``n_gpu`` GPUs (one task per GPU); ``job.result()`` brings
    back its value (task 0's; ``job.results()`` all) or raises ``JobFailedError`` with its traceback.
    A ``submitit.helpers.Checkpointable`` is requeued on timeout and resumes."""
    if not callable(fn):
        raise ValueError(f"fn={fn!r}: give a function (or a callable object) to run in the job")
    the_site = site if isinstance(site, Site) else load_site(site)
    fn_name = getattr(fn, "__name__", type(fn).__name__)
    job_name = name if name is not None else validate.safe_name("" if "<" in fn_name else fn_name, "function")
    options = _options(the_site, job_name, time_max, qos, partition, constraint, account, module, None, None,
                       False, None, gpu_binding, signal_delay_s)
    extra_env = validate.check_env(env)
    shape = plan.job_shape(n_gpu, the_site.node_shape(options.partition), the_site, n_gpu_per_task, "srun",
                           cpus_per_task)
    _warn_ignored(the_site, {"module": module, "qos": qos, "partition": partition, "account": account,
                             "constraint": constraint})
    paths = the_site.paths()
    root = paths.run_root(job_name)
    label = f"{getattr(fn, '__qualname__', type(fn).__name__)}(...)"
    shown = [f"the Python function {label} (pickled by submitit)"]
    executor = _executor(the_site, paths.job_folder(job_name),
                         plan.executor_parameters(shape, the_site, options, shown))
    task = FunctionTask(fn, {**extra_env, RUN_ROOT_ENV: str(root),
                             plan.EXPECTED_WORLD_SIZE_ENV: str(plan.world_size(shape)),
                             **_backend(the_site).task_env()})
    submitted = _submit_group(executor, [(task, args, kwargs)], _backend(the_site))[0]
    return _handle(submitted, the_site, options, paths, label, "function", shape)
