"""search_log: idr_pytools' return shape, exact job-id matching, sorting, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit.jobs.logs import job_logs, looks_like_job_id, same_job, search_log


def make_job(root: Path, name: str, job_id: str, tasks: int = 1, extra: tuple[str, ...] = ()) -> Path:
    folder = root / name / job_id
    folder.mkdir(parents=True)
    for task in range(tasks):
        (folder / f"{job_id}_{task}_log.out").write_text(f"out {job_id} {task}\n")
        (folder / f"{job_id}_{task}_log.err").write_text("")
    for file_name in (f"{job_id}_submission.sh", "metrics.jsonl", *extra):
        (folder / file_name).write_text("")
    return folder


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    make_job(root, "bs64", "123")
    make_job(root, "bs64", "1123")
    make_job(root, "bs64", "1234")
    make_job(root, "bs256", "9", tasks=2)
    make_job(root, "bs256", "20251126")  # an id that holds "123" and a date
    make_job(root, "sweep", "500_0")
    make_job(root, "sweep", "500_1")
    make_job(root, "sweep", "5000")
    return root


def names(paths: list[str]) -> list[str]:
    return [Path(p).name for p in paths]


def test_returns_sorted_stdout_paths_by_default(jobs: Path) -> None:
    found = search_log(root=jobs)
    assert isinstance(found, list) and all(isinstance(p, str) for p in found)
    assert names(found) == ["9_0_log.out", "9_1_log.out", "123_0_log.out", "500_0_0_log.out", "500_1_0_log.out",
                            "1123_0_log.out", "1234_0_log.out", "5000_0_log.out", "20251126_0_log.out"]
    assert all(Path(p).is_file() for p in found)


def test_with_err_gives_idr_pytools_dict(jobs: Path) -> None:
    found = search_log("bs256", with_err=True, root=jobs)
    assert set(found) == {"stdout", "stderr"}
    assert names(found["stdout"]) == ["9_0_log.out", "9_1_log.out", "20251126_0_log.out"]
    assert names(found["stderr"]) == ["9_0_log.err", "9_1_log.err", "20251126_0_log.err"]


def test_job_id_matches_exactly_never_as_substring(jobs: Path) -> None:
    assert names(search_log(contains="123", root=jobs)) == ["123_0_log.out"]
    assert names(search_log(contains=123, root=jobs)) == ["123_0_log.out"]  # an int works too
    assert names(search_log(contains="1126", root=jobs)) == []  # digits of a date-like id
    assert names(search_log(contains="500", root=jobs)) == ["500_0_0_log.out", "500_1_0_log.out"]
    assert names(search_log(contains="500_1", root=jobs)) == ["500_1_0_log.out"]
    assert names(search_log(contains="50", root=jobs)) == []


def test_name_is_a_glob_pattern(jobs: Path) -> None:
    assert names(search_log("bs*", contains="9", root=jobs)) == ["9_0_log.out", "9_1_log.out"]
    assert search_log("bs64", contains="9", root=jobs) == []
    assert names(search_log("sw?ep", root=jobs)) == ["500_0_0_log.out", "500_1_0_log.out", "5000_0_log.out"]


def test_other_contains_is_a_substring_of_the_relative_path(jobs: Path) -> None:
    assert names(search_log(contains="_1_log", root=jobs)) == ["9_1_log.out"]
    assert len(search_log(contains="bs2", root=jobs)) == 3
    assert search_log(contains="no-such-thing", root=jobs) == []


def test_ignores_files_that_are_not_job_logs(tmp_path: Path) -> None:
    root = tmp_path / "jobs"
    folder = make_job(root, "demo", "42", extra=("41_0_log.out", "42_0_log.out.bak", "notes.txt"))
    (root / "demo" / "stray_0_log.out").write_text("")  # a file where job folders belong
    assert search_log(root=root) == [str(folder / "42_0_log.out")]


def test_missing_jobs_folder_gives_empty_results(tmp_path: Path) -> None:
    assert search_log(root=tmp_path / "nowhere") == []
    assert search_log(root=tmp_path / "nowhere", with_err=True) == {"stdout": [], "stderr": []}


def test_default_root_is_the_course_jobs_folder(jobs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(jobs.parent))
    assert names(search_log("bs64", contains="1234")) == ["1234_0_log.out"]


@pytest.mark.parametrize("bad", [{"name": ""}, {"name": None}, {"contains": ["1"]}, {"contains": 1.5}])
def test_bad_arguments_raise_value_error_naming_them(jobs: Path, bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        search_log(root=jobs, **bad)


def test_job_logs_of_one_folder_task_order(tmp_path: Path) -> None:
    folder = make_job(tmp_path, "ddp", "7", tasks=12)
    assert [p.name for p in job_logs(folder)][:3] == ["7_0_log.out", "7_1_log.out", "7_2_log.out"]
    assert len(job_logs(folder, "err")) == 12
    with pytest.raises(ValueError, match="stream"):
        job_logs(folder, "stdout")


def test_job_id_helpers() -> None:
    assert looks_like_job_id("12") and looks_like_job_id("12_3")
    assert not looks_like_job_id("12a") and not looks_like_job_id("_3") and not looks_like_job_id("")
    assert same_job("12_3", "12") and same_job("12", "12")
    assert not same_job("123", "12") and not same_job("12_3", "12_30") and not same_job("12", "12_3")
