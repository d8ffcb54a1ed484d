"""Pooled results of a room: a shared, append-only store where each participant's records land with their
pseudonym, and every participant (and the instructor) reads the whole room's.

A pool is a folder of the course, ``<course>/pools/<name>/`` (``pools`` in coursekit.toml moves them all,
e.g. to a project space every participant can write), shared by several Unix users: ``kit/shared_folder.py``
says how records are posted, read and attributed to the owner of their file, and how pseudonyms are claimed
(its names are importable from here too).

A record names its job (``job_id``) where it can: ``check_evidence`` holds the pool to lab 09's rules
(``kit/evidence.py``: the job is known to Slurm's accounting, the poster's, COMPLETED, claimed once for one
measurement, long enough for the durations it claims); ``counted`` then leaves out what accounting does not
back, and ``marked`` lists it with its reasons, so that no bad record moves a room's figure unseen. On the local
site (no accounting) it says the pool is ``UNVERIFIED``.

The race's leaderboard (lab 09) is such a folder; so are the pools of lab 06's team sweep::

    pool.post("lab06-scaling-red", [{"participant": "ada", "n_gpu": 4, "img_s": 9100.0}])
    records, problems = pool.read("lab06-scaling-red")
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from coursekit.course import course_path, user_name
from coursekit.labs.kit.shared_folder import (
    CLAIM_SUFFIX,
    CLAIMABLE,
    READER_FIELDS,
    RUN_FILE_MODE,
    RUNS_SUFFIX,
    SHARED_FOLDER_MODE,
    SPARE_NAME,
    SPARE_TOKEN_BYTES,
    append_record,
    claim,
    claim_owner,
    claim_refusal,
    expected_owner,
    make_shared_folder,
    mark_pseudonyms,
    open_own,
    own_file,
    posting_file,
    pseudonym_owner,
    read_folder,
    read_lines,
    reserved_for,
    spare_files,
    unix_user_named,
)

# the shared folder's names (kit/shared_folder.py) stay importable from here: pool.claim, pool.RUNS_SUFFIX
__all__ = [
    "AUTO", "CLAIM_SUFFIX", "CLAIMABLE", "DEFAULT_POOLS", "POOL_NAME", "POOLS_SETTING", "READ_FIELDS",
    "READER_FIELDS", "RUN_FILE_MODE", "RUNS_SUFFIX", "SHARED_FOLDER_MODE", "SPARE_NAME", "SPARE_TOKEN_BYTES",
    "UNVERIFIED", "VERIFIED", "append_record", "check_evidence", "claim", "claim_owner", "claim_refusal",
    "counted", "expected_owner", "make_shared_folder", "mark_pseudonyms", "marked", "open_own", "own_file",
    "pool_folder", "post", "posting_file", "pseudonym_owner", "read", "read_folder", "read_lines",
    "reserved_for", "spare_files", "unix_user_named", "user_name"
]

POOLS_SETTING, DEFAULT_POOLS = "pools", "pools"  # coursekit.toml key, default folder of the course
POOL_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,80}")


# ---------------------------------------------------------------- pools: named folders of the course


def pool_folder(name: str) -> Path:
    """The folder of pool ``name``: ``<course>/pools/<name>/`` (``pools`` in coursekit.toml moves them)."""
    if not isinstance(name, str) or not POOL_NAME.fullmatch(name):
        raise ValueError(f"pool name {name!r}: lower-case letters, digits, '.', '_' and '-' (e.g. 'lab06-red')")
    return course_path(POOLS_SETTING, DEFAULT_POOLS) / name


def _is_pool_record(record: Any) -> bool:
    return isinstance(record.get("participant"), str) and bool(record["participant"])


def post(name: str, records: Iterable[dict[str, Any]]) -> int:
    """Append ``records`` (each with its ``participant`` pseudonym) to pool ``name``; returns how many. The
    pool's folder is made shared (1777) when this user creates it."""
    folder = pool_folder(name)
    records = list(records)
    for record in records:
        if not _is_pool_record(record):
            raise ValueError(f"pool {name}: every record needs a 'participant' (a pseudonym); got {record!r}")
    make_shared_folder(folder)
    now = time.time()
    for record in records:
        append_record({"posted": now, **record}, folder)
    return len(records)


