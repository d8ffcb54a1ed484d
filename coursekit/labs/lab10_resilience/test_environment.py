"""Lab 10's environment part: what the cell says without a container runtime, the sbatch script it shows, the
versions table and its claims on planted summaries, and which jobs are submitted. The job from this Python runs for
real in notebook 10 (CI: tests/browser/test_participant_exercises.py), whose claim then fails if it recorded no
Python or a container."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from coursekit.labs.lab10_resilience import environment as ev
from coursekit.metrics import METRICS_FILE
from coursekit.train.config import TrainConfig

CONFIG = TrainConfig(dataset="generated", model="mlp", num_samples=64, image_size=8, batch_size=16, progress="off")
VENV_PYTHON, IMAGE_PYTHON = "/home/ada/venv/bin/python", "/usr/bin/python3"


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "course"))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    monkeypatch.delenv(ev.IMAGE_ENV, raising=False)
    return tmp_path


def _tool(folder: Path, name: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


class _Job:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.job_id = run_dir, "1"


def _run(folder: Path, **fields: Any) -> _Job:
    """A run folder whose summary records ``fields`` (a completed run by default)."""
    folder.mkdir(parents=True)
    record = {"kind": "summary", "time": 1.0, "status": "completed", "python_version": "3.12.3",
              "torch_version": "2.11.0", "cuda_version": "13.0", **fields}
    (folder / METRICS_FILE).write_text(json.dumps(record) + "\n")
    return _Job(folder)


def test_without_a_runtime_the_note_says_so(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(course / "empty"))
    assert ev.container_runtime() is None
    note = ev.environment_note(None, None)
    assert note.startswith("no container runtime here: neither singularity nor apptainer")
    assert "the job from your Python only" in note and "would run" in note
    _tool(course / "bin", "apptainer")
    monkeypatch.setenv("PATH", str(course / "bin"))
    assert "apptainer is installed" in ev.environment_note(ev.container_runtime(), None)


def test_a_runtime_without_its_image_says_which_is_missing(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _tool(course / "bin", "singularity")
    monkeypatch.setenv("PATH", str(course / "bin"))
    assert ev.container_runtime() == str(runtime)
    assert "no image is named" in ev.environment_note(str(runtime), None)
    missing = course / "nowhere.sif"
    assert ev.container_image(missing) is None
    assert f"the image {missing} does not exist" in ev.environment_note(str(runtime), None, missing)
    image = course / "coursekit.sif"
    image.write_bytes(b"SIF")
    monkeypatch.setenv(ev.IMAGE_ENV, str(image))
    assert ev.container_image() == image
    assert "Both jobs are submitted" in ev.environment_note(str(runtime), image)


def test_the_shown_script_runs_the_engine_in_the_image(course: Path) -> None:
    """On the local site the script is the reference cluster's, with the kit's own lines (coursekit.jobs.plan)."""
    script = ev.sbatch_script(CONFIG, image="/images/coursekit.sif", name="env", module="pytorch-gpu/py3/2.5.0")
    assert script.startswith("#!/bin/bash") and "#SBATCH --job-name=env" in script
    assert "#SBATCH --gpus-per-task=1" in script and "module load pytorch-gpu/py3/2.5.0" in script
    lines = ev.container_lines(script)
    assert lines[1].startswith("#   singularity exec --nv /images/coursekit.sif python -u -m coursekit.train ")
    assert "--kill-on-bad-exit=1 PYTHON -u -m submitit.core._submit" in script  # no machine's own path
    plain = ev.container_lines(ev.sbatch_script(CONFIG, name="env"))
    assert plain[1].startswith("#   python -u -m coursekit.train ")
    with pytest.raises(ValueError, match="name="):
        ev.sbatch_script(CONFIG, name="two words")


def test_the_shown_script_is_submitits_own_rendering_and_needs_no_srun(course: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The preview equals what submitit's SlurmExecutor writes for the same parameters (with srun), and renders
    where no srun exists (the notebook on a laptop, the GPU machine of the gpu profile)."""
    import shlex

    import submitit

    from coursekit.jobs import plan, validate
    from coursekit.sites import load_site

    monkeypatch.setenv("PATH", str(course / "empty"))
    shown = ev.sbatch_script(CONFIG, image="/images/coursekit.sif", name="env", time_max="00:10:00")
    monkeypatch.setattr("submitit.slurm.slurm.shutil.which", lambda name: f"/usr/bin/{name}")
    site = load_site(ev.REFERENCE_SITE)
    options = plan.Options(name="env", time_min=10, signal_delay_s=plan.signal_delay(10, None, warn=False))
    shape = plan.job_shape(1, site.node_shape(None), site, 1, "srun")
    command = [plan.display_command(shlex.split(ev.engine_command(CONFIG)), "/images/coursekit.sif")]
    executor = submitit.AutoExecutor(folder=site.paths().job_folder("env"), cluster="slurm")
    executor.update_parameters(**plan.executor_parameters(shape, site, options, command, "srun"))
    inner = executor._executor
    expected = inner._make_submission_file_text(inner._submitit_command_str, "x")
    assert shown == expected.replace(shlex.quote(sys.executable), ev.SHOWN_PYTHON)
    assert validate.parse_time("00:10:00") == 10


