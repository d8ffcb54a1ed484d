"""Lab 09's board against the real local Slurm's accounting, with real Unix users (ada, bob, instructor): their
jobs (tiny ``sleep 1`` array jobs, submitted as each user) back the lines of their runs files; bob then writes
the issue's three forgeries into his own file. The board asks sacct once and marks each forgery with its reason,
while the honest entries (the instructor's baseline, ada's and bob's own) count. Then the race folder with the
same users: bob squats ada's file name, ada still posts, and the instructor (not root) clears the round."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_helpers import wait_job_end

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from hub_helpers import PARTICIPANT_PYTHON, REPO, as_user, homes_kept, run, write_as  # noqa: E402

from coursekit import slurm_cli  # noqa: E402
from coursekit.labs import lab09_race as race  # noqa: E402
from coursekit.labs.lab09_race import leaderboard as lb  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402

USERS = ("instructor", "ada", "bob")
JOB_END_S = 120
DRY = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16, batch_size=50,
                  epochs=10, lr=0.05, target_acc=0.6, eval_every=5, data_seed=0, progress="off", device="cpu")
RULES = race.Rules("evidence", DRY, models=("mlp",), max_parameters=300_000)


@pytest.fixture(scope="module", autouse=True)
def users_homes_restored() -> Iterator[None]:
    """The users' homes as they were before this module's tests, after them (and checked)."""
    with homes_kept(USERS):
        yield


@pytest.fixture()
def race_folder() -> Iterator[Path]:
    """A race folder every user reaches (under /tmp, not pytest's root-only tmp_path), sticky and open (1777)."""
    folder = Path(tempfile.mkdtemp(prefix="ck-race-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def seeds_job(user: str) -> list[str]:
    """A 3-task array of ``sleep 1`` submitted as ``user``, waited for: its task ids (one per seed)."""
    done = as_user(user, ["sbatch", "--parsable", "--array=0-2", "-o", "/dev/null", "-J", f"ws-{user}-race",
                          "--wrap", "sleep 1"])
    array = done.stdout.strip().split(";")[0]
    tasks = [f"{array}_{seed}" for seed in range(3)]
    for task in tasks:
        assert wait_job_end(task, JOB_END_S) == "COMPLETED"
    return tasks


def line(participant: str, submission: str, job_id: str, seed: int, to_target: float) -> str:
    summary = {"target_reached": True, "time_to_target_s": to_target, "train_time_s": to_target + 0.05,
               "steps_to_target": 10, "config": DRY.to_dict(), "code_hash": race.code_hash(), "val_hash": "v",
               "val_samples": 400, "device_name": "cpu", "config_hash": "c", "num_parameters": 1000, "seed": seed}
    return json.dumps(race.run_record(participant, submission, summary, job_id)) + "\n"


def post_as(user: str, folder: Path, lines: list[str]) -> None:
    """``user``'s own runs file, written by them (what append_run writes; bob's editor writes the same)."""
    path = folder / f"{user}.jsonl"
    write_as(user, path, "".join(lines).encode())
    os.chmod(path, 0o644)
    assert path.stat().st_uid != 0


def test_the_board_marks_bobs_three_forgeries_from_slurms_accounting(course: Path, race_folder: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = {user: seeds_job(user) for user in USERS}
    nowhere = str(int(jobs["bob"][0].split("_")[0]) + 100_000)  # an id no job of this cluster has had yet
    post_as("instructor", race_folder, [line(race.BASELINE, "baseline", j, s, 0.8) for s, j in enumerate(jobs["instructor"])])
    post_as("ada", race_folder, [line("ada", "fast", j, s, 0.4) for s, j in enumerate(jobs["ada"])])
    post_as("bob", race_folder,
            [line("bob", "mine", j, s, 0.6) for s, j in enumerate(jobs["bob"])]  # honest
            + [line("bob", "copied", j, s, 0.04) for s, j in enumerate(jobs["ada"])]  # 1. ada's runs, a tenth
            + [line("bob", "invented", f"{nowhere}_{s}", s, 0.03) for s in range(3)]  # 2. jobs that exist nowhere
            + [line("bob", "mine", j, s, 0.06) for s, j in enumerate(jobs["bob"])])  # 3. his own, a tenth
    calls: list[list[str]] = []
    real_run = slurm_cli.run

    def counted(command: list[str], *args: Any, **kwargs: Any) -> str:
        calls.append(list(command))
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(slurm_cli, "run", counted)
    table = race.standings(RULES, race.code_hash(), race_folder / "leaderboard.jsonl")
    assert [c[0] for c in calls] == ["sacct"], f"one sacct call for the whole board, got {calls}"
    rows = {(r["user"], r["submission"]): r for r in table}
    assert table.evidence == "sacct" and not table.problems, table.problems
    ranked = [(r["user"], r["submission"]) for r in table if r["counts"]]
    assert ranked == [("ada", "fast"), ("instructor", "baseline")], {k: r["marks"] for k, r in rows.items()}
    assert f"job {jobs['ada'][0]} is Unix user ada's, not bob's who posted it" in rows[("bob", "copied")]["marks"]
    assert f"job {nowhere}_0 is unknown to Slurm's accounting" in rows[("bob", "invented")]["marks"]
    assert f"job {jobs['bob'][0]} (seed 0) is claimed by 2 lines" in rows[("bob", "mine")]["marks"]
    assert all(rows[k]["rank"] is None for k in [("bob", "copied"), ("bob", "invented"), ("bob", "mine")])


def as_participant(user: str, code: str) -> Any:
    """Python ``code`` run as ``user`` with this checkout's coursekit (the participants' Python of the hub)."""
    if not PARTICIPANT_PYTHON.exists():
        pytest.fail(f"{PARTICIPANT_PYTHON} is missing: `bash slurm/hub.sh install` (as root) makes it")
    return as_user(user, ["env", f"PYTHONPATH={REPO}", str(PARTICIPANT_PYTHON), "-c", code], check=False)


def test_a_squatted_name_costs_ada_nothing_and_the_instructor_clears_the_round_without_root(race_folder: Path) -> None:
    board = race_folder / "leaderboard.jsonl"
    write_as("bob", race_folder / "ada.jsonl", b"x\n")  # bob, before ada's first post
    post = as_participant("ada", "from pathlib import Path; from coursekit.labs import lab09_race as race; "
                          "race.append_run(race.run_record('ada', 'fast', {'seed': 0, 'target_reached': True}, '1'), "
                          f"Path({str(board)!r}))")
    assert post.returncode == 0, post.stderr
    runs, problems = race.read_board(board)
    assert [(r["participant"], r["user"]) for r in runs] == [("ada", "ada")]
    assert any("ada.jsonl: named after ada but owned by bob: ignored" in p for p in problems), problems
    clear = ("import sys; from coursekit import cli; sys.exit(cli.main(['instructor', 'race', 'clear', "
             f"'--leaderboard', {str(board)!r}]))")
    refused = as_participant("instructor", clear)  # the folder is root's: sticky, so the instructor may not
    assert refused.returncode == 1 and "belongs to root, not to you (instructor)" in refused.stderr, refused.stderr
    assert "chown instructor" in refused.stderr
    run(["chown", "instructor", str(race_folder)])  # what setup and slurm/hub.sh install make it: the instructor's
    cleared = as_participant("instructor", clear)
    assert cleared.returncode == 0, cleared.stderr
    assert "cleared the round: 3 file(s)" in cleared.stdout, cleared.stdout  # ada.jsonl (bob's), ada's spare, ada.claim
    assert race.read_board(board) == ([], [])
    (archive,) = (race_folder / "archive").iterdir()
    archived = sorted((p.name == "ada.jsonl", lb.user_name(p.stat().st_uid)) for p in archive.iterdir())
    assert archived == [(False, "ada"), (False, "ada"), (True, "bob")]  # ada's claim and spare file, bob's squat
