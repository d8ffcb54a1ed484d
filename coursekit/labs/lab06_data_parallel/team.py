"""Lab 06's scaling sweep for a room: run once per team, each member one part, the results pooled.

Every per-GPU batch on every GPU count (1, 2, 4, 8) is 1.5 GPU-hours per participant: a room of 20 would
need 34 GPU-hours where an 8-GPU partition gives 12 in 90 minutes. A team of ``parts`` members runs the sweep
once: the sweep's rows (one per-GPU batch on every GPU count, the same GPU-minutes each) are dealt to the
parts, member ``k`` runs rows ``k, k + parts, ...``, and everyone posts to the team's pool
(``coursekit/labs/kit/pool.py``) and reads the whole team's table back.

A member's part is taken, not typed: ``part-<k>.claim`` in the team's pool folder, made with ``O_EXCL``
(the first free part goes to the first who asks; asking again returns the part already held). Only the
holder of a part counts for that part's cells: another user's record of those cells is shown as ignored,
never mixed in. On a Slurm site every record is checked against Slurm's accounting (``pool.check_evidence``, lab
09's rules: the job exists, is the poster's, COMPLETED, backs one cell once, and its step time is within its
elapsed time); a record it does not back is left out of the table and named in the notes with its reasons. On
the local site the notes say that the table is unverified. Without a team (``team=None``) a participant is a team of one and runs every row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from coursekit.course import course_path, user_name
from coursekit.labs.kit import pool
from coursekit.labs.kit.energy import ENERGY_COLUMNS, energy_columns
from coursekit.labs.kit.participant import check_pseudonym
from coursekit.labs.kit.results import ResultsTable

POOL_PREFIX = "lab06-scaling"
PART_CLAIM = "part-{}.claim"
POSTED_FIELDS = ("n_gpu", "batch_size", "images_per_s_median", "step_time_s", "data_time_s", "compute_time_s",
                 "state", "job_id", *ENERGY_COLUMNS)


@dataclass(frozen=True)
class TeamPart:
    """One member's share of the team's sweep: its per-GPU batches, run on every GPU count."""

    team: str
    part: int  # 0-based
    parts: int
    batches: tuple[int, ...]  # the whole sweep's per-GPU batches
    n_gpus: tuple[int, ...]

    @property
    def my_batches(self) -> list[int]:
        return list(self.batches[self.part::self.parts])

    @property
    def pool_name(self) -> str:
        return pool_name(self.team)

    def owner_of(self, batch_size: int) -> int:
        """The part that runs ``batch_size``'s row."""
        return self.batches.index(batch_size) % self.parts

    def __str__(self) -> str:
        if self.parts == 1:
            return (f"no team: you run the whole sweep ({len(self.batches)} per-GPU batches x GPU counts "
                    f"{list(self.n_gpus)})")
        return (f"team {self.team}, part {self.part + 1} of {self.parts}: you run per-GPU batch "
                f"{', '.join(map(str, self.my_batches)) or '(none: the team has more parts than rows)'} on "
                f"{', '.join(map(str, self.n_gpus))} GPUs; your team runs the other rows")


def pool_name(team: str) -> str:
    return f"{POOL_PREFIX}-{team}"


def deal_rows(batches: list[int], parts: int) -> list[list[int]]:
    """The sweep's rows (per-GPU batches) dealt to ``parts`` members: member k gets rows k, k + parts, ..."""
    return [batches[k::parts] for k in range(parts)]


