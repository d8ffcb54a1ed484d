"""A room's pooled records under lab 09's rules: a forged or copied record is marked from Slurm's accounting
(planted here: job id -> sacct's record) and left out of what counts, with its reasons; honest records count;
without accounting the pool says it is unverified. Lab 07's room figure (``lab07_large_batch/test_room.py``) and
lab 06's team table (``lab06_data_parallel/test_team.py``) show the marked records left out and listed."""

from __future__ import annotations

from typing import Any

from coursekit.labs.kit import pool

SETUP = "mlp_bn/fashion-mnist/16px/2ep/4000/b32"
ARMS = ("reference B=32", "naive B=512")


def run_key(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record.get(k) for k in ("part", "arm", "batch_size", "lr", "seed"))


def run_label(record: dict[str, Any]) -> str:
    return (f"part {record.get('part')}, {record.get('arm')}, batch {record.get('batch_size')}, "
            f"lr {record.get('lr')}, seed {record.get('seed')}")


def job(job_id: str, user: str, elapsed: float = 60.0, state: str = "COMPLETED") -> dict[str, Any]:
    return {"job_id": job_id, "user": user, "uid": None, "state": state, "elapsed_s": elapsed, "start": "", "end": "",
            "name": f"ws-{user}"}


ACCOUNTING = {"11": job("11", "ada"), "12": job("12", "ada"), "21": job("21", "bob"), "22": job("22", "bob"),
              "23": job("23", "bob", state="FAILED"), "24": job("24", "bob", elapsed=5.0)}


def record(user: str, seed: int, acc: float, job_id: str | None, **extra: Any) -> dict[str, Any]:
    """A lab 07 run as ``pool.read`` returns it: ``user`` the owner of its file."""
    return {"participant": user, "setup": SETUP, "part": "A", "arm": ARMS[0], "batch_size": 32, "lr": 0.05,
            "seed": seed, "status": "completed", "val_acc": acc, "steps_to_target": None, "job_id": job_id,
            "posted": float(seed), "user": user, "not_theirs": None, **extra}


def planted_room() -> list[dict[str, Any]]:
    """ada's two honest runs, bob's honest run (posted twice by a re-run notebook: the same record), then bob's
    forgeries in his own file: ada's run copied, a job that exists nowhere, a job that FAILED, his own job
    claimed again with a better accuracy, and a run that says it measured more than its job's elapsed time."""
    return [record("ada", 0, 0.70, "11"), record("ada", 1, 0.72, "12"),
            record("bob", 2, 0.68, "21"), record("bob", 2, 0.68, "21") | {"posted": 9.0},
            record("bob", 3, 0.99, "11"),  # copied from ada's file
            record("bob", 4, 0.99, "999"),  # no such job
            record("bob", 5, 0.99, "23"),  # FAILED
            record("bob", 6, 0.60, "22"), record("bob", 6, 0.99, "22"),  # the same run, edited
            record("bob", 7, 0.99, "24", train_time_s=50.0)]  # longer than the job's 5 s


def test_forged_and_copied_records_are_marked_with_their_reasons() -> None:
    records = planted_room()
    assert pool.check_evidence(records, [], key=run_key, label=run_label, durations=("train_time_s",),
                               accounting=ACCOUNTING) == pool.VERIFIED
    reasons = {(r["seed"], r["val_acc"]): "; ".join(r["evidence"]) for r in records}
    assert reasons[(0, 0.70)] == reasons[(1, 0.72)] == reasons[(2, 0.68)] == ""  # honest, and a re-post
    assert "job 11 is Unix user ada's, not bob's who posted it: a copied record" in reasons[(3, 0.99)]
    assert "job 999 is unknown to Slurm's accounting" in reasons[(4, 0.99)]
    assert "job 23 ended FAILED in Slurm's accounting, not COMPLETED" in reasons[(5, 0.99)]
    assert "job 22 (part A, reference B=32, batch 32, lr 0.05, seed 6) is claimed by 2 lines" in reasons[(6, 0.99)]
    assert reasons[(6, 0.60)] == reasons[(6, 0.99)]  # both sides of an edited record: which one is true is unknown
    assert "the record says it measured 50.0 s, but its job 24 ran 5 s" in reasons[(7, 0.99)]
    nameless = [record("ada", 0, 0.7, None)]
    pool.check_evidence(nameless, [], key=run_key, label=run_label, accounting=ACCOUNTING)
    assert "names no Slurm job" in nameless[0]["evidence"][0]
    assert [r["val_acc"] for r in pool.counted(records)] == [0.70, 0.72, 0.68, 0.68]


def test_without_accounting_the_pool_says_it_is_unverified_and_marks_nothing() -> None:
    records = planted_room()
    assert pool.check_evidence(records, [], key=run_key, label=run_label, accounting=None) == pool.UNVERIFIED
    assert all(r["evidence"] == [] for r in records) and len(pool.counted(records)) == len(records)




def test_a_job_accounting_still_shows_running_is_asked_again_until_it_ends(monkeypatch) -> None:  # noqa: ANN001
    """A record is posted as its job ends; slurmdbd may show the job RUNNING a few seconds more (seen in CI on a
    busy controller). A one-off read asks again for the open jobs only, then checks the final state; a job that
    never ends within the settling time is "not ended", not called forged."""
    from coursekit.labs.kit import evidence

    answers = iter([{"11": job("11", "ada", state="RUNNING"), "12": job("12", "ada")},
                    {"11": job("11", "ada", state="COMPLETING")}, {"11": job("11", "ada")}])
    asked: list[list[str]] = []

    def job_evidence(job_ids: Any) -> dict[str, Any]:
        asked.append(sorted(job_ids))
        return next(answers)

    monkeypatch.setattr("coursekit.slurm_cli.job_evidence", job_evidence)
    found = evidence.settled_evidence(["11", "12"], settle_s=10, poll_s=0.01, sleep=lambda s: None)
    assert asked == [["11", "12"], ["11"], ["11"]] and found["11"]["state"] == "COMPLETED"

    monkeypatch.setattr("coursekit.slurm_cli.job_evidence", lambda ids: {"11": job("11", "ada", state="RUNNING")})
    found = evidence.settled_evidence(["11"], settle_s=0.05, poll_s=0.01)
    records = [record("ada", 0, 0.70, "11")]
    pool.check_evidence(records, [], key=run_key, label=run_label, accounting=found)
    assert records[0]["evidence"] == ["job 11 has not ended in Slurm's accounting (RUNNING), yet its record says it "
                                      "measured: it counts once the job has ended COMPLETED"]
