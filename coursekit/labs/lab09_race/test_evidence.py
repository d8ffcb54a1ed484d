"""Evidence a participant cannot write: every ranked run names a job that Slurm's accounting knows, owned by the
Unix user whose runs file holds the line, COMPLETED, claimed once, and long enough for the time it claims. The
accounting records are planted here (job id -> sacct's record): the issue's three forgeries, each marked with its
reason, beside an honest entry that counts."""

from __future__ import annotations

from typing import Any

import pytest

from coursekit.labs import lab09_race as race
from coursekit.labs.lab09_race import verify
from coursekit.train.config import TrainConfig

DRY = TrainConfig(model="mlp", dataset="generated", num_samples=2000, num_classes=4, image_size=16, batch_size=50,
                  epochs=10, lr=0.05, target_acc=0.6, eval_every=5, data_seed=0, progress="off", device="cpu")
RULES = race.Rules("dry", DRY, models=("mlp",), max_parameters=300_000)
KIT = race.code_hash()


def line(user: str, participant: str, submission: str, job_id: str | None, seed: int, to_target: float,
         trained: float | None = None, posted: float = 0.0) -> dict[str, Any]:
    """A run as the reader returns it: the line's fields, ``user`` the owner of the file it sits in."""
    summary = {"target_reached": True, "time_to_target_s": to_target, "train_time_s": trained or to_target * 1.2,
               "steps_to_target": 10, "config": DRY.to_dict(), "code_hash": KIT, "val_hash": "v", "val_samples": 400,
               "device_name": "cpu", "config_hash": "c", "num_parameters": 1000, "seed": seed}
    return {**race.run_record(participant, submission, summary, job_id), "posted": posted, "user": user,
            "not_theirs": None}


def job(job_id: str, user: str, uid: int, elapsed: float, state: str = "COMPLETED") -> tuple[str, dict[str, Any]]:
    return job_id, {"job_id": job_id, "user": user, "uid": uid, "state": state, "elapsed_s": elapsed,
                    "start": "", "end": "", "name": f"ws-{user}-race"}


