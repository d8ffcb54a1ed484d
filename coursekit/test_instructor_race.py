"""`coursekit instructor race verify` as the instructor runs it: a participant is refused; one real re-run of
an entry on the local site (the judging and the reader: coursekit/labs/lab09_race/test_rerun.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from coursekit import cli
from coursekit.labs import lab09_race as race
from coursekit.labs.lab09_race import leaderboard as lb

ME = lb.user_name(os.geteuid())


def test_verify_refuses_a_participant(race_course: Path, capsys: pytest.CaptureFixture) -> None:
    (race_course / "coursekit.toml").write_text('site = "local"\ninstructor = "someone-else"\n')
    assert cli.main(["instructor", "race", "verify", "--top", "1"]) == 1
    err = capsys.readouterr().err
    assert "coursekit instructor race: error:" in err and "only the re-runs of Unix user someone-else" in err


def small_settings(original: Any) -> Any:
    """Lab 09's cpu settings on fewer images, an easier target, 2 seeds: runs of a second."""
    def settings(profile: str) -> dict[str, Any]:
        values = original(profile)
        values["baseline"] = values["baseline"].replace(num_samples=1000, epochs=10, target_acc=0.5)
        values["seeds"] = 2
        return values
    return settings


@pytest.mark.slow
def test_verify_really_reruns_an_entry_on_the_local_site(race_course: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    """A real entry (2 seeds, one job) posted by a participant's notebook code, then `race verify --top 1
    --no-wait` and `race verify --collect`: the instructor's re-run job really ran (its own job, named
    ws-verify-...), and the board shows its verified time beside the claim."""
    from coursekit import labs

    monkeypatch.setenv("COURSEKIT_SITE", "local")
    monkeypatch.setattr(race, "settings", small_settings(race.settings))
    s = race.settings("cpu")
    rules = race.Rules("lab 09", s["baseline"], models=s["models"], max_parameters=s["max_parameters"],
                       max_gpus=s["max_gpus"], seeds=s["seeds"])
    mine = s["baseline"].replace(**s["tuned"])
    entry = labs.run_sweep(rules.submission(mine), name=labs.job_name("ada", "race"), one_job=True, **s["job"],
                           timeout_s=120)
    assert race.post_runs("ada", race.entry_name(mine), entry) == 2, [r.get("state") for r in entry]
    claimed = race.standings(rules, race.code_hash()).one(participant="ada")
    assert claimed["counts"], claimed["marks"]

    assert cli.main(["instructor", "race", "verify", "--top", "1", "--profile", "cpu", "--no-wait"]) == 0
    out = capsys.readouterr().out
    assert "submitted 2 re-run(s) of 1 entry" in out and "re-run pending" in out
    assert cli.main(["instructor", "race", "verify", "--collect", "--profile", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "collected 2 re-run(s)" in out and "final standings (verified times):" in out, out
    # sub-second runs on a shared CPU: the re-run may be judged either way (beside a CPU hog it took 2.3x the claim)
    assert "final standings (verified times): #1 ada/" in out or "not reproduced, unranked: ada/" in out, out
    assert "re-runs' cost: 2 run(s)" in out
    row = race.standings(rules, race.code_hash()).one(participant="ada")
    assert row["verified_s"] is not None and row["verified_s"] > 0  # tiny runs on a shared CPU: judged, either way
    assert row["verification"] == "reproduced" and row["rank"] == 1 or "not reproduced" in row["marks"], row["marks"]
    _, reruns, _ = lb.read_race()
    assert {line["job_name"] for line in reruns} == {"ws-verify-r1"} and {line["user"] for line in reruns} == {ME}
    assert {line["job_id"] for line in reruns}.isdisjoint({r["job_id"] for r in row["runs"]}), "its own jobs"
