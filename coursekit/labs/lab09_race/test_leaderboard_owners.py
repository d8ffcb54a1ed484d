"""Who posted a run: the owner of the file it came from (one file per Unix user in the race folder), never a
field of the line; a pseudonym belongs to the user who claimed it first; what is not a run is reported."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import pytest

from coursekit.labs import lab09_race as race
from coursekit.labs.lab09_race import leaderboard as lb
from coursekit.train.config import TrainConfig

DRY = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16, batch_size=50,
                  epochs=10, lr=0.05, target_acc=0.6, eval_every=5, data_seed=0, progress="off", device="cpu")
RULES = race.Rules("dry", DRY, models=("mlp",), max_parameters=300_000)
ADA_UID, BOB_UID = 60401, 60402  # no such users on a test machine: named uid60401, uid60402
ADA, BOB = lb.user_name(ADA_UID), lb.user_name(BOB_UID)
ME = lb.user_name(os.geteuid())
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


def good_run(seed: int, seconds: float = 1.0, **extra: Any) -> dict[str, Any]:
    summary = {"target_reached": True, "time_to_target_s": seconds, "steps_to_target": 10, "config": DRY.to_dict(),
               "code_hash": race.code_hash(), "val_hash": "v", "val_samples": 400, "device_name": "cpu",
               "config_hash": "c", "num_parameters": 1000, "seed": seed}
    return {**race.run_record(extra.pop("participant", "ada"), extra.pop("submission", "fast"), summary,
                              f"j{seed}"), **extra}


def write_file(path: Path, lines: list[Any], uid: int | None = None, mode: int = 0o644) -> None:
    """A runs file as another user would have written it (JSON lines, or raw text lines)."""
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    if uid is not None:
        os.chown(path, uid, uid)
    path.chmod(mode)


def claim_as(folder: Path, pseudonym: str, uid: int) -> None:
    (folder / f"{pseudonym}.claim").write_text("claimed\n")
    os.chown(folder / f"{pseudonym}.claim", uid, uid)


@as_root
def test_a_run_belongs_to_the_owner_of_its_file_not_to_what_its_line_says(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"
    base = [good_run(s, 2.0, participant=race.BASELINE, submission="baseline") for s in range(3)]
    write_file(tmp_path / f"{ME}.jsonl", base)  # the instructor's (this user's) file: the baseline
    write_file(tmp_path / f"{ADA}.jsonl", [good_run(s, posted=100.0 + s) for s in range(3)], ADA_UID)
    claim_as(tmp_path, "ada", ADA_UID)
    # bob's own file: lines naming ada, saying they are ada's, posted "earlier", with a faster time
    forged = [good_run(s, 0.1, user=ADA, not_theirs=None, posted=1.0) for s in range(3)]
    write_file(tmp_path / f"{BOB}.jsonl", forged, BOB_UID)
    runs = race.read_runs(board)
    assert {r["user"] for r in runs if r["participant"] == "ada"} == {ADA, BOB}
    assert all(r["not_theirs"] is None for r in runs if r["user"] == ADA)
    assert all("pseudonym of another user" in r["not_theirs"] and f"belongs to Unix user {ADA}" in r["not_theirs"]
               for r in runs if r["user"] == BOB)

    table = race.standings(RULES, race.code_hash(), board)
    rows = [r for r in table if r["participant"] == "ada"]
    assert len(rows) == 2, "bob's forged runs joined or replaced ada's entry instead of standing apart"
    hers, his = (next(r for r in rows if r["user"] == who) for who in (ADA, BOB))
    assert hers["counts"] and hers["rank"] is not None and hers["time_to_target_s"] == 1.0, hers["marks"]
    assert not his["counts"] and his["rank"] is None and "pseudonym of another user" in his["marks"]
    assert [r["posted"] for r in hers["runs"]] == [100.0, 101.0, 102.0]  # her seeds, not replaced by his
    assert race.has_entry("ada", "fast", board) and not race.has_entry("ada", "slow", board)


@as_root
def test_without_a_claim_the_earliest_run_owns_the_pseudonym_and_a_forged_baseline_is_no_reference(
        tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"
    write_file(tmp_path / f"{ADA}.jsonl", [good_run(s, posted=10.0) for s in range(3)]
               + [good_run(s, participant=race.BASELINE, submission="baseline", posted=10.0) for s in range(3)],
               ADA_UID)
    other_val = [good_run(s, participant=race.BASELINE, submission="baseline", posted=20.0, val_hash="w")
                 for s in range(3)]
    write_file(tmp_path / f"{BOB}.jsonl", other_val + [good_run(s, posted=20.0, participant="bob") for s in range(3)],
               BOB_UID)
    rows = {(r["participant"], r["user"]): r for r in race.standings(RULES, race.code_hash(), board)}
    assert rows[(race.BASELINE, ADA)]["counts"] and rows[("ada", ADA)]["counts"]
    assert "pseudonym of another user" in rows[(race.BASELINE, BOB)]["marks"]
    assert rows[("bob", BOB)]["counts"], "bob's own entry was judged against his forged baseline"


@as_root
def test_a_squatted_runs_file_is_ignored_and_its_user_posts_to_a_spare_name_nobody_can_take(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"
    squatted = lb.own_runs_path(board)
    write_file(squatted, [good_run(s, 0.01) for s in range(3)], BOB_UID)  # bob made "my" file first, with runs
    race.append_run(good_run(0), board)  # never appended to his file; posted, without anybody's help
    assert squatted.read_text().count("\n") == 3
    (spare,) = [p for p in tmp_path.glob("*.jsonl") if p != squatted]
    assert spare.name.startswith(f"{ME}.{os.geteuid()}.") and spare.stat().st_uid == os.geteuid()
    race.append_run(good_run(1), board)
    assert len(spare.read_text().splitlines()) == 2, "the spare file is reused, not one per post"
    runs, problems = race.read_board(board)
    assert [(r["seed"], r["user"]) for r in runs] == [(0, ME), (1, ME)], "bob's lines in 'my' file were counted"
    assert any(f"{squatted}: named after {ME} but owned by {BOB}: ignored" in p for p in problems), problems
    # a spare name counts only for the uid it names: bob's copy of the pattern is ignored too
    fake = tmp_path / f"{ME}.{os.geteuid()}.{'0' * 16}.jsonl"
    write_file(fake, [good_run(2, 0.01)], BOB_UID)
    runs, problems = race.read_board(board)
    assert 2 not in [r["seed"] for r in runs] and any(str(fake) in p for p in problems)
    write_file(tmp_path / f"{BOB}.{os.geteuid()}.{'1' * 16}.jsonl", [good_run(2, 0.01)], BOB_UID)  # his name, not uid
    assert 2 not in [r["seed"] for r in race.read_runs(board)]


def test_own_file_is_readable_by_all_writable_by_its_owner_and_the_pseudonym_claimed(tmp_path: Path) -> None:
    board = tmp_path / "race" / "leaderboard.jsonl"
    old = os.umask(0o077)  # a hub server's umask would hide the file from the instructor
    try:
        race.append_run(good_run(0), board)
    finally:
        os.umask(old)
    mine = lb.own_runs_path(board)
    assert mine.parent == board.parent and mine.name == f"{lb.user_name(os.geteuid())}.jsonl"
    assert stat.S_IMODE(mine.stat().st_mode) == 0o644 and not board.exists()
    assert (board.parent / "ada.claim").stat().st_uid == os.geteuid()
    (run,) = race.read_runs(board)
    assert run["user"] == lb.user_name(os.geteuid()) and run["not_theirs"] is None
    assert "user" not in json.loads(mine.read_text()) and "not_theirs" not in json.loads(mine.read_text())
    assert lb.claim("ada", board) == lb.user_name(os.geteuid())
    with pytest.raises(ValueError, match="participant '../x'"):
        lb.claim("../x", board)


def test_a_file_others_can_write_is_read_but_never_ranked(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"  # a course from before: one shared file, mode 0666
    write_file(board, [good_run(s) for s in range(3)], mode=0o666)
    (row,) = race.standings(RULES, race.code_hash(), board)
    assert not row["counts"] and row["rank"] is None and "other users can write (mode 666)" in row["marks"]
    board.chmod(0o644)  # a single-user course's old file still counts
    (row,) = race.standings(RULES, race.code_hash(), board)
    assert row["counts"], row["marks"]


def test_malformed_lines_and_foreign_files_are_reported_and_skipped(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"
    write_file(tmp_path / f"{ME}.jsonl", ["{not json", "[1, 2]", json.dumps({"event": "submitted"}), "",
                                         json.dumps({"participant": 3, "submission": "x"})]
               + [good_run(s) for s in range(3)] + ['{"participant": "ada", "subm'])
    (tmp_path / "dir.jsonl").mkdir()
    (tmp_path / "link.jsonl").symlink_to(tmp_path / f"{ME}.jsonl")
    (tmp_path / "notes.txt").write_text("not a leaderboard file\n")
    runs, problems = race.read_board(board)
    assert [r["seed"] for r in runs] == [0, 1, 2]
    said = "\n".join(problems)
    assert f"{tmp_path / f'{ME}.jsonl'} line 1: not a run of the race" in said and "5 lines in all" in said
    assert f"{tmp_path / 'dir.jsonl'}: not a regular file" in said
    assert f"{tmp_path / 'link.jsonl'}: not read" in said and "notes.txt" not in said
    table = race.standings(RULES, race.code_hash(), board)
    assert len(table) == 1 and table[0]["counts"] and table.problems == problems
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(race.read_runs(board)) == 3
    assert [str(w.message) for w in caught] == [f"leaderboard: {problem}" for problem in problems]
    assert race.read_board(tmp_path / "no-such-folder" / "leaderboard.jsonl") == ([], [])


@as_root
def test_posting_skips_only_my_own_runs_already_posted(tmp_path: Path) -> None:
    board = tmp_path / "leaderboard.jsonl"
    write_file(tmp_path / f"{BOB}.jsonl", [good_run(0)], BOB_UID)  # bob pre-posts ada's job id j0 as "ada"
    summary = {k: v for k, v in good_run(0).items() if k in lb.RUN_FIELDS}
    assert race.post_runs("ada", "fast", [{"job_id": "j0", "summary": summary}], board) == 1
    assert race.post_runs("ada", "fast", [{"job_id": "j0", "summary": summary}], board) == 0


def test_the_live_view_redraws_when_any_runs_file_of_the_folder_changes(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets")
    board = tmp_path / "leaderboard.jsonl"
    view = race.LeaderboardView(RULES, race.code_hash(), board, refresh_s=60)
    view.refresh()
    assert view.table is not None and len(view.table) == 0
    write_file(tmp_path / f"{ME}.jsonl", [good_run(s, participant="kim") for s in range(3)] + ["{torn"])
    view.refresh()
    assert [row["participant"] for row in view.table] == ["kim"]
    assert "skipped: " in view.widget.value and f"{ME}.jsonl line 4: not a run of the race" in view.widget.value
