"""A room's pooled results: one file per Unix user in a shared folder, records attributed to the file's owner,
concurrent posts never lose a line, a malformed or foreign record is reported and ignored."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from coursekit.labs.kit import pool

BOB_UID = 60412  # no such user on a test machine: named uid60412
WRITERS, RECORDS_EACH = 4, 50
WRITER_TIMEOUT_S = 120  # 50 posts take well under a second each on a busy machine
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "coursekit.toml").write_text("")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    return tmp_path


def test_posted_records_come_back_with_their_poster_and_the_folder_is_shared(course: Path) -> None:
    assert pool.post("lab06-red", [{"participant": "ada", "n_gpu": 1, "img_s": 10.0},
                                   {"participant": "ada", "n_gpu": 2, "img_s": 19.0}]) == 2
    records, problems = pool.read("lab06-red")
    assert problems == []
    assert [(r["n_gpu"], r["img_s"]) for r in records] == [(1, 10.0), (2, 19.0)]
    me = pool.user_name(os.geteuid())
    assert {r["user"] for r in records} == {me} and pool.counted(records) == records
    folder = course / "pools" / "lab06-red"
    assert stat.S_IMODE(folder.stat().st_mode) == pool.SHARED_FOLDER_MODE
    assert stat.S_IMODE((folder / f"{me}.jsonl").stat().st_mode) == pool.RUN_FILE_MODE
    assert (folder / "ada.claim").is_file()


def test_bad_input_is_a_clear_error_and_nothing_is_written(course: Path) -> None:
    with pytest.raises(ValueError, match="pool name 'Lab 06'"):
        pool.post("Lab 06", [{"participant": "ada"}])
    with pytest.raises(ValueError, match="needs a 'participant'"):
        pool.post("lab06", [{"participant": "ada", "x": 1}, {"x": 2}])
    assert pool.read("lab06") == ([], [])


def _post_many(course: str, writer: int) -> None:
    os.environ["COURSEKIT_COURSE_DIR"] = course
    for index in range(RECORDS_EACH):
        pool.post("seeds", [{"participant": f"p{writer}", "seed": index, "pad": "x" * 2000}])


def test_concurrent_posts_lose_and_tear_nothing(course: Path) -> None:
    # one fresh process per writer (spawn, no Pool): a forked Pool, from a test worker with threads of its own,
    # once left a worker blocked on a lock its queue held at the fork, and Pool.terminate waiting forever
    writers = [multiprocessing.get_context("spawn").Process(target=_post_many, args=(str(course), w))
               for w in range(WRITERS)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(WRITER_TIMEOUT_S)
        if writer.is_alive():
            writer.kill()
    assert [w.exitcode for w in writers] == [0] * WRITERS, "a writer failed or did not end in time"
    records, problems = pool.read("seeds")
    assert problems == []
    assert sorted((r["participant"], r["seed"]) for r in records) == sorted(
        (f"p{w}", i) for w in range(WRITERS) for i in range(RECORDS_EACH))


@as_root
def test_a_bad_or_foreign_record_is_reported_and_never_counted(course: Path) -> None:
    pool.post("room", [{"participant": "ada", "value": 1.0}])
    folder = course / "pools" / "room"
    bob_file = folder / f"{pool.user_name(BOB_UID)}.jsonl"
    lines = ["{torn", json.dumps([1, 2]), json.dumps({"value": 3.0}),  # not records of the pool
             json.dumps({"participant": "ada", "value": 99.0, "user": "root", "not_theirs": None}),  # ada's name
             json.dumps({"participant": "bob", "value": 2.0})]
    bob_file.write_text("\n".join(lines) + "\n")
    os.chown(bob_file, BOB_UID, BOB_UID)
    records, problems = pool.read("room")
    assert any("uid60412.jsonl line 1: not a record of the pool" in p for p in problems)
    assert any("3 lines in all" in p for p in problems), problems
    by_value = {r["value"]: r for r in records}
    assert set(by_value) == {1.0, 2.0, 99.0}
    assert by_value[99.0]["user"] == "uid60412" and "belongs to Unix user" in by_value[99.0]["not_theirs"]
    assert [r["value"] for r in pool.counted(records)] == [1.0, 2.0]
    writable = folder / f"{pool.user_name(BOB_UID)}.{BOB_UID}.{'a' * 16}.jsonl"
    writable.write_text(json.dumps({"participant": "eve", "value": 5.0}) + "\n")
    os.chown(writable, BOB_UID, BOB_UID)
    writable.chmod(0o666)
    records, _ = pool.read("room")
    assert 5.0 in [r["value"] for r in records] and 5.0 not in [r["value"] for r in pool.counted(records)]
    (folder / "writable.jsonl").write_text(json.dumps({"participant": "eve", "value": 6.0}) + "\n")  # root's file
    records, problems = pool.read("room")
    assert 6.0 not in [r["value"] for r in records], "a file not named after its owner was read"
    assert any("writable.jsonl: named after writable but owned by root: ignored" in p for p in problems), problems


@as_root
def test_nobody_appends_to_another_users_file_and_a_squatted_name_costs_its_user_nothing(course: Path) -> None:
    pool.post("room", [{"participant": "ada", "value": 1.0}])
    mine = pool.own_file(course / "pools" / "room")
    os.chown(mine, BOB_UID, BOB_UID)  # as if bob had made "my" file first
    pool.post("room", [{"participant": "ada", "value": 2.0}])  # posted elsewhere, not appended to his
    assert mine.read_text().count("\n") == 1
    records, problems = pool.read("room")
    assert [(r["value"], r["user"]) for r in records] == [(2.0, pool.user_name(os.geteuid()))]
    assert any(f"{mine}: named after {pool.user_name(os.geteuid())} but owned by uid60412: ignored" in p
               for p in problems), problems
    with pytest.raises(PermissionError, match="belongs to uid60412, not to you"):
        pool.open_own(mine, os.O_WRONLY | os.O_APPEND)