def test_versions_and_claims_hold_where_each_job_ran_where_it_was_sent(tmp_path: Path) -> None:
    jobs = {ev.VENV: _run(tmp_path / "v", python_executable=VENV_PYTHON, container=None),
            ev.CONTAINER: _run(tmp_path / "c", python_executable=IMAGE_PYTHON, container="/images/coursekit.sif")}
    table = ev.versions_table(jobs)
    assert table.column("python_executable") == [VENV_PYTHON, IMAGE_PYTHON]
    assert table.columns == list(ev.VERSION_COLUMNS)
    results = ev.environment_claims(table, image="/images/coursekit.sif")
    assert results["venv"].holds and results["container"].holds


def test_container_claim_fails_when_the_job_did_not_run_in_the_image(tmp_path: Path) -> None:
    """Planted: a 'container' job whose summary names no container and the venv's Python (singularity left out)."""
    jobs = {ev.VENV: _run(tmp_path / "v", python_executable=VENV_PYTHON, container=None),
            ev.CONTAINER: _run(tmp_path / "c", python_executable=VENV_PYTHON, container=None)}
    with pytest.raises(AssertionError, match="inside the image"):
        ev.environment_claims(ev.versions_table(jobs))


def test_container_claim_fails_on_another_image(tmp_path: Path) -> None:
    jobs = {ev.VENV: _run(tmp_path / "v", python_executable=VENV_PYTHON, container=None),
            ev.CONTAINER: _run(tmp_path / "c", python_executable=IMAGE_PYTHON, container="/images/old.sif")}
    with pytest.raises(AssertionError, match="inside the image"):
        ev.environment_claims(ev.versions_table(jobs), image="/images/coursekit.sif")


def test_venv_claim_fails_inside_a_container_and_the_container_one_is_not_checked_alone(tmp_path: Path) -> None:
    inside = {ev.VENV: _run(tmp_path / "v", python_executable=IMAGE_PYTHON, container="/images/coursekit.sif")}
    with pytest.raises(AssertionError, match="outside any container"):
        ev.environment_claims(ev.versions_table(inside))
    alone = {ev.VENV: _run(tmp_path / "w", python_executable=VENV_PYTHON, container=None)}
    assert ev.environment_claims(ev.versions_table(alone))["container"].holds is None


@pytest.mark.parametrize("with_runtime", [False, True])
def test_the_container_job_is_submitted_only_where_it_can_run(course: Path, monkeypatch: pytest.MonkeyPatch,
                                                             with_runtime: bool) -> None:
    import coursekit.jobs

    image = course / "coursekit.sif"
    image.write_bytes(b"SIF")
    calls: list[dict[str, Any]] = []

    def submit_jobs(command: str, n_gpu: int, name: str, **options: Any) -> list[_Job]:
        calls.append({"command": command, "name": name, **options})
        return [_Job(course / name)]

    monkeypatch.setattr(coursekit.jobs, "submit_jobs", submit_jobs)
    monkeypatch.setattr(ev, "wait_all", lambda jobs, timeout_s: ["COMPLETED"] * len(jobs))
    monkeypatch.setattr(ev, "container_runtime", lambda: "/usr/bin/singularity" if with_runtime else None)
    jobs = ev.run_environments(CONFIG, image=image, name="env", time_max="00:05:00")
    assert list(jobs) == ([ev.VENV, ev.CONTAINER] if with_runtime else [ev.VENV])
    assert calls[0]["name"] == "env-venv" and "singularity" not in calls[0]
    if with_runtime:
        assert calls[1]["singularity"] == str(image) and calls[1]["command"] == calls[0]["command"]
    with pytest.raises(ValueError, match="image="):
        ev.run_environments(CONFIG, singularity=str(image))
    calls.clear()
    earlier = _Job(course / "gpu-view-fed")
    assert ev.run_environments(CONFIG, image=image, venv_job=earlier)[ev.VENV] is earlier  # reused, not submitted
    assert [c["name"] for c in calls] == (["env-container"] if with_runtime else [])
