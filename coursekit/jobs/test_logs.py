"""search_log: idr_pytools' return shape, exact job-id matching, sorting, bad input."""

from __future__ import annotations

import os
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


def test_returns_sorted_stdout_paths_one_per_job_by_default(jobs: Path) -> None:
    found = search_log(root=jobs)
    assert isinstance(found, list) and all(isinstance(p, str) for p in found)
    assert names(found) == ["9_0_log.out", "123_0_log.out", "500_0_0_log.out", "500_1_0_log.out",
                            "1123_0_log.out", "1234_0_log.out", "5000_0_log.out", "20251126_0_log.out"]
    assert all(Path(p).is_file() for p in found)


def test_every_task_with_all_tasks(jobs: Path) -> None:
    assert names(search_log("bs256", root=jobs, all_tasks=True)) == ["9_0_log.out", "9_1_log.out",
                                                                     "20251126_0_log.out"]
    found = search_log(contains="9", with_err=True, root=jobs, all_tasks=True)
    assert names(found["stderr"]) == ["9_0_log.err", "9_1_log.err"]
    with pytest.raises(ValueError, match="all_tasks"):
        search_log(root=jobs, all_tasks="yes")


def test_dlo_jz_reshape_stays_aligned_with_multi_task_jobs(jobs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(jobs.parent))
    monkeypatch.setenv("COURSEKIT_SITE", "local")

    make_job(jobs, "ddp", "70", tasks=4)
    make_job(jobs, "ddp", "71", tasks=1)
    make_job(jobs, "ddp", "72", tasks=8)
    ids = ["70", "71", "72"]
    paths = np.array([search_log(contains=j) for j in ids]).reshape(-1)  # DLO-JZ's own line
    assert [Path(p).name for p in paths] == ["70_0_log.out", "71_0_log.out", "72_0_log.out"]
    errs = np.array([search_log(contains=j, with_err=True)["stderr"] for j in ids]).reshape(-1)
    assert [Path(p).name for p in errs] == ["70_0_log.err", "71_0_log.err", "72_0_log.err"]


def test_with_err_gives_idr_pytools_dict(jobs: Path) -> None:
    found = search_log("bs256", with_err=True, root=jobs)
    assert type(found) is not list and isinstance(found, dict) and set(found) == {"stdout", "stderr"}
    assert names(found["stdout"]) == ["9_0_log.out", "20251126_0_log.out"]
    assert names(found["stderr"]) == ["9_0_log.err", "20251126_0_log.err"]
    assert all(isinstance(found[k], list) and all(isinstance(p, str) for p in found[k]) for k in found)
    with pytest.raises(ValueError, match="with_err"):
        search_log(with_err="yes", root=jobs)


def test_results_show_one_path_per_line_in_a_notebook(jobs: Path) -> None:
    from IPython.lib.pretty import pretty

    found = search_log("bs256", with_err=True, root=jobs)
    shown = pretty(found)
    assert "{" not in shown and shown.splitlines()[0] == "stdout:"
    assert shown.splitlines()[1].strip().endswith("9_0_log.out")
    assert pretty(search_log("bs256", root=jobs)).splitlines()[1].endswith("20251126_0_log.out")
    assert pretty(search_log("nothing", root=jobs)) == "no log found"
    assert found == {"stdout": found["stdout"], "stderr": found["stderr"]}  # still compares as a dict


def test_job_id_matches_exactly_never_as_substring(jobs: Path) -> None:
    assert names(search_log(contains="123", root=jobs)) == ["123_0_log.out"]
    assert names(search_log(contains=123, root=jobs)) == ["123_0_log.out"]  # an int works too
    assert names(search_log(contains="1126", root=jobs)) == []  # digits of a date-like id
    assert names(search_log(contains="500", root=jobs)) == ["500_0_0_log.out", "500_1_0_log.out"]
    assert names(search_log(contains="500_1", root=jobs)) == ["500_1_0_log.out"]
    assert names(search_log(contains="50", root=jobs)) == []


