"""A race folder nobody can squat or take over: the baseline is the instructor's only (coursekit.toml's
``instructor``), the notebook's pretend rival cannot be anyone's pseudonym, and the instructor clears a round
into an archive of their own. (Squatted runs files: test_leaderboard_owners.py; the sticky folder with real
users: tests/integration/test_race_evidence.py.)"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from coursekit.labs import lab09_race as race
from coursekit.labs.kit.participant import check_pseudonym
from coursekit.labs.lab09_race import leaderboard as lb

BOB_UID = 60402
BOB, ME = lb.user_name(BOB_UID), lb.user_name(os.geteuid())
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


def summary(seed: int, seconds: float = 1.0) -> dict[str, Any]:
    return {"target_reached": True, "time_to_target_s": seconds, "steps_to_target": 10, "config": {},
            "code_hash": "k", "val_hash": "v", "val_samples": 400, "device_name": "cpu", "seed": seed}


def course_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instructor: str) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    (tmp_path / "coursekit.toml").write_text(f'instructor = "{instructor}"\nleaderboard = "race/leaderboard.jsonl"\n')
    return tmp_path / "race" / "leaderboard.jsonl"


def test_only_the_instructor_posts_the_baseline_and_a_participant_is_told_whom_to_ask(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = course_with(tmp_path, monkeypatch, instructor="someone-else")
    assert not race.may_post_baseline()
    rows = [{"job_id": f"b{s}", "summary": summary(s)} for s in range(3)]
    with pytest.raises(PermissionError, match="posted by the instructor only \\(Unix user someone-else\\): ask them"):
        race.post_runs(race.BASELINE, "baseline", rows, board)
    assert not board.parent.exists() or not any(board.parent.iterdir()), "a refused baseline left a file"
    assert "ask them to run lab 09's baseline cell" in race.baseline_advice()
    (tmp_path / "coursekit.toml").write_text(f'instructor = "{ME}"\nleaderboard = "race/leaderboard.jsonl"\n')
    assert race.may_post_baseline() and race.post_runs(race.BASELINE, "baseline", rows, board) == 3


def test_the_baseline_pace_is_its_own_seeds_epochs_to_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = course_with(tmp_path, monkeypatch, instructor=ME)
    assert race.baseline_epochs(board) == []  # nothing posted: a notebook says what the baseline may train instead
    paces = {0: 6.8, 1: 5.5, 2: None}  # seed 2 missed the target
    rows = [{"job_id": f"b{s}", "summary": {**summary(s), "epochs_to_target": e, "target_reached": e is not None}}
            for s, e in paces.items()]
    race.post_runs(race.BASELINE, "baseline", rows, board)
    race.post_runs("ada", "tuned", [{"job_id": "a0", "summary": {**summary(0), "epochs_to_target": 2.0}}], board)
    assert race.baseline_epochs(board) == [5.5, 6.8]
    again = {"job_id": "b1x", "summary": {**summary(1), "epochs_to_target": 7.5, "target_reached": True}}
    race.post_runs(race.BASELINE, "baseline", [again], board)  # seed 1 posted again: its latest run counts
    assert race.baseline_epochs(board) == [6.8, 7.5]
    assert race.baseline_epochs(board, round_=2) == []


@as_root
def test_a_baseline_posted_by_anyone_but_the_instructor_is_marked_whatever_its_claim_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = course_with(tmp_path, monkeypatch, instructor=ME)
    board.parent.mkdir(mode=0o1777)
    line = json.dumps(race.run_record(race.BASELINE, "baseline", summary(0, 0.1), "x0"))
    theirs = board.parent / f"{BOB}.jsonl"
    theirs.write_text(line + "\n")  # bob ran lab 09 first, posted a baseline and claimed its name
    os.chown(theirs, BOB_UID, BOB_UID)
    claim = board.parent / f"{race.BASELINE}.claim"
    claim.write_text("claimed\n")
    os.chown(claim, BOB_UID, BOB_UID)
    race.append_run(race.run_record(race.BASELINE, "baseline", summary(0, 2.0), "i0"), board)  # the instructor's
    runs = {r["user"]: r for r in race.read_runs(board)}
    assert runs[ME]["not_theirs"] is None, runs[ME]["not_theirs"]
    assert f"'baseline' is Unix user {ME}'s only (coursekit.toml), posted by {BOB}" == runs[BOB]["not_theirs"]
    assert race.has_baseline(board)


def test_the_pretend_rival_is_a_name_no_participant_can_choose() -> None:
    rival = race.rival_name("ada")
    assert rival == "ada-rival" and race.rival_name("bob") != rival
    with pytest.raises(ValueError):
        check_pseudonym(rival)  # no participant can post under it, nor claim it
    assert race.run_record(rival, "small-val", summary(0), "1")["participant"] == rival
    with pytest.raises(ValueError):
        race.rival_name("Bob!")
    with pytest.raises(ValueError):
        race.run_record("x-y-rival", "s", summary(0), "1")


@as_root
def test_the_instructor_clears_a_round_into_an_archive_of_their_own(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    board = course_with(tmp_path, monkeypatch, instructor=ME)
    folder = board.parent
    folder.mkdir(mode=0o1777)
    folder.chmod(0o1777)
    race.append_run(race.run_record("ada", "fast", summary(0), "1"), board)
    theirs = folder / f"{BOB}.jsonl"
    theirs.write_text(json.dumps(race.run_record("bob", "x", summary(0), "2")) + "\n")
    os.chown(theirs, BOB_UID, BOB_UID)
    (folder / "archive").mkdir()  # a participant made "archive" first
    os.chown(folder / "archive", BOB_UID, BOB_UID)
    archive, moved = race.clear_round(board)
    assert sorted(moved) == sorted([f"{ME}.jsonl", f"{BOB}.jsonl", "ada.claim"])
    assert archive.parent.name.startswith("archive.") and archive.parent.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(archive.parent.stat().st_mode) == 0o755 and (archive / f"{BOB}.jsonl").stat().st_uid == BOB_UID
    assert race.read_board(board) == ([], []), "the archive is read as the new round"
    race.append_run(race.run_record("ada", "fast", summary(0), "3"), board)  # a new round: ada claims again
    assert [r["job_id"] for r in race.read_runs(board)] == ["3"]


def test_nobody_claims_the_baseline_but_the_instructor_and_the_refusal_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    board = course_with(tmp_path, monkeypatch, instructor="someone-else")
    board.parent.mkdir(mode=0o1777)
    for attempt in (lambda: race.append_run(race.run_record(race.BASELINE, "baseline", summary(0), "b0"), board),
                    lambda: lb.claim(race.BASELINE, board)):
        with pytest.raises(PermissionError, match=f"{ME} may not post as 'baseline': that name is Unix user "
                           "someone-else's only .*post under your own pseudonym: labs.choose_pseudonym"):
            attempt()
    assert not any(board.parent.iterdir()), "a refused claim left a file"


def test_a_participant_cannot_claim_another_users_login_as_pseudonym(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    from coursekit.labs.kit import pool

    logins = [u for u in pwd.getpwall() if u.pw_uid != 0 and pool.CLAIMABLE.fullmatch(u.pw_name)]
    me, other = (next((u for u in logins if u.pw_name == name), None) for name in ("bob", "ada"))
    if me is None or other is None:
        me, other = logins[0], logins[1]
    monkeypatch.setattr(os, "geteuid", lambda: me.pw_uid)  # this process, as that participant
    with pytest.raises(PermissionError, match=f"{me.pw_name} may not post as '{other.pw_name}': it is the login of "
                       f"another user of this machine \\({other.pw_name}\\).*labs.choose_pseudonym"):
        pool.claim(other.pw_name, tmp_path)
    assert not any(tmp_path.iterdir())
    assert pool.reserved_for(me.pw_name) == me.pw_name and pool.reserved_for("zq9x7") is None


@as_root
def test_a_login_claimed_by_hand_before_its_user_posts_stays_that_users(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """bob makes ``<ada's login>.claim`` with his editor and posts under her login first: once she posts under
    it, her runs count and his are marked (a login's pseudonym is its user's, whatever claims or order say)."""
    board = course_with(tmp_path, monkeypatch, instructor=ME)
    board.parent.mkdir(mode=0o1777)
    ada_uid = 60401
    ada = lb.user_name(ada_uid)  # uid60401: her login, the pseudonym bob squats

    def post(uid: int, seconds: float, posted: float) -> None:
        path = board.parent / f"{lb.user_name(uid)}.jsonl"
        record = {**race.run_record("ada", "fast", summary(0, seconds), f"{uid}-0"), "participant": ada,
                  "posted": posted}
        path.write_text(json.dumps(record) + "\n")
        os.chown(path, uid, uid)

    claim = board.parent / f"{ada}.claim"
    claim.write_text("bob\n")
    os.chown(claim, BOB_UID, BOB_UID)
    post(BOB_UID, 0.1, posted=1.0)
    post(ada_uid, 1.0, posted=2.0)
    runs = {r["user"]: r for r in race.read_runs(board)}
    assert runs[ada]["not_theirs"] is None, runs[ada]["not_theirs"]
    assert f"{ada!r} belongs to Unix user {ada}, posted by {BOB}" in runs[BOB]["not_theirs"]
