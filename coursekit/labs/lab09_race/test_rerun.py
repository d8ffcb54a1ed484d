"""The race's end: `coursekit instructor race verify` re-runs the top entries as the instructor and the board ranks
the verified times. Planted boards and re-run lines (files of other Unix users: chown, as root) for the judging
and the reader. The command itself (a participant refused, one real re-run on the local site) is tested from the
floor that may call the CLI: ``coursekit/test_instructor_race.py``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from coursekit.labs import lab09_race as race
from coursekit.labs.lab09_race import leaderboard as lb
from coursekit.labs.lab09_race import rerun
from coursekit.train.config import TrainConfig
from coursekit.train.target import config_hash

DRY = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16, batch_size=50,
                  epochs=10, lr=0.05, target_acc=0.6, eval_every=5, data_seed=0, progress="off", device="cpu")
RULES = race.Rules("dry", DRY, models=("mlp",), max_parameters=300_000)
KIT = race.code_hash()
ADA_UID, KIM_UID, BOB_UID = 60411, 60412, 60413  # no such users on a test machine: uid60411 ...
ADA, KIM, BOB = lb.user_name(ADA_UID), lb.user_name(KIM_UID), lb.user_name(BOB_UID)
ME = lb.user_name(os.geteuid())
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


def run(seed: int, seconds: float, participant: str, submission: str, config: TrainConfig = DRY,
        **extra: Any) -> dict[str, Any]:
    values = config.replace(batch_size=100, seed=seed).to_dict()
    summary = {"status": "completed", "target_reached": True, "time_to_target_s": seconds, "train_time_s": seconds,
               "total_time_s": seconds + 2.0, "steps_to_target": 10, "config": values, "code_hash": KIT,
               "val_hash": "v", "val_samples": 400, "device_name": "cpu", "config_hash": config_hash(values),
               "num_parameters": 1000, "seed": seed}
    return {**lb.run_record(participant, submission, summary, f"j{participant}{seed}"), "posted": time.time(), **extra}


def rerun_line(participant: str, submission: str, user: str, seed: int, seconds: float) -> dict[str, Any]:
    return {**run(seed, seconds, participant, submission), "participant": lb.RERUN,
            "submission": f"{participant}/{submission}", "job_id": f"v{participant}{seed}",
            "rerun_of": {"participant": participant, "submission": submission, "round": 1, "user": user}}


def write(path: Path, lines: list[dict[str, Any]], uid: int | None = None) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    if uid is not None:
        os.chown(path, uid, uid)
    path.chmod(0o644)


def claim(folder: Path, pseudonym: str, uid: int) -> None:
    (folder / f"{pseudonym}.claim").write_text("claimed\n")
    os.chown(folder / f"{pseudonym}.claim", uid, uid)


@as_root
def test_a_claim_ten_times_faster_than_its_rerun_loses_its_rank_a_reproduced_one_keeps_it_and_a_participants_rerun_line_is_ignored(
        race_course: Path) -> None:
    """kim claims 0.15 s (a time cut within her job's elapsed time: what accounting cannot see), the instructor's
    re-run takes 1.5 s: not reproduced, unranked. ada's re-run is within the spread: reproduced, ranked #1 by
    her verified time. bob writes re-run lines into his own file (a fast "verification" of his entry, a slow one
    of ada's): ignored, with a note. lee's entry, not re-run, ranks after the verified ones."""
    folder = race_course / "race"
    write(folder / f"{ADA}.jsonl", [run(s, t, "ada", "fast") for s, t in enumerate((1.0, 1.1, 0.9))], ADA_UID)
    write(folder / f"{KIM}.jsonl", [run(s, t, "kim", "cut") for s, t in enumerate((0.15, 0.16, 0.14))], KIM_UID)
    bob_runs = [run(s, 0.5, "bob", "mine") for s in range(3)]
    bob_reruns = ([rerun_line("bob", "mine", BOB, s, 0.5) for s in range(3)]
                  + [rerun_line("ada", "fast", ADA, s, 50.0) for s in range(3)])
    write(folder / f"{BOB}.jsonl", bob_runs + bob_reruns, BOB_UID)
    for name, uid in (("ada", ADA_UID), ("kim", KIM_UID), ("bob", BOB_UID)):
        claim(folder, name, uid)
    mine = [run(s, 2.0, lb.BASELINE, "baseline") for s in range(3)]
    mine += [rerun_line("ada", "fast", ADA, s, t) for s, t in enumerate((1.15, 1.05, 1.2))]
    mine += [rerun_line("kim", "cut", KIM, s, t) for s, t in enumerate((1.5, 1.6, 1.4))]
    write(folder / f"{ME}.jsonl", mine)

    before = race.entries(race.read_board()[0], RULES, KIT)  # the claimed board: kim first, then bob
    assert [r["participant"] for r in before if r["counts"]][:2] == ["kim", "bob"]
    table = race.standings(RULES, KIT)
    rows = {r["participant"]: r for r in table}
    assert table.verified and "verified_s" in table.columns and "verification" in table.columns
    kim, ada, bob = rows["kim"], rows["ada"], rows["bob"]
    assert not kim["counts"] and kim["rank"] is None and kim["verification"] == "NOT REPRODUCED"
    assert kim["verified_s"] == pytest.approx(1.5) and "10.0x the claimed" in kim["marks"]
    assert ada["counts"] and ada["rank"] == 1 and ada["verification"] == "reproduced"
    assert ada["verified_s"] == pytest.approx(1.1333, abs=1e-3), "bob's slow 're-run' of ada's entry was ignored"
    assert bob["verified_s"] is None and bob["verification"] == "claimed only", "bob's own 're-run' was ignored"
    assert bob["counts"] and bob["rank"] > ada["rank"], "claimed only: after the verified entries, though faster"
    assert rows[lb.BASELINE]["rank"] == 2  # the instructor's own baseline, by its time, among the verified
    assert any(f"re-run lines in {BOB}'s runs file ignored" in p and f"Unix user {ME}" in p for p in table.problems)
    assert all(r["participant"] != lb.RERUN for r in race.read_board()[0]), "a re-run line never joins the board"
    text = rerun.report(table, 1)
    assert "NOT REPRODUCED" in text and "final standings (verified times): #1 ada/fast 1.13 s" in text
    assert "not reproduced, unranked: kim/cut" in text


def test_rerun_lines_count_only_from_the_instructor(race_course: Path) -> None:
    """This user's own file, the course naming another instructor: its re-run lines are ignored, and this user
    may not verify (the command says whom to ask)."""
    (race_course / "coursekit.toml").write_text('site = "local"\ninstructor = "someone-else"\n')
    folder = race_course / "race"
    write(folder / f"{ME}.jsonl", [run(s, 2.0, "ada", "fast") for s in range(3)]
          + [rerun_line("ada", "fast", ME, s, 0.1) for s in range(3)])
    table = race.standings(RULES, KIT)
    assert not table.verified and "verified_s" not in table.columns
    assert any("only the re-runs of Unix user someone-else" in p for p in table.problems)
    with pytest.raises(PermissionError, match="only the re-runs of Unix user someone-else"):
        rerun.check_verifier()


def test_an_entry_is_rebuilt_from_its_records_or_refused_in_a_sentence() -> None:
    good = [run(s, 1.0, "ada", "fast") for s in range(3)]
    configs = rerun.rebuild(good, RULES)
    assert [c.seed for c in configs] == [0, 1, 2] and all(c.batch_size == 100 and c.out is None for c in configs)
    assert all(config_hash(c.to_dict()) == good[0]["config_hash"] for c in configs)
    edited = [{**good[0], "config": {**good[0]["config"], "lr": 9.0}}]
    with pytest.raises(ValueError, match="hashes to .* not to the run's config_hash .*: the line was edited"):
        rerun.rebuild(edited, RULES)
    with pytest.raises(ValueError, match="records no configuration"):
        rerun.rebuild([{**good[0], "config": None}], RULES)
    with pytest.raises(ValueError, match="records a configuration of seed 0"):
        rerun.rebuild([{**good[0], "seed": 5}], RULES)
    bent = run(0, 1.0, "ada", "x", config=DRY.replace(num_samples=100))
    with pytest.raises(ValueError, match="num_samples = 100, the race fixes it to 2000"):
        rerun.rebuild([bent], RULES)


def test_rerun_jobs_need_a_course_folder_of_ones_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a course folder the instructor cannot write (the hub's template, root's), the re-runs' job
    folders cannot be made: one sentence says where to run it from, before any job is submitted."""
    course = tmp_path / "template"
    course.mkdir()
    rerun.check_jobs_folder(course / "jobs", course)  # writable: nothing said
    monkeypatch.setattr(rerun.os, "access", lambda path, mode: Path(path) != course)
    with pytest.raises(PermissionError, match="their folders go to .*template/jobs.* you cannot write it: run "
                       "`coursekit instructor race verify` from a course folder of your own \\(on the hub: cd ~/course\\)"):
        rerun.check_jobs_folder(course / "jobs", course)
