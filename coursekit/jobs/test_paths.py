"""One owner of the job folders: a site whose ``log_folder`` is not the course's ``jobs/`` keeps its jobs
there, and everything that looks for a job (get_job without the registry, search_log, the templates'
``python -m coursekit.sites``) looks there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.course import CoursePaths, course_paths
from coursekit.jobs import registry
from coursekit.jobs.handle import get_job, list_jobs
from coursekit.jobs.logs import search_log
from coursekit.jobs.submit import submit_jobs
from coursekit.sites import SITE_ENV, load_site, site_paths

COMMAND_TIMEOUT_S = 60


@pytest.fixture()
def scratch_course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A course on the local site whose jobs go to ``$SCRATCH_FOR_TEST/coursekit-jobs``, not to ``jobs/``."""
    course = tmp_path / "course"
    course.mkdir()
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(course))
    monkeypatch.setenv("SCRATCH_FOR_TEST", str(tmp_path / "scratch"))
    monkeypatch.chdir(course)
    monkeypatch.delenv(SITE_ENV, raising=False)
    (course / "coursekit.toml").write_text('site = "local"\n[site_defaults]\nlog_folder = "$SCRATCH_FOR_TEST/coursekit-jobs"\n')
    return course


def test_course_paths_resolve_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = CoursePaths(tmp_path, "runs")
    assert paths.jobs_root == tmp_path / "runs"
    assert paths.run_root("bs") == tmp_path / "runs" / "bs"
    assert paths.job_folder("bs", "12_3") == tmp_path / "runs" / "bs" / "12_3"
    assert paths.job_folder("bs") == tmp_path / "runs" / "bs" / "%j"  # what submitit's executor is given
    assert paths.registry == tmp_path / "jobs" / "registry.jsonl"  # the course's, whatever the log folder
    monkeypatch.setenv("RUNS_FOR_TEST", "/somewhere")
    assert CoursePaths(tmp_path, "$RUNS_FOR_TEST/jobs").jobs_root == Path("/somewhere/jobs")


def test_a_site_log_folder_owns_submission_lookup_and_logs(scratch_course: Path, tmp_path: Path) -> None:
    root = tmp_path / "scratch" / "coursekit-jobs"
    assert load_site().jobs_root() == site_paths().jobs_root == root
    (job,) = submit_jobs("-c 'print(\"from the scratch folder\")'", name="scratch")
    assert job.folder == root / "scratch" / job.job_id
    assert job.wait(COMMAND_TIMEOUT_S) == "COMPLETED"
    assert registry.registry_path() == course_paths().registry == scratch_course / "jobs" / "registry.jsonl"
    assert [j.job_id for j in list_jobs("scratch")] == [job.job_id]

    registry.registry_path().unlink()  # forget the registry: the job must be found in its folder
    found = get_job(job.job_id)
    assert (found.folder, found.scheduler, found.state) == (job.folder, "local", "COMPLETED")
    assert "from the scratch folder" in found.tail(5)
    assert search_log("scratch", job.job_id) == [str(job.stdout)]
    assert not (scratch_course / "jobs" / "scratch").exists()

    done = subprocess.run([sys.executable, "-m", "coursekit.sites"], capture_output=True, text=True, check=True,
                          timeout=COMMAND_TIMEOUT_S)  # what the sbatch templates ask
    assert done.stdout.strip() == str(root)


def test_a_job_nowhere_names_where_it_was_looked_for(scratch_course: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="coursekit-jobs"):
        get_job("4242")
