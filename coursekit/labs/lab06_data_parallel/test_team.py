"""Lab 06's sweep once per team: parts taken first come and kept on a re-run, rows dealt evenly, the team's
table built from the holders' records only, what is missing named; and the room budget it buys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coursekit.labs import lab06_data_parallel as dp
from coursekit.labs.kit import pool
from coursekit.labs.kit.settings import GPU_MINUTES_PER_PARTICIPANT
from coursekit.labs.kit.test_pool_evidence import job
from coursekit.labs.lab06_data_parallel import team

BATCHES, N_GPUS = [32, 64, 128, 256], [1, 2, 4, 8]
BOB_UID = 60421
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "coursekit.toml").write_text("")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")  # planted job ids no Slurm knows: read without accounting
    return tmp_path


def rows(batches: list[int], img_s: float = 100.0) -> list[dict]:
    return [{"n_gpu": n, "batch_size": b, "images_per_s_median": img_s * n, "step_time_s": 0.1, "state": "COMPLETED",
             "job_id": f"{b}-{n}"} for b in batches for n in N_GPUS]


def test_rows_are_dealt_evenly_and_the_room_budget_needs_teams() -> None:
    assert team.deal_rows(BATCHES, 4) == [[32], [64], [128], [256]]
    assert team.deal_rows(BATCHES, 3) == [[32, 256], [64], [128]]
    budget = dp._lab06_budget(N_GPUS, len(BATCHES), team_size=4)
    assert budget["gpu_minutes_per_participant"] <= GPU_MINUTES_PER_PARTICIPANT
    alone = dp._lab06_budget(N_GPUS, len(BATCHES), team_size=1)  # every participant the whole sweep
    assert alone["gpu_minutes_per_participant"] > 2 * GPU_MINUTES_PER_PARTICIPANT


def test_without_a_team_a_participant_runs_every_row_and_reads_them_back(course: Path) -> None:
    part = dp.take_part(None, "ada", BATCHES, N_GPUS, 4)
    assert (part.parts, part.my_batches) == (1, BATCHES) and "no team" in str(part)
    assert dp.post_part(part, "ada", rows(BATCHES)) == 16
    table, notes = dp.team_table(part)
    assert notes == [] and len(table) == 16  # alone: no teammate's records to call unverified
    strong, weak = dp.scaling_tables(table, 256, 256)
    assert [r["n_gpu"] for r in weak] == N_GPUS and [r["batch_per_gpu"] for r in strong] == [256, 128, 64, 32]


def test_the_steps_split_survives_the_team_pool(course: Path) -> None:
    """The weak-scaling split (data wait, compute, gradient bytes) is computed from the team's table: the pool
    must carry the engine's per-step times and the parameter count, not the printed columns only."""
    part = dp.take_part(None, "ada", [256], [1, 2], 4)
    sweep = [{"n_gpu": n, "batch_size": 256, "images_per_s_median": 4710.0 * n * (1 if n == 1 else 0.97),
              "step_time_s": step, "data_time_s": 0.0003, "compute_time_s": step - 0.0003, "state": "COMPLETED",
              "job_id": f"256-{n}", "summary": {"num_parameters": 25_557_032}} for n, step in ((1, 0.0544), (2, 0.0561))]
    dp.post_part(part, "ada", sweep)
    table, _ = dp.team_table(part)
    assert "data_time_s" not in table.columns  # printed as before
    _, weak = dp.scaling_tables(table, 256, 256)
    split = dp.step_split(weak, 0.004)
    assert split is not None and abs(split["extra"] - 1.7) < 1e-6 and 0.3 < split["allreduce"] < 0.5


def test_parts_are_taken_first_come_and_kept_on_a_rerun(course: Path) -> None:
    first = dp.take_part("red", "ada", BATCHES, N_GPUS, 4)
    assert (first.part, first.my_batches) == (0, [32]) and "part 1 of 4" in str(first)
    assert dp.take_part("red", "ada", BATCHES, N_GPUS, 4).part == 0  # the notebook run again: the same part
    assert (pool.pool_folder(team.pool_name("red")) / team.PART_CLAIM.format(0)).is_file()
    with pytest.raises(ValueError, match="my_team='Red team'"):
        dp.take_part("Red team", "ada", BATCHES, N_GPUS, 4)
    with pytest.raises(ValueError, match="team_size=0"):
        dp.take_part("blue", "ada", BATCHES, N_GPUS, 0)


