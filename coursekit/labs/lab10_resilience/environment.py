"""The environment a job runs in: the same short engine job from the participants' Python and from a container.

``submit_jobs(command)`` runs ``python -u <command>`` with the submitting kernel's own Python (a venv, or the
site's module); ``submit_jobs(command, singularity=image)`` runs ``singularity exec --nv <image> python -u
<command>`` instead (``CommandTask.singularity``). The engine records in its summary which Python ran
(``python_executable``, ``python_version``), torch, CUDA and cuDNN, and the image it ran in (``container``: set
by Apptainer/Singularity inside one, None outside), so :func:`versions_table` shows which ran where.

Where no container runtime is installed (no ``singularity`` on the PATH: Apptainer installs that name too), the
container job is not submitted: :func:`environment_note` says so and :func:`sbatch_script` shows the script the
kit would give sbatch for it, rendered by submitit from the kit's own parameters (``coursekit.jobs.plan``, as the
golden sbatch tests do), for the course's Slurm site or, on a machine without Slurm, for ``REFERENCE_SITE``.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coursekit.labs.kit.claims import ClaimResult, check_claim
from coursekit.labs.kit.experiments import engine_command, wait_all
from coursekit.labs.kit.results import ResultsTable
from coursekit.metrics import read_metrics, summary
from coursekit.train.config import TrainConfig

VENV, CONTAINER = "your Python", "container"  # the two jobs' labels
RUNTIME = "singularity"  # what CommandTask runs (coursekit/jobs/tasks.py SINGULARITY); Apptainer installs it too
APPTAINER = "apptainer"
IMAGE_ENV = "COURSEKIT_CONTAINER_IMAGE"  # a room's image (.sif), when the settings name none
REFERENCE_SITE = "jean-zay"  # whose sbatch script is shown on a machine without Slurm (idr_pytools' cluster)
# submitit's generic parameter names -> sbatch's (submitit's SlurmExecutor._equivalence_dict); slurm_* lose the prefix
SUBMITIT_NAMES = {"name": "job_name", "timeout_min": "time", "tasks_per_node": "ntasks_per_node"}
SHOWN_PYTHON = "PYTHON"  # the submitting Python's path in a shown script (it differs from machine to machine)
VERSION_COLUMNS = ("job", "status", "python_executable", "python_version", "torch_version", "cuda_version",
                   "cudnn_version", "container", "device_name")


def container_runtime() -> str | None:
    """The path of ``singularity`` (what the kit runs) on the PATH, else None."""
    return shutil.which(RUNTIME)


def container_image(image: str | os.PathLike | None = None) -> Path | None:
    """The image to run in: ``image``, else ``$COURSEKIT_CONTAINER_IMAGE``; None when neither names an existing
    file."""
    chosen = image if image is not None else os.environ.get(IMAGE_ENV)
    if chosen is None or not str(chosen).strip():
        return None
    path = Path(chosen).expanduser()
    return path if path.is_file() else None


def environment_note(runtime: str | None, image: Path | None, wanted: str | os.PathLike | None = None) -> str:
    """What the cell can do here, in plain words: run both jobs, or why the container job is not submitted."""
    if runtime is not None and image is not None:
        return f"Container runtime: {runtime}; image: {image}. Both jobs are submitted."
    if runtime is None:
        apptainer = shutil.which(APPTAINER)
        why = (f"{APPTAINER} is installed ({apptainer}) but not under the name {RUNTIME!r}, which the kit runs: "
               f"ask for its {RUNTIME} link" if apptainer else
               f"no container runtime here: neither {RUNTIME} nor {APPTAINER} is on the PATH")
    else:
        named = wanted if wanted is not None else os.environ.get(IMAGE_ENV)
        why = (f"{RUNTIME} is installed ({runtime}) but the image {named} does not exist" if named else
               f"{RUNTIME} is installed ({runtime}) but no image is named (the settings' container_image, or "
               f"${IMAGE_ENV})")
    return (f"{why}. The table shows the job from your Python only (a job of this lab that already ran from it, "
            "where there is one); below, what the container job's processes would run.")


def run_environments(config: TrainConfig, *, image: str | os.PathLike | None = None, name: str = "env",
                     timeout_s: float = 600.0, venv_job: Any = None, **submit_options: Any) -> dict[str, Any]:
    """Submit ``config``'s engine job from this Python, then (where a runtime and the image exist) the same job in
    the container, one after the other; wait for each. Returns {label: job}. ``venv_job``: a job of ``config`` from
    this Python that has run already (the GPU view's fed job), used instead of submitting another.
    ``submit_options``: the lab's ``s.job`` (time_max, env)."""
    from coursekit.jobs import submit_jobs

    if "singularity" in submit_options:
        raise ValueError("singularity=...: give the image as image=, the container job is this function's own")
    command = engine_command(config)
    jobs: dict[str, Any] = {}
    if venv_job is not None:
        jobs[VENV] = venv_job
    else:
        (jobs[VENV],) = submit_jobs(command, n_gpu=1, name=f"{name}-venv", **submit_options)
    wait_all([jobs[VENV]], timeout_s)
    found = container_image(image)
    if container_runtime() is not None and found is not None:
        (jobs[CONTAINER],) = submit_jobs(command, n_gpu=1, name=f"{name}-container", singularity=str(found),
                                         **submit_options)
        wait_all([jobs[CONTAINER]], timeout_s)
    return jobs


def versions_row(label: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run recorded about its environment (its summary record); the status None while it has none."""
    final = summary(records) or {}
    return {"job": label, **{key: final.get(key) for key in VERSION_COLUMNS[1:]}}


def versions_table(jobs: Mapping[str, Any]) -> ResultsTable:
    """One row per job: the Python, torch, CUDA, cuDNN and container its engine recorded."""
    return ResultsTable([versions_row(label, read_metrics(job.run_dir)) for label, job in jobs.items()],
                        columns=list(VERSION_COLUMNS), title="the environment each job ran in (engine summary)")


def environment_claims(table: ResultsTable, image: str | os.PathLike | None = None) -> dict[str, ClaimResult]:
    """Each job ran where it was sent: the job from your Python outside any container, the container job in
    ``image`` (its recorded ``container``) with another Python; the latter not checked without a container job."""
    rows = {row["job"]: row for row in table}
    if VENV not in rows:
        raise ValueError(f"table has no row {VENV!r}; its rows are {sorted(rows)}")
    results = {"venv": check_claim(
        "the job from your Python ran outside any container, with a Python the summary names",
        rows[VENV].get("status") == "completed" and not rows[VENV].get("container")
        and bool(rows[VENV].get("python_executable")),
        f"python {rows[VENV].get('python_executable')}, container {rows[VENV].get('container')}")}
    box = rows.get(CONTAINER)
    statement = "the container job ran inside the image, with the image's Python, not yours"
    if box is None:
        results["container"] = check_claim(statement, False, "", applies=False,
                                           why_not="no container job here (no container runtime or no image)")
        return results
    inside = bool(box.get("container")) and (image is None or Path(str(box["container"])).name == Path(image).name)
    results["container"] = check_claim(
        statement, box.get("status") == "completed" and inside
        and box.get("python_executable") != rows[VENV].get("python_executable"),
        f"container {box.get('container')}, python {box.get('python_executable')} "
        f"(yours: {rows[VENV].get('python_executable')})")
    return results


def sbatch_script(config: TrainConfig, *, image: str | os.PathLike | None = None, name: str = "env",
                  site: str | None = None, time_max: str = "00:10:00", module: Any = None) -> str:
    """The sbatch script the kit would submit for ``config``'s job (in ``image`` when given): rendered by submitit
    from ``coursekit.jobs.plan``'s parameters for ``site`` (default: the course's site, or ``REFERENCE_SITE``
    where it runs jobs on this machine). The submitting Python's path reads ``PYTHON``."""
    from submitit.slurm.slurm import _make_sbatch_string

    from coursekit.jobs import plan, validate
    from coursekit.sites import load_site

    chosen = load_site(site)
    if chosen.is_local:
        chosen = load_site(REFERENCE_SITE)
    time_min = validate.parse_time(time_max)
    options = plan.Options(name=validate.check_name(name), time_min=time_min,
                           modules=tuple(validate.check_modules(module)),
                           signal_delay_s=plan.signal_delay(time_min, None, warn=False))
    shape = plan.job_shape(1, chosen.node_shape(options.partition), chosen, 1, "srun")
    shown = [plan.display_command(shlex.split(engine_command(config)), validate.check_singularity(
        None if image is None else str(image)))]
    params = plan.executor_parameters(shape, chosen, options, shown, "srun")
    # submitit's own renderer, as its SlurmExecutor calls it (which needs srun here; a preview must not)
    sbatch = {SUBMITIT_NAMES.get(key, key.removeprefix("slurm_")): value for key, value in params.items()}
    folder = chosen.paths().job_folder(name)
    command = " ".join([SHOWN_PYTHON, "-u -m submitit.core._submit", shlex.quote(str(folder))])
    return _make_sbatch_string(command=command, folder=folder, **sbatch)


def container_lines(script: str) -> list[str]:
    """The lines of a shown script that say what each process runs (``# coursekit: ...`` and the command)."""
    return [line for line in script.splitlines() if line.startswith(("# coursekit:", "#   "))]