def test_name_is_a_glob_pattern(jobs: Path) -> None:
    assert names(search_log("bs*", contains="9", root=jobs)) == ["9_0_log.out"]
    assert search_log("bs64", contains="9", root=jobs) == []
    assert names(search_log("sw?ep", root=jobs)) == ["500_0_0_log.out", "500_1_0_log.out", "5000_0_log.out"]


def test_other_contains_is_a_substring_of_the_relative_path(jobs: Path) -> None:
    assert names(search_log(contains="_1_log", root=jobs, all_tasks=True)) == ["9_1_log.out"]
    assert search_log(contains="_1_log", root=jobs) == []  # task 1's log is not the job's log
    assert len(search_log(contains="bs2", root=jobs)) == 2  # one log per job
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


def test_cached_listing_sees_new_logs_of_a_running_job(tmp_path: Path) -> None:
    import os

    from coursekit.jobs import logs

    root = tmp_path / "jobs"
    folder = make_job(root, "ddp", "88")
    old = 1_000_000_000
    os.utime(folder, (old, old))  # listed long after its last change: the listing is cached
    assert names(search_log(root=root, all_tasks=True)) == ["88_0_log.out"]
    assert str(folder) in logs._folder_logs
    (folder / "88_1_log.out").write_text("")  # task 1 starts: the folder's mtime moves
    assert names(search_log(root=root, all_tasks=True)) == ["88_0_log.out", "88_1_log.out"]


def test_fresh_folders_are_not_cached_and_finished_ones_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from coursekit.jobs import logs

    monkeypatch.setattr(logs, "RECENT_CHANGE_NS", 600 * 10**9)  # "fresh" however slowly a busy machine runs this
    root = tmp_path / "jobs"
    fresh = make_job(root, "a", "1")
    finished = make_job(root, "a", "2", extra=("2_0_result.pkl",))
    search_log(root=root)
    assert str(fresh) not in logs._folder_logs, "a folder changed in the last seconds may still change"
    assert logs._folder_logs[str(finished)][0] is True
    (fresh / "1_1_log.out").write_text("")
    os.utime(fresh, (1_000_000_000, 1_000_000_000))
    assert names(search_log(root=root, all_tasks=True)) == ["1_0_log.out", "1_1_log.out", "2_0_log.out"]


def forget_this_process() -> None:
    from coursekit.jobs import logs

    logs._folder_logs.clear()
    logs._indexes.clear()


def test_a_new_process_reads_finished_jobs_from_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.jobs import logs

    root = tmp_path / "jobs"
    done = [make_job(root, "sweep", str(i), tasks=2, extra=(f"{i}_0_result.pkl",)) for i in (3, 4)]
    running = make_job(root, "sweep", "5")
    expected = search_log(root=root, with_err=True)
    assert (root / logs.INDEX_FILE).is_file()
    forget_this_process()
    listed: list[str] = []
    real_listdir = os.listdir
    monkeypatch.setattr(logs.os, "listdir", lambda path: listed.append(path) or real_listdir(path))
    assert search_log(root=root, with_err=True) == expected
    assert listed == [str(running)], "finished folders come from the index, only the running job is listed"
    assert all(str(folder) not in listed for folder in done)


def test_index_never_returns_deleted_folders_and_bad_indexes_are_ignored(tmp_path: Path) -> None:
    import shutil

    from coursekit.jobs import logs

    root = tmp_path / "jobs"
    make_job(root, "a", "1", extra=("1_0_result.pkl",))
    gone = make_job(root, "a", "2", extra=("2_0_result.pkl",))
    search_log(root=root)
    shutil.rmtree(gone)
    forget_this_process()
    assert names(search_log(root=root)) == ["1_0_log.out"]
    for bad in ("not json", '{"version": 1, "folders": {"../../etc/1": [[0, "out"]]}}', '{"version": 99}',
                '{"version": 1, "folders": {"a/1": [[0, "exe"]]}}'):
        (root / logs.INDEX_FILE).write_text(bad)
        forget_this_process()
        assert names(search_log(root=root)) == ["1_0_log.out"], bad