@as_root
def test_a_full_team_says_so(course: Path) -> None:
    folder = pool.pool_folder(team.pool_name("red"))
    folder.mkdir(parents=True)
    for index in range(2):
        (folder / team.PART_CLAIM.format(index)).write_text("x\n")
        os.chown(folder / team.PART_CLAIM.format(index), BOB_UID, BOB_UID)
    with pytest.raises(RuntimeError, match="already has its 2 members"):
        dp.take_part("red", "ada", BATCHES, N_GPUS, 2)


@as_root
def test_the_team_table_holds_each_rows_holder_only_and_names_what_is_missing(course: Path) -> None:
    mine = dp.take_part("red", "ada", BATCHES, N_GPUS, 4)  # part 0: batch 32
    dp.post_part(mine, "ada", rows([32], img_s=50.0))
    dp.post_part(mine, "ada", rows([32], img_s=60.0))  # a re-run: the latest counts
    folder = pool.pool_folder(team.pool_name("red"))
    (folder / team.PART_CLAIM.format(1)).write_text("bob\n")
    os.chown(folder / team.PART_CLAIM.format(1), BOB_UID, BOB_UID)
    bob_rows = [{"participant": "bob", "team": "red", "part": 1, **r} for r in rows([64])]
    forged = [{"participant": "bob", "team": "red", "part": 0, **r, "images_per_s_median": 1e9} for r in rows([32])]
    (folder / f"{pool.user_name(BOB_UID)}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bob_rows + forged) + "{torn\n")
    os.chown(folder / f"{pool.user_name(BOB_UID)}.jsonl", BOB_UID, BOB_UID)
    table, notes = dp.team_table(mine)
    by_cell = {(r["n_gpu"], r["batch_size"]): r["images_per_s_median"] for r in table}
    assert by_cell[(1, 32)] == 60.0 and by_cell[(8, 32)] == 480.0  # ada's latest, never bob's forged 1e9
    assert by_cell[(2, 64)] == 200.0  # bob's own row
    assert any("ignored 4 record(s)" in note for note in notes), notes
    assert any("not a record of the pool" in note for note in notes), notes
    assert "part 3 (nobody yet): batch 128 not posted yet" in notes and any("part 4" in n for n in notes)
    assert f"the team's records are {pool.UNVERIFIED}" in notes  # a teammate's lines, and nothing behind them


def test_the_team_table_asks_accounting_once_and_leaves_out_what_it_does_not_back(
        course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lab 06 on a Slurm site (planted): one sacct call for the pool; a cell whose job accounting does not know
    is left out of the team's table and named with its reason, not silently dropped."""
    calls: list[list[str]] = []
    me = pool.user_name(os.geteuid())
    known = {"101": job("101", me), "102": job("102", me, state="CANCELLED")}

    def job_evidence(job_ids: Any) -> dict[str, Any]:
        calls.append(sorted(job_ids))
        return {j: known[j] for j in calls[-1] if j in known}

    monkeypatch.setattr("coursekit.slurm_cli.job_evidence", job_evidence)
    monkeypatch.setattr("coursekit.sites.load_site", lambda: SimpleNamespace(is_local=False))
    part = team.take_part(None, "ada", [32], [1, 2, 4], 1)
    sweep = [{"n_gpu": n, "batch_size": 32, "images_per_s_median": 100.0 * n, "step_time_s": 0.1,
              "state": "COMPLETED", "job_id": j} for n, j in ((1, "101"), (2, "102"), (4, "103"))]
    team.post_part(part, "ada", sweep)
    table, notes = team.team_table(part)
    assert calls == [["101", "102", "103"]]
    assert [(r["n_gpu"], r["images_per_s_median"]) for r in table] == [(1, 100.0)]
    assert any("(2 GPU(s), batch 32, posted as 'ada'): job 102 ended CANCELLED" in n for n in notes), notes
    assert any("(4 GPU(s), batch 32, posted as 'ada'): job 103 is unknown to Slurm's accounting" in n
               for n in notes), notes
    assert not any("unverified" in n for n in notes)
