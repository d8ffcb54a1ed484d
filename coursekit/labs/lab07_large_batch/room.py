"""Lab 07's seeds pooled across the room: each participant posts their runs, everyone plots the room's.

Three seeds show a spread; twenty show a distribution. Each participant posts the runs of parts A (final
accuracy of every arm) and C (steps to the target for each batch and LR) to the pool ``lab07-runs``
(``coursekit/labs/kit/pool.py``: one file per Unix user in a shared folder, each record attributed to the
file's owner), then reads back every record posted so far and plots the room's points beside their own.
Alone, the room is just their own points.

Different participants should run different seeds: ``my_seeds(seat, n)`` deals seat ``k`` (the number the
instructor gives) its own ``n`` seeds, ``k n ... k n + n - 1``; no seat keeps the lab's seeds.

A record is kept only when it is one of this lab's runs in the same setup (``setup_key``: model, data,
image size, epochs, subset); anything else (a malformed line, another profile's run, a pseudonym posted by
another user) is ignored and counted in ``RoomRuns.notes``, never fatal. A run posted twice (the notebook
re-run) counts once: the latest record of each (user, part, arm, batch, LR, seed) wins.

On a Slurm site each record names its run's job and is checked against Slurm's accounting
(``pool.check_evidence``, the rules of lab 09's race): a job accounting does not know, another user's job (a
copied record), a job that did not complete, or one job claimed for the same run with other values (an edited
re-post) leaves the record out of the room's points and tables, listed in the notes with its reasons. On the
local site (no accounting) the notes say that the room's records are unverified.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coursekit.course import user_name
from coursekit.labs.kit import pool
from coursekit.labs.kit.results import ResultsTable
from coursekit.metrics import mean_std

POOL_NAME = "lab07-runs"
POSTED_PARTS = ("A", "C")
MAX_SEAT = 10_000  # a seat is a participant's number in the room: 0 ... this
JITTER = 0.08  # horizontal spread of the room's dots around an arm, in arm widths


def my_seeds(seat: int | None, lab_seeds: Sequence[int]) -> list[int]:
    """The seeds of seat ``seat`` (the participant's number from the instructor): ``k n ... k n + n - 1`` for
    ``n = len(lab_seeds)``, so that no two seats share a seed; None: the lab's own seeds (alone)."""
    seeds = list(lab_seeds)
    if not seeds:
        raise ValueError("lab_seeds is empty: give the lab's seeds, e.g. s.seeds")
    if seat is None:
        return seeds
    if isinstance(seat, bool) or not isinstance(seat, int) or not 0 <= seat <= MAX_SEAT:
        raise ValueError(f"my_seat={seat!r}: your number in the room from the instructor, a whole number "
                         f"from 0 to {MAX_SEAT} (or None if you work alone)")
    return [seat * len(seeds) + index for index in range(len(seeds))]


def setup_key(s: Any) -> str:
    """What makes two participants' runs comparable: the model, data, image size, epochs and subset of the lab's
    base run (another profile or data set gives another key, and its records are not mixed in)."""
    base = s.base
    return (f"{base.model}/{base.dataset}/{base.image_size}px/{base.epochs}ep/"
            f"{base.num_samples or 'all'}/b{s.base_batch}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def room_records(table: Iterable[dict[str, Any]], participant: str, setup: str) -> list[dict[str, Any]]:
    """The records this participant posts: one per run of parts A and C (a failed run with no accuracy)."""
    records = []
    for row in table:
        if row.get("part") not in POSTED_PARTS:
            continue
        done = row.get("status") == "completed"
        steps = (row.get("summary") or {}).get("steps_to_target") if done else None
        records.append({"participant": participant, "setup": setup, "part": row["part"], "arm": row["arm"],
                        "batch_size": row["batch_size"], "lr": row["lr"], "seed": row["seed"],
                        "status": row.get("status"), "job_id": row.get("job_id"), "val_acc": _number(row.get("val_acc")) if done else None,
                        "steps_to_target": steps if isinstance(steps, int) and steps > 0 else None})
    return records


def post_runs(table: Iterable[dict[str, Any]], participant: str, s: Any) -> int:
    """Post this participant's runs of parts A and C to the room's pool; returns how many."""
    return pool.post(POOL_NAME, room_records(table, participant, setup_key(s)))


@dataclass
class RoomRuns:
    """The room's runs that count (``mine``: this user's; ``others``: everyone else's) and what was ignored."""

    mine: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def everyone(self) -> list[dict[str, Any]]:
        return self.mine + self.others

    def __str__(self) -> str:
        people = {r["user"] for r in self.everyone}
        seeds = {(r["user"], r["seed"]) for r in self.everyone if r["part"] == "A"}
        lines = [f"the room so far: {len(people)} participant(s), {len(seeds)} seed(s) of part A "
                 f"({len({r['seed'] for r in self.mine if r['part'] == 'A'})} of them yours)"]
        return "\n".join(lines + [f"  {note}" for note in self.notes])


def _why_bad(record: dict[str, Any], arms: set[str], batches: set[int]) -> str | None:
    """Why ``record`` is not one of this lab's runs (None when it is)."""
    part = record.get("part")
    if part not in POSTED_PARTS:
        return "not a run of part A or C"
    seed, batch = record.get("seed"), record.get("batch_size")
    if isinstance(seed, bool) or not isinstance(seed, int) or isinstance(batch, bool) or batch not in batches:
        return "no whole seed, or a batch this lab does not run"
    if part == "A" and record.get("arm") not in arms:
        return "an arm this lab does not run"
    if _number(record.get("lr")) is None or _number(record["lr"]) <= 0:
        return "no learning rate"
    acc = record.get("val_acc")
    if acc is not None and (_number(acc) is None or not 0 <= acc <= 1):
        return "an accuracy outside 0 ... 1"
    steps = record.get("steps_to_target")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        return "steps to the target that are not a positive whole number"
    return None


def run_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """What a record measures: one run (its part, arm, batch, LR and seed); a job backs one record of it."""
    return tuple(record.get(k) for k in ("part", "arm", "batch_size", "lr", "seed"))


def run_label(record: dict[str, Any]) -> str:
    return (f"part {record.get('part')}, {record.get('arm')}, batch {record.get('batch_size')}, "
            f"lr {record.get('lr')}, seed {record.get('seed')}")


def sort_room(records: Iterable[dict[str, Any]], problems: Sequence[str], setup: str, arms: Iterable[str],
              batches: Iterable[int], me: str) -> RoomRuns:
    """Keep the records that count (this lab's runs in ``setup``, attributable, the latest of each run per
    user), split into this user's (``me``) and the others'; say what was ignored and why."""
    arm_names, batch_sizes = set(arms), set(batches)
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    ignored: dict[str, int] = {}
    unbacked: list[dict[str, Any]] = []
    for record in records:
        if record.get("evidence") and not record.get("not_theirs"):
            unbacked.append(record)  # not backed by Slurm's accounting: listed one by one, with its reasons
            continue
        if record.get("not_theirs"):
            why: str | None = "posted under another user's pseudonym or in a file others can write"
        elif record.get("setup") != setup:
            why = "from another setup (another profile or data set)"
        else:
            why = _why_bad(record, arm_names, batch_sizes)
        if why is not None:
            ignored[why] = ignored.get(why, 0) + 1
            continue
        key = (record.get("user"), record["part"], record.get("arm"), record["batch_size"], record["lr"],
               record["seed"])
        latest[key] = record  # oldest first: the latest posting of a run wins
    room = RoomRuns()
    for record in latest.values():
        (room.mine if record.get("user") == me else room.others).append(record)
    room.notes = [f"ignored: {problem}" for problem in problems]
    room.notes += [f"ignored {count} record(s): {why}" for why, count in sorted(ignored.items())]
    room.notes += pool.marked(unbacked, run_label)
    return room


def read_room(s: Any) -> RoomRuns:
    """Every run of the room posted so far in this lab's setup, this user's apart, each checked against Slurm's
    accounting where the site keeps it; never raises on bad records."""
    records, problems = pool.read(POOL_NAME)
    evidence = pool.check_evidence(records, problems, key=run_key, label=run_label)
    batches = {batch for _, batch, *_ in s.arms} | set(s.critical_batches)
    found = sort_room(records, problems, setup_key(s), (arm for arm, *_ in s.arms), batches, user_name(os.geteuid()))
    if records and evidence == pool.UNVERIFIED:
        found.notes.insert(0, f"the room's records are {pool.UNVERIFIED}")
    return found


# ------------------------------------------------------------------------------ what the plots show


def accuracy_points(room: RoomRuns, arms: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """Part A per arm: ``{"mine": [...], "room": [...]}`` final accuracies, one per seed (the room's include
    yours). A failed run has no accuracy and no point."""
    points: dict[str, dict[str, list[float]]] = {arm: {"mine": [], "room": []} for arm in arms}
    mine = {id(record) for record in room.mine}
    for record in room.everyone:
        if record["part"] != "A" or record["arm"] not in points or record.get("val_acc") is None:
            continue
        points[record["arm"]]["room"].append(float(record["val_acc"]))
        if id(record) in mine:
            points[record["arm"]]["mine"].append(float(record["val_acc"]))
    return points


def steps_points(room: RoomRuns) -> dict[str, list[tuple[int, int]]]:
    """Part C: ``{"mine": [(batch, steps)], "room": [...]}``, one point per participant, seed and batch: the
    fewest steps to the target over the LRs that reached it (the best LR, as the lab's curve takes it)."""
    best: dict[tuple[Any, ...], int] = {}
    for record in room.everyone:
        steps = record.get("steps_to_target")
        if record["part"] != "C" or steps is None:
            continue
        key = (record.get("user"), record["seed"], record["batch_size"])
        best[key] = min(steps, best.get(key, steps))
    mine_users = {r.get("user") for r in room.mine}
    room_points = sorted((key[2], steps) for key, steps in best.items())
    mine = sorted((key[2], steps) for key, steps in best.items() if key[0] in mine_users)
    return {"mine": mine, "room": room_points}


def room_table(room: RoomRuns, arms: Sequence[str]) -> ResultsTable:
    """Part A per arm: your mean over your seeds beside the room's mean ± std over every seed posted."""
    rows = []
    for arm, found in accuracy_points(room, arms).items():
        mine = mean_std(found["mine"], empty=None)
        everyone = mean_std(found["room"], empty=None)
        rows.append({"arm": arm, "your_seeds": len(found["mine"]), "your_acc": mine[0],
                     "room_seeds": len(found["room"]), "room_acc": everyone[0],
                     "room_std": everyone[1] if len(found["room"]) > 1 else None})
    return ResultsTable(rows, title="A. final accuracy: yours and the room's (mean ± std over seeds)")


def room_figure(room: RoomRuns, arms: Sequence[str]) -> Any:
    """Left: A's final accuracy per arm, every seed of the room (grey) and yours (colour); right: C's steps
    to the target against the batch, the room's and yours."""
    from coursekit.labs.kit.plots import new_figure

    # the arms' names run down the left panel, one row each (names along the x-axis overlapped one another)
    figure, (left, right) = new_figure(ncols=2, figsize=(11.0, max(4.0, 0.3 * len(arms) + 1.2)))
    points = accuracy_points(room, arms)
    for index, arm in enumerate(arms):
        found = points[arm]
        spread = [index + JITTER * ((k % 5) - 2) / 2 for k in range(len(found["room"]))]
        left.scatter(found["room"], spread, color="grey", alpha=0.5, s=12, label="the room" if index == 0 else None)
        left.scatter(found["mine"], [index] * len(found["mine"]), color="C1", marker="D", s=24,
                     label="yours" if index == 0 else None)
    left.set_yticks(range(len(arms)), list(arms), fontsize="small")
    left.set_ylim(len(arms) - 0.5, -0.5)  # the first arm on top
    left.set_xlabel("final test accuracy (one dot per seed)")
    left.set_title("A. every seed of the room")
    left.legend(fontsize="small")
    steps = steps_points(room)
    if steps["room"]:
        right.scatter(*zip(*steps["room"], strict=True), color="grey", alpha=0.5, s=12, label="the room")
    if steps["mine"]:
        right.scatter(*zip(*steps["mine"], strict=True), color="C1", marker="D", s=24, label="yours")
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("batch size")
    right.set_ylabel("steps to the target (best LR)")
    right.set_title("C. steps to the target, the room's seeds")
    if steps["room"]:
        right.legend(fontsize="small")
    return figure