def room() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The instructor's baseline, ada's honest entry, bob's honest entry, then bob's three forgeries in his own
    file: ada's lines under his pseudonym with a tenth of her time, job ids that exist nowhere, and his own real
    runs posted again with a tenth of their time (the latest line of a seed counts)."""
    runs = [line("instructor", race.BASELINE, "baseline", f"10{s}", s, 2.0, posted=1) for s in range(3)]
    runs += [line("ada", "ada", "fast", f"20{s}", s, 1.0, posted=2) for s in range(3)]
    runs += [line("bob", "bob", "mine", f"30{s}", s, 3.0, posted=3) for s in range(3)]
    runs += [line("bob", "bob", "copied", f"20{s}", s, 0.1, posted=4) for s in range(3)]
    runs += [line("bob", "bob", "invented", f"90{s}", s, 0.05, posted=5) for s in range(3)]
    runs += [line("bob", "bob", "mine", f"30{s}", s, 0.3, posted=6) for s in range(3)]
    accounting = dict([job(f"10{s}", "instructor", 1001, 30) for s in range(3)]
                      + [job(f"20{s}", "ada", 1002, 20) for s in range(3)]
                      + [job(f"30{s}", "bob", 1003, 25) for s in range(3)])
    return runs, accounting


def test_the_three_forgeries_are_marked_with_their_reason_and_the_honest_entries_count() -> None:
    runs, accounting = room()
    table = race.entries(runs, RULES, KIT, accounting=accounting)
    rows = {(r["participant"], r["submission"]): r for r in table}
    ranked = [(r["participant"], r["submission"]) for r in sorted(table, key=lambda r: r["rank"] or 99) if r["counts"]]
    assert ranked == [("ada", "fast"), (race.BASELINE, "baseline")], [(k, r["marks"]) for k, r in rows.items()]
    assert rows[("ada", "fast")]["rank"] == 1 and rows[("ada", "fast")]["evidence"] == "sacct"
    copied, invented, again = rows[("bob", "copied")], rows[("bob", "invented")], rows[("bob", "mine")]
    assert "job 200 is Unix user ada's, not bob's who posted it: a copied run" in copied["marks"]
    assert "job 900 is unknown to Slurm's accounting: no such job ran" in invented["marks"]
    assert "job 300 (seed 0) is claimed by 2 lines: a job backs one run, posted once" in again["marks"]
    assert again["time_to_target_s"] == pytest.approx(0.3)  # the cut time is the one shown, and marked
    for row in (copied, invented, again):
        assert not row["counts"] and row["rank"] is None and row["evidence"] == "failed"
    assert table.evidence == "sacct" and "backed by Slurm's accounting" in table.title
    # bob's copy never harms ada's own entry: her lines are hers, the copies are marked on his side only
    assert not any(r["evidence"] for r in rows[("ada", "fast")]["runs"])


def test_without_accounting_the_board_says_its_times_are_unverified_and_ranks_them_as_posted() -> None:
    runs, _ = room()
    table = race.entries(runs, RULES, KIT, accounting=None)
    assert table.evidence == verify.UNVERIFIED and "times unverified" in table.title
    assert {r["evidence"] for r in table} == {"unverified"}
    top = [r["submission"] for r in sorted(table, key=lambda r: r["rank"] or 99)][:3]
    assert top == ["invented", "copied", "mine"], "what the issue saw: without evidence, the forgeries lead"


@pytest.mark.parametrize(("record", "to_target", "trained", "reason"), [
    (job("5", "ada", 1002, 20, state="FAILED")[1], 1.0, 1.2, "job 5 ended FAILED in Slurm's accounting, not COMPLETED"),
    (job("5", "ada", 1002, 20, state="CANCELLED")[1], 1.0, 1.2, "ended CANCELLED"),
    (job("5", "ada", 1002, 3)[1], 1.0, 9.0, "the run says it trained 9.0 s, but its job 5 ran 3 s"),
    (job("5", "ada", 1002, 20)[1], 2.0, 1.0, "time to target 2.000 s is longer than the run's training time 1.000 s"),
    (job("5", "", 1003, 20)[1], 1.0, 1.2, "is Unix user 1003's, not ada's"),  # no User: its UID decides
])
def test_a_job_that_did_not_complete_or_is_too_short_for_its_claim_is_marked(record: dict[str, Any], to_target: float,
                                                                            trained: float, reason: str) -> None:
    run = line("ada", "ada", "x", "5", 0, to_target, trained)
    verify.check_evidence([run], {"5": record})
    assert any(reason in said for said in run["evidence"]), run["evidence"]


def test_the_elapsed_bound_has_the_stated_tolerance_and_sums_the_seeds_of_one_job() -> None:
    honest = line("ada", "ada", "x", "5", 0, 0.9, 4.0 + verify.ELAPSED_TOLERANCE_S)  # 1 s of Slurm's rounding
    verify.check_evidence([honest], {"5": job("5", "ada", 1002, 4)[1]})
    assert honest["evidence"] == []
    # the cpu profile runs a submission's 3 seeds in one job: their training adds up within its elapsed time
    seeds = [line("ada", "ada", "x", "7", s, 1.0, 3.0) for s in range(3)]
    verify.check_evidence(seeds, {"7": job("7", "ada", 1002, 10)[1]})
    assert all(run["evidence"] == [] for run in seeds)
    verify.check_evidence(seeds, {"7": job("7", "ada", 1002, 6)[1]})
    assert all("the 3 seeds of job 7 trained 9.0 s in all, more than the job's elapsed 6 s" in run["evidence"][0]
               for run in seeds)
    nameless = line("ada", "ada", "x", None, 0, 1.0)
    verify.check_evidence([nameless], {})
    assert "names no Slurm job" in nameless["evidence"][0]


def test_a_baseline_without_evidence_is_no_reference() -> None:
    runs, accounting = room()
    forged = [line("instructor", race.BASELINE, "baseline", f"99{s}", s, 2.0, posted=0) | {"val_hash": "w"}
              for s in range(3)]  # posted first, other validation set, no such jobs
    table = race.entries(forged + runs, RULES, KIT, accounting=accounting)
    ada = next(r for r in table if r["participant"] == "ada")
    assert ada["counts"], ada["marks"]


def test_the_board_asks_accounting_once_per_refresh_and_never_again_for_a_finished_job(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from types import SimpleNamespace

    from coursekit.labs.lab09_race import view

    runs, accounting = room()
    calls: list[list[str]] = []

    def job_evidence(job_ids: Any) -> dict[str, Any]:
        calls.append(sorted(job_ids))
        return {j: accounting[j] for j in job_ids if j in accounting}

    monkeypatch.setattr("coursekit.slurm_cli.job_evidence", job_evidence)
    monkeypatch.setattr("coursekit.sites.load_site", lambda: SimpleNamespace(is_local=False))
    cache = view.AccountingCache(retry_s=3600)
    problems: list[str] = []
    first = view.board_accounting(runs, problems, cache)
    assert len(calls) == 1 and set(calls[0]) == {r["job_id"] for r in runs} and first == accounting
    assert view.board_accounting(runs, problems, cache) == accounting and len(calls) == 1  # 900-902: not yet again
    cache.retry_s = 0
    view.board_accounting(runs, problems, cache)
    assert calls[-1] == ["900", "901", "902"], "a finished job's record is final: only the unknown ids are asked"
    monkeypatch.setattr("coursekit.sites.load_site", lambda: SimpleNamespace(is_local=True))
    assert view.board_accounting(runs, problems, cache) is None and problems == []  # the local site: no accounting


def test_an_entry_whose_rerun_is_ten_times_slower_is_not_reproduced_and_a_reproduced_one_keeps_its_rank() -> None:
    """The instructor's re-runs (planted): ada's entry re-runs within its spread and ranks by its verified time;
    kim's claim is 10x faster than her re-run (a time cut within her job's elapsed time: what accounting cannot
    see) and drops out; lee's re-run misses the target with a seed."""
    runs = [line("instructor", race.BASELINE, "baseline", f"10{s}", s, 2.0) for s in range(3)]
    runs += [line("ada", "ada", "fast", f"20{s}", s, t) for s, t in enumerate((1.0, 1.1, 0.9))]
    runs += [line("kim", "kim", "cut", f"40{s}", s, t) for s, t in enumerate((0.15, 0.16, 0.14))]
    runs += [line("lee", "lee", "lucky", f"50{s}", s, 1.2) for s in range(3)]
    reruns = {("ada", "fast", 1, "ada"): [line("instructor", "ada", "fast", f"6{s}", s, t)
                                          for s, t in enumerate((1.15, 1.05, 1.2))],
              ("kim", "cut", 1, "kim"): [line("instructor", "kim", "cut", f"7{s}", s, t)
                                         for s, t in enumerate((1.5, 1.6, 1.4))],
              ("lee", "lucky", 1, "lee"): [line("instructor", "lee", "lucky", "80", 0, 1.2),
                                           {**line("instructor", "lee", "lucky", "81", 1, 1.2), "target_reached": False}]}
    table = race.entries(runs, RULES, KIT, reruns=reruns)
    rows = {r["participant"]: r for r in table}
    assert "verified_s" in table.columns
    ada, kim, lee = rows["ada"], rows["kim"], rows["lee"]
    assert ada["counts"] and ada["rank"] == 1 and ada["verified_s"] == pytest.approx(1.1333, abs=1e-3), ada["marks"]
    assert not kim["counts"] and kim["rank"] is None and kim["verified_s"] == pytest.approx(1.5)
    assert "not reproduced: the instructor's re-run took 1.50 s" in kim["marks"] and "10.0x the claimed" in kim["marks"]
    assert not lee["counts"] and "re-run of seed(s) [1] did not reach the target" in lee["marks"]
    assert rows[race.BASELINE]["counts"] and rows[race.BASELINE]["verified_s"] is None  # not re-run: claimed time
    # the bound: a re-run 20 % slower than a claim with no spread is within the floor, 30 % is not
    claim = [line("x", "x", "s", str(s), s, 1.0) for s in range(3)]
    assert verify.reproduction(claim, [line("i", "x", "s", str(s), s, 1.2) for s in range(3)])[1] is None
    assert "not reproduced" in verify.reproduction(claim, [line("i", "x", "s", str(s), s, 1.3) for s in range(3)])[1]