def read(name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of pool ``name`` (``user``: the Unix user who posted it; ``not_theirs``: why it does not
    count, or None), oldest first, and what was skipped."""
    return read_folder(pool_folder(name), _is_pool_record, "a record of the pool")


def counted(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records that count: their poster's own pseudonym, in a file only they can write, and (once
    ``check_evidence`` ran) backed by Slurm's accounting."""
    return [r for r in records if not r.get("not_theirs") and not r.get("evidence")]


# ---------------------------------------------------------------- evidence: the same rules as lab 09's race

AUTO = "auto"
VERIFIED = "sacct"
UNVERIFIED = ("unverified: this site keeps no Slurm accounting (the local site), so nothing stands behind a pooled "
              "record but its line")
READ_FIELDS = (*READER_FIELDS, "posted", "evidence", "unverifiable")  # not what a record says: its reposting is the same record


def _content(record: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in record.items() if k not in READ_FIELDS}, sort_keys=True, default=str)


def check_evidence(records: list[dict[str, Any]], problems: list[str], key: Callable[[dict[str, Any]], Any],
                   label: Callable[[dict[str, Any]], str], durations: Sequence[str] = (),
                   accounting: Any = AUTO) -> str:
    """Check a pool's records (``read``'s) against Slurm's accounting, as lab 09's board does
    (``kit.evidence.check_jobs``): each record names its ``job_id``, a job that accounting knows, of the Unix
    user who posted the record, COMPLETED; a job claimed for the same measurement (``key(record)``, e.g. a
    sweep's cell, a seed; ``label``: it in words) by two records with other values marks both (the same record
    posted again by a re-run notebook is not a second claim); the ``durations`` fields (seconds measured
    inside the job) are within its elapsed time. Sets ``record["evidence"]`` (the reasons; ``counted`` then
    leaves the record out, ``marked`` lists it). ``accounting``: job id -> sacct's record (data: tests plant
    it), None for none, ``AUTO``: sacct's on a Slurm site (one call for the pool), none on the local site.
    Returns ``VERIFIED``, or ``UNVERIFIED`` where there is no accounting (nothing is marked then)."""
    from coursekit.labs.kit.evidence import check_jobs, site_accounting

    if isinstance(accounting, str) and accounting == AUTO:
        accounting = site_accounting(records, problems, what="the pooled records")
    if accounting is None:
        for record in records:
            record["evidence"] = []
        return UNVERIFIED
    check_jobs(records, accounting, key=key, label=label, durations=durations, noun="record", many="records",
               measured="measured", content=_content)
    hidden = sorted({str(r.get("user")) for r in records if r.get("unverifiable")})
    if hidden:  # a site whose sacct shows a participant only their own jobs: counted, said
        problems.append(f"the records of {', '.join(hidden)} are not verifiable from your account (this site's Slurm "
                        "shows each participant only their own jobs, PrivateData=jobs): counted as posted; the "
                        "instructor's view checks them")
    return VERIFIED


def marked(records: Iterable[dict[str, Any]], label: Callable[[dict[str, Any]], str]) -> list[str]:
    """The records left out of a room's figure, each in one line with its reasons (the pseudonym's or file's,
    then accounting's): "ignored bob's record (seed 3): job 12 is Unix user ada's, ..."."""
    lines = []
    for record in records:
        reasons = ([record["not_theirs"]] if record.get("not_theirs") else []) + list(record.get("evidence") or ())
        if reasons:
            lines.append(f"ignored {record.get('user')}'s record ({label(record)}, posted as "
                         f"{record.get('participant')!r}): {'; '.join(reasons)}")
    return lines
