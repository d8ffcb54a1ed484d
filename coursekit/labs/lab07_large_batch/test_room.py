"""Lab 07's room pool: seeds dealt per seat, runs posted and read back, the room's points beside yours, and
a malformed or foreign record ignored and reported, never fatal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coursekit.labs.kit import pool
from coursekit.labs.kit.test_pool_evidence import ACCOUNTING, planted_room
from coursekit.labs.lab07_large_batch import plan, room

ARMS = ("reference B=32", "naive B=512")
BATCHES = (32, 64, 512)
SETUP = "mlp_bn/fashion-mnist/16px/2ep/4000/b32"


def _table(seeds: tuple[int, ...] = (0, 1), acc: float = 0.7) -> list[dict[str, Any]]:
    rows = []
    for seed in seeds:
        rows += [{"part": "A", "arm": ARMS[0], "batch_size": 32, "lr": 0.05, "seed": seed, "status": "completed",
                  "val_acc": acc + seed / 100, "summary": {}},
                 {"part": "A", "arm": ARMS[1], "batch_size": 512, "lr": 0.05, "seed": seed, "status": "nan",
                  "val_acc": None, "summary": {}},
                 {"part": "B", "arm": "lr 1.6, no warm-up", "batch_size": 512, "lr": 1.6, "seed": seed,
                  "status": "completed", "val_acc": 0.3, "summary": {}}]
    rows += [{"part": "C", "arm": f"{f:g} x linear", "batch_size": b, "lr": f * b / 640, "seed": seeds[0],
              "status": "completed", "val_acc": 0.66, "summary": {"steps_to_target": steps}}
             for b, f, steps in ((32, 0.5, 60), (32, 1.0, 56), (64, 1.0, 32), (64, 0.5, None))]
    return rows


def _settings() -> SimpleNamespace:
    base = SimpleNamespace(model="mlp_bn", dataset="fashion-mnist", image_size=16, epochs=2, num_samples=4000)
    return SimpleNamespace(base=base, base_batch=32, arms=[(ARMS[0], 32, 1.0, 0.0), (ARMS[1], 512, 1.0, 0.0)],
                           critical_batches=(32, 64))


def test_seats_get_seeds_of_their_own_and_bad_seats_are_clear_errors() -> None:
    assert room.my_seeds(None, [0, 1]) == [0, 1]
    dealt = [room.my_seeds(seat, [0, 1, 2]) for seat in range(20)]
    assert len({seed for seeds in dealt for seed in seeds}) == 60 and dealt[1] == [3, 4, 5]
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match="my_seat="):
            room.my_seeds(bad, [0, 1])  # type: ignore[arg-type]


def test_plan_runs_the_dealt_seeds_and_refuses_bad_ones() -> None:
    from coursekit.labs.kit.settings import Settings
    from coursekit.labs.lab07_large_batch import settings

    s = Settings("07", "cpu", settings("cpu"))  # not labs.lab_settings: a lab's tests import no other lab
    runs = plan(s, seeds=[4, 5])
    assert {r.tags["seed"] for r in runs if r.tags["part"] in "AB"} == {4, 5}
    assert {r.tags["seed"] for r in runs if r.tags["part"] in "CD"} == {4}
    assert len(runs) == len(plan(s))
    with pytest.raises(ValueError, match="seeds="):
        plan(s, seeds=[])


def test_records_hold_parts_a_and_c_only_and_a_failed_run_has_no_accuracy() -> None:
    records = room.room_records(_table(), "ada", SETUP)
    assert {r["part"] for r in records} == {"A", "C"} and all(r["participant"] == "ada" for r in records)
    failed = [r for r in records if r["status"] == "nan"]
    assert failed and all(r["val_acc"] is None for r in failed)
    assert sorted(r["steps_to_target"] for r in records if r["part"] == "C" and r["steps_to_target"]) == [32, 56, 60]
    assert room.setup_key(_settings()) == SETUP


def _as_read(records: list[dict[str, Any]], user: str, not_theirs: str | None = None) -> list[dict[str, Any]]:
    return [{**r, "user": user, "not_theirs": not_theirs} for r in records]


def test_the_room_is_sorted_deduplicated_and_bad_records_are_counted_not_fatal() -> None:
    mine = _as_read(room.room_records(_table((0, 1)), "ada", SETUP), "alice")
    again = _as_read(room.room_records(_table((0,), acc=0.75), "ada", SETUP), "alice")  # re-run: latest wins
    theirs = _as_read(room.room_records(_table((2, 3), acc=0.6), "bob", SETUP), "bob")
    foreign = _as_read(room.room_records(_table((9,)), "cy", "resnet18/cifar10/32px/10ep/all/b256"), "cy")
    stolen = _as_read(room.room_records(_table((7,)), "ada", SETUP), "eve", "pseudonym of another user")
    broken = _as_read([{"participant": "bob", "setup": SETUP, "part": "A", "arm": ARMS[0], "batch_size": 32,
                        "lr": 0.05, "seed": "x", "val_acc": 2.0},
                       {"participant": "bob", "setup": SETUP, "part": "A", "arm": "no such arm", "batch_size": 32,
                        "lr": 0.05, "seed": 4, "val_acc": 0.5},
                       {"participant": "bob", "setup": SETUP, "part": "C", "arm": "1 x linear", "batch_size": 32,
                        "lr": 0.05, "seed": 4, "val_acc": 0.5, "steps_to_target": -3}], "bob")
    found = room.sort_room(mine + again + theirs + foreign + stolen + broken, ["x.jsonl line 3: not a record"],
                           SETUP, ARMS, BATCHES, "alice")
    points = room.accuracy_points(found, ARMS)
    assert points[ARMS[0]]["mine"] == [0.75, 0.71]  # seed 0 re-posted: the latest counts, once
    assert sorted(points[ARMS[0]]["room"]) == [0.62, 0.63, 0.71, 0.75]
    assert points[ARMS[1]] == {"mine": [], "room": []}  # failed runs: no points
    assert room.steps_points(found) == {"mine": [(32, 56), (64, 32)], "room": [(32, 56), (32, 56), (64, 32), (64, 32)]}
    text = "\n".join(found.notes)
    assert "x.jsonl line 3" in text and "another setup" in text and "another user's pseudonym" in text
    assert sum(int(n.split()[1]) for n in found.notes if n.startswith("ignored ") and "record(s)" in n) == (
        len(foreign) + len(stolen) + len(broken))
    table = room.room_table(found, ARMS)
    assert table[0]["room_seeds"] == 4 and table[1]["room_acc"] is None
    assert "2 participant(s), 4 seed(s)" in str(found)
    room.room_figure(found, ARMS)  # draws with missing points too


def test_posted_runs_come_back_and_a_malformed_line_is_reported(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "coursekit.toml").write_text("")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")  # no accounting: the room's records are unverified
    s = _settings()
    alone = room.read_room(s)
    assert alone.everyone == [] and alone.notes == []
    assert room.post_runs(_table(), "ada", s) == 8
    folder = pool.pool_folder(room.POOL_NAME)
    with open(folder / f"{pool.user_name(os.geteuid())}.jsonl", "a", encoding="utf-8") as handle:
        handle.write("{not json\n" + json.dumps({"participant": "ada", "setup": SETUP, "part": "Z"}) + "\n")
    found = room.read_room(s)
    assert len(found.mine) == 8 and found.others == []
    assert any("not a record of the pool" in n for n in found.notes)
    assert any("not a run of part A or C" in n for n in found.notes)


BOB_UID = 60413  # no such user on a test machine: named uid60413


@pytest.mark.skipif(os.geteuid() != 0, reason="making files of other users needs root (chown)")
def test_another_participants_runs_join_the_room_and_their_bad_lines_are_harmless(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "coursekit.toml").write_text("")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")  # no accounting: the room's records are unverified
    s = _settings()
    room.post_runs(_table((0, 1)), "ada", s)
    folder = pool.pool_folder(room.POOL_NAME)
    bob_file = folder / f"uid{BOB_UID}.jsonl"
    lines = [json.dumps({**r, "posted": 1.0}) for r in room.room_records(_table((2, 3), acc=0.6), "bob", SETUP)]
    lines += ['["not", "a", "record"]', json.dumps({"participant": "ada", "setup": SETUP, "part": "A",
                                                  "arm": ARMS[0], "batch_size": 32, "lr": 0.05, "seed": 9,
                                                  "val_acc": 0.99})]  # ada's pseudonym, posted by bob
    bob_file.write_text("\n".join(lines) + "\n")
    os.chmod(bob_file, pool.RUN_FILE_MODE)
    os.chown(bob_file, BOB_UID, BOB_UID)
    found = room.read_room(s)
    assert {r["user"] for r in found.others} == {f"uid{BOB_UID}"} and len(found.mine) == 8
    assert sorted(room.accuracy_points(found, ARMS)[ARMS[0]]["room"]) == [0.62, 0.63, 0.7, 0.71]
    assert any("another user's pseudonym" in n for n in found.notes)
    assert any("not a record of the pool" in n for n in found.notes)


def test_a_bad_record_cannot_move_the_rooms_figure_without_being_shown() -> None:
    """The planted room of ``kit/test_pool_evidence.py`` (ada's and bob's honest runs, bob's six forgeries in his
    own file) through lab 07's room: the forgeries are left out of the room's mean and each listed with its reason."""
    records = planted_room()
    pool.check_evidence(records, [], key=room.run_key, label=room.run_label, durations=("train_time_s",),
                        accounting=ACCOUNTING)
    found = room.sort_room(records, [], SETUP, ARMS, (32, 512), "ada")
    table = room.room_table(found, ARMS)
    assert table[0]["room_seeds"] == 3 and table[0]["room_acc"] == pytest.approx((0.70 + 0.72 + 0.68) / 3)
    listed = [n for n in found.notes if n.startswith("ignored bob's record")]
    assert len(listed) == 6, found.notes  # each forgery, one line each, with its reason
    assert any("seed 3, posted as 'bob'): job 11 is Unix user ada's" in n for n in listed), listed
    # the same records without the check: the forgeries would have moved the room's mean
    unchecked = room.sort_room(planted_room(), [], SETUP, ARMS, (32, 512), "ada")
    assert room.room_table(unchecked, ARMS)[0]["room_acc"] > 0.8


def test_the_rooms_figure_names_every_arm_without_overlap() -> None:
    """Sixteen arms (the gpu plan's): one row each down the left panel, no two names overlapping."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from coursekit.labs import lab07_large_batch as lb

    arms = [arm.name for arm in lb.settings("gpu")["arms"]]
    found = room.sort_room([], [], SETUP, arms, (32, 512), "ada")
    figure = room.room_figure(found, arms)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    left = figure.axes[0]
    labels = [label for label in left.get_yticklabels() if label.get_text()]
    assert [label.get_text() for label in labels] == arms
    boxes = sorted((label.get_window_extent(canvas.get_renderer()) for label in labels), key=lambda box: box.y0)
    assert all(low.y1 <= high.y0 for low, high in zip(boxes, boxes[1:], strict=False)), "two arm names overlap"