def test_a_participant_on_a_private_site_sees_others_entries_as_not_verifiable_never_as_forged() -> None:
    """PrivateData=jobs: ada's sacct answers with her own jobs only. The others' honest entries are "not
    verifiable from your account" (ranked as claimed, the instructor's board decides), never "unknown to Slurm";
    bob's copy of ada's runs is still caught (her jobs are visible to her), and the instructor's view (every job)
    marks bob's forgeries as before."""
    from coursekit import slurm_cli
    from coursekit.labs.kit.evidence import NOT_VISIBLE, AccountingAnswer

    runs, everything = room()
    adas = AccountingAnswer({k: v for k, v in everything.items() if v["user"] == "ada"}, own_only="ada")
    table = race.entries(runs, RULES, KIT, accounting=adas)
    rows = {(r["participant"], r["submission"]): r for r in table}
    assert rows[("ada", "fast")]["evidence"] == "sacct" and rows[("ada", "fast")]["counts"]
    for key in [(race.BASELINE, "baseline"), ("bob", "invented")]:
        assert rows[key]["evidence"] == NOT_VISIBLE and "unknown to Slurm" not in rows[key]["marks"], rows[key]
    assert rows[(race.BASELINE, "baseline")]["counts"] and NOT_VISIBLE in table.title and "bob, instructor" in table.title
    assert "is Unix user ada's, not bob's" in rows[("bob", "copied")]["marks"]  # ada sees her own jobs
    instructor = race.entries(runs, RULES, KIT, accounting=AccountingAnswer(everything, own_only=None))
    assert "unknown to Slurm's accounting" in {(r["participant"], r["submission"]): r for r in instructor}[
        ("bob", "invented")]["marks"] and NOT_VISIBLE not in instructor.title
    dbd = ("Configuration data as of ...\nPrivateData            = none\nSlurmDBD configuration:\n"
           "DbdHost                = localhost\nPrivateData            = jobs,usage\n")
    assert slurm_cli.parse_dbd_private_data(dbd) == {"jobs", "usage"}
    assert not slurm_cli.sees_every_job({"jobs"}, "None", "") and slurm_cli.sees_every_job({"jobs"}, "None", "workshop")
    assert slurm_cli.sees_every_job(set(), "None", "") and slurm_cli.sees_every_job({"jobs"}, "Operator", "")