def take_part(team: str | None, participant: str, batches: list[int], n_gpus: list[int],
              team_size: int) -> TeamPart:
    """This participant's part of ``team``'s sweep (claimed: the first free part, or the one already held);
    ``team=None``: a team of one. ValueError on a bad team name or size; RuntimeError when every part
    of the team is held by others."""
    check_pseudonym(participant, what="participant")
    if team is None:
        return TeamPart(participant, 0, 1, tuple(batches), tuple(n_gpus))
    if not isinstance(team_size, int) or team_size < 1:
        raise ValueError(f"team_size={team_size!r}: the number of members of a team, at least 1")
    if not isinstance(team, str) or not pool.CLAIMABLE.fullmatch(team):
        raise ValueError(f"my_team={team!r}: the team's name from the instructor, lower-case letters and digits "
                         "(e.g. 'red'), or None to run the whole sweep yourself")
    folder = pool.pool_folder(pool_name(team))
    pool.make_shared_folder(folder)
    me = user_name(os.geteuid())
    for part in range(team_size):  # a part already held: re-running the notebook keeps it
        if pool.claim_owner(folder / PART_CLAIM.format(part)) == me:
            return TeamPart(team, part, team_size, tuple(batches), tuple(n_gpus))
    for part in range(team_size):
        try:
            fd = pool.open_own(folder / PART_CLAIM.format(part), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            continue
        try:
            os.write(fd, f"{me} {participant}\n".encode())
        finally:
            os.close(fd)
        return TeamPart(team, part, team_size, tuple(batches), tuple(n_gpus))
    holders = [pool.claim_owner(folder / PART_CLAIM.format(p)) for p in range(team_size)]
    raise RuntimeError(f"team {team!r} already has its {team_size} members ({', '.join(map(str, holders))}): "
                       "ask the instructor which team is yours")


def post_part(part: TeamPart, participant: str, sweep: Any) -> int:
    """Post this member's rows of the sweep (rows of ``labs.run_sweep``) to the team's pool."""
    records = [{"participant": participant, "team": part.team, "part": part.part,
                **{k: row.get(k) for k in POSTED_FIELDS},
                "num_parameters": (row.get("summary") or {}).get("num_parameters")} for row in sweep]
    return pool.post(part.pool_name, records)


def cell_key(record: dict[str, Any]) -> tuple[Any, Any]:
    """What a record measures: one cell of the sweep (GPU count, per-GPU batch); a job backs one record of it."""
    return record.get("n_gpu"), record.get("batch_size")


def cell_label(record: dict[str, Any]) -> str:
    return f"{record.get('n_gpu')} GPU(s), batch {record.get('batch_size')}"


def team_table(part: TeamPart, title: str = "") -> tuple[ResultsTable, list[str]]:
    """The team's sweep read back from its pool: the latest record of each (GPU count, per-GPU batch) posted
    by the holder of that row's part; and notes: rows not posted yet, records ignored and why."""
    records, problems = pool.read(part.pool_name)
    evidence = pool.check_evidence(records, problems, key=cell_key, label=cell_label, durations=("step_time_s",))
    folder = pool.pool_folder(part.pool_name)
    holders = {p: (pool.claim_owner(folder / PART_CLAIM.format(p)) if part.parts > 1 else user_name(os.geteuid()))
               for p in range(part.parts)}
    cells: dict[tuple[int, int], dict[str, Any]] = {}
    ignored = 0
    for record in pool.counted(records):
        batch, n_gpu = record.get("batch_size"), record.get("n_gpu")
        if batch not in part.batches or n_gpu not in part.n_gpus:
            ignored += 1
            continue
        if record["user"] != holders.get(part.owner_of(batch)):
            ignored += 1  # not the part's holder: never mixed into the team's table
            continue
        cells[(n_gpu, batch)] = record  # records are oldest first: the latest wins
    # a team of one reads its own records back: there is no teammate's line to doubt
    notes = ([f"the team's records are {pool.UNVERIFIED}"]
             if records and evidence == pool.UNVERIFIED and part.parts > 1 else [])
    notes += [f"ignored: {problem}" for problem in problems]
    not_theirs = sum(1 for r in records if r.get("not_theirs"))
    if ignored or not_theirs:
        notes.append(f"ignored {ignored + not_theirs} record(s) not posted by the holder of their part")
    notes += pool.marked([r for r in records if r.get("evidence") and not r.get("not_theirs")], cell_label)
    for index, batches in enumerate(deal_rows(list(part.batches), part.parts)):
        missing = [b for b in batches if any((n, b) not in cells for n in part.n_gpus)]
        if missing:
            who = holders.get(index) or "nobody yet"
            notes.append(f"part {index + 1} ({who}): batch {', '.join(map(str, missing))} not posted yet")
    rows = [cells[key] for key in sorted(cells)]
    columns = ("n_gpu", "batch_size", "images_per_s_median", *energy_columns(rows), "step_time_s", "state",
               "participant")  # energy only where the GPUs measured it
    # the printed columns; the rows keep the step's split (data, compute) and the parameters for step_split
    kept = (*columns, "data_time_s", "compute_time_s", "num_parameters")
    return ResultsTable([{k: r.get(k) for k in kept} for r in rows], columns=list(columns), title=title), notes


def team_progress() -> list[dict[str, Any]]:
    """Every team of the course's pools, for the instructor: one row per part (``team``, ``part`` 1-based,
    ``holder`` the Unix user who took it, ``pseudonym``, ``cells`` the distinct (GPU count, batch) runs
    it posted); a part nobody took shows with no holder once a teammate took a higher one."""
    root = course_path(pool.POOLS_SETTING, pool.DEFAULT_POOLS)
    rows: list[dict[str, Any]] = []
    for folder in sorted(root.glob(f"{POOL_PREFIX}-*")) if root.is_dir() else []:
        team = folder.name[len(POOL_PREFIX) + 1:]
        taken = sorted(int(p.name[len("part-"):-len(".claim")]) for p in folder.glob("part-*.claim")
                       if p.name[len("part-"):-len(".claim")].isdigit())
        if not taken:
            continue  # a participant alone (no team): not a team's sweep
        records, _ = pool.read(folder.name)
        for part in range(max(taken) + 1):
            holder = pool.claim_owner(folder / PART_CLAIM.format(part))
            mine = [r for r in pool.counted(records) if r["user"] == holder and r.get("part") == part]
            rows.append({"team": team, "part": part + 1, "holder": holder or "",
                         "pseudonym": mine[-1]["participant"] if mine else "",
                         "cells": len({(r.get("n_gpu"), r.get("batch_size")) for r in mine})})
    return rows
