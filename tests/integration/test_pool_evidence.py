"""A room's pool against the real local Slurm's accounting, with real Unix users: ada and bob each run a job
(``sleep 1``, submitted as themselves) and post lab 07 records to the pool in their own files; bob adds a record
copied from ada's (her job) and one naming a job that exists nowhere. Read as the room reads it: one sacct call,
the honest records count, bob's two forgeries are left out of the room's figure and listed with their reasons.
Everything lives in a folder under /tmp, removed at the end (the jobs write no output: nothing in the homes)."""

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
from hub_helpers import as_user, write_as  # noqa: E402

from coursekit import slurm_cli  # noqa: E402
from coursekit.labs.kit import pool  # noqa: E402
from coursekit.labs.lab07_large_batch import room  # noqa: E402

JOB_END_S = 120
SETUP = "mlp_bn/fashion-mnist/16px/2ep/4000/b32"
ARMS = ("reference B=32",)


@pytest.fixture()
def shared_course(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A course folder every user reaches (under /tmp), its pool folder shared (1777); removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ck-pool-", dir="/tmp"))
    folder.chmod(0o755)
    (folder / "coursekit.toml").write_text("")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(folder))
    monkeypatch.setenv("COURSEKIT_SITE", "slurm")
    pool.make_shared_folder(pool.pool_folder(room.POOL_NAME))
    yield pool.pool_folder(room.POOL_NAME)
    shutil.rmtree(folder)


def one_job(user: str) -> str:
    done = as_user(user, ["sbatch", "--parsable", "-o", "/dev/null", "-J", f"ws-{user}-pool", "--wrap", "sleep 1"])
    job_id = done.stdout.strip().split(";")[0]
    assert wait_job_end(job_id, JOB_END_S) == "COMPLETED"
    return job_id


def line(participant: str, seed: int, acc: float, job_id: str) -> str:
    return json.dumps({"participant": participant, "setup": SETUP, "part": "A", "arm": ARMS[0], "batch_size": 32,
                       "lr": 0.05, "seed": seed, "status": "completed", "val_acc": acc, "steps_to_target": None,
                       "job_id": job_id, "posted": float(seed)}) + "\n"


def test_the_room_leaves_out_bobs_copied_and_invented_records(shared_course: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ada, bob = one_job("ada"), one_job("bob")
    nowhere = str(int(bob) + 100_000)
    for user, lines in (("ada", [line("ada", 0, 0.70, ada)]),
                        ("bob", [line("bob", 1, 0.68, bob), line("bob", 2, 0.99, ada), line("bob", 3, 0.99, nowhere)])):
        path = shared_course / f"{user}.jsonl"
        write_as(user, path, "".join(lines).encode())
        os.chmod(path, pool.RUN_FILE_MODE)
    calls: list[list[str]] = []
    real_run = slurm_cli.run

    def counted(command: list[str], *args: Any, **kwargs: Any) -> str:
        calls.append(list(command))
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(slurm_cli, "run", counted)
    records, problems = pool.read(room.POOL_NAME)
    assert pool.check_evidence(records, problems, key=room.run_key, label=room.run_label) == pool.VERIFIED
    assert [c[0] for c in calls] == ["sacct"] and not problems, (calls, problems)
    found = room.sort_room(records, problems, SETUP, ARMS, (32,), "ada")
    assert sorted(r["val_acc"] for r in found.everyone) == [0.68, 0.70]
    text = "\n".join(found.notes)
    assert f"job {ada} is Unix user ada's, not bob's who posted it: a copied record" in text, text
    assert f"job {nowhere} is unknown to Slurm's accounting" in text, text
    assert room.room_table(found, ARMS)[0]["room_acc"] == pytest.approx(0.69)