def test_who_sacct_shows_everything_to_is_read_from_sacctmgr(monkeypatch: pytest.MonkeyPatch) -> None:
    """A participant on a PrivateData=jobs site is shown their own jobs only; the course's coordinator and root
    everyone's (two sacctmgr calls, cached)."""
    import os
    import pwd

    from coursekit import slurm_cli

    someone = next(u for u in pwd.getpwall() if u.pw_uid != 0)
    answers = {"configuration": "PrivateData = none\nSlurmDBD configuration:\nPrivateData = jobs\n", "user": "None|\n"}
    asked: list[str] = []

    def fake(command: list[str], timeout: float = 0) -> str:
        asked.append("user" if "user" in command else "configuration")
        return answers[asked[-1]]

    monkeypatch.setattr(slurm_cli, "run", fake)
    monkeypatch.setattr(os, "geteuid", lambda: someone.pw_uid)
    monkeypatch.setattr(slurm_cli, "_viewer_cache", {})
    assert slurm_cli.accounting_viewer() == someone.pw_name and asked == ["configuration", "user"]
    assert slurm_cli.accounting_viewer() == someone.pw_name and len(asked) == 2  # cached
    answers["user"] = "None|workshop\n"  # the coordinator of the course's account
    monkeypatch.setattr(slurm_cli, "_viewer_cache", {})
    assert slurm_cli.accounting_viewer() is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert slurm_cli.accounting_viewer() is None
