"""Evidence a participant cannot write: records checked against Slurm's accounting.

A participant writes their own records (lab 09's runs file, a pool's ``<user>.jsonl``): whatever a line says,
they could have typed it. What they cannot write is Slurm's accounting (``sacct``: written by slurmctld and
slurmdbd). A record that names a job is backed by it when accounting knows the job, the job is the Unix user's
who posted the record (sacct's User, else its UID), it ended COMPLETED, no other record claims the same job for
the same measurement with other values, and the job's elapsed time bounds the durations the record claims (each
of them, and their sum over the records of one job), within ``ELAPSED_TOLERANCE_S``.

``check_jobs`` sets ``record["evidence"]``: the reasons, in words, why accounting does not back a record (empty:
it does). Lab 09's leaderboard (``lab09_race.verify.check_evidence``) and the room's pools
(``pool.check_evidence``) use it. ``site_accounting`` asks sacct once for all the records' jobs on a Slurm
site, None on the local site (no accounting: what the records say is unverified); ``AccountingCache`` keeps the
records of jobs that ended, for a view refreshed every few seconds. A site may hide other users' jobs from a
participant's sacct (slurmdbd's ``PrivateData=jobs``): there, another user's record whose job the reader cannot
see is "not verifiable from your account" (``NOT_VISIBLE``), never marked as forged; the instructor, to whom
sacct shows every job of the course's account (its coordinator), sees the evidence whole.
"""

from __future__ import annotations

import math
import pwd
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

Accounting = Mapping[str, Mapping[str, Any]]  # job id -> sacct's record (slurm_cli.job_evidence)
NOT_VISIBLE = "not verifiable from your account"  # another user's job that this site's sacct hides from the reader


class AccountingAnswer(dict):  # type: ignore[type-arg]
    """sacct's records (job id -> record) and whose jobs they can show: ``own_only`` is the reader's Unix user
    when the site hides other users' jobs from them (slurmdbd's ``PrivateData=jobs``, read by a participant:
    ``slurm_cli.accounting_viewer``), None when sacct shows everyone's (the instructor, a coordinator)."""

    def __init__(self, records: Mapping[str, Mapping[str, Any]], own_only: str | None = None) -> None:
        super().__init__(records)
        self.own_only = own_only


# Slurm stamps a job's Start and End in whole seconds, so its Elapsed may read up to 1 s less than the time a
# clock inside the job measured.
ELAPSED_TOLERANCE_S = 1.0
ACCOUNTING_RETRY_S = 30.0  # a job accounting did not know (yet) is asked about again at most this often
# A record is posted as its job ends, and slurmdbd learns of the end a little later (seconds on a busy
# controller: CI saw a job read RUNNING right after its record was posted). A one-off read asks again, every
# ACCOUNTING_SETTLE_POLL_S (one sacct call for the jobs not ended), for at most ACCOUNTING_SETTLE_S.
ACCOUNTING_SETTLE_S = 30.0
ACCOUNTING_SETTLE_POLL_S = 2.0


def seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def owned_by(record: Mapping[str, Any], user: str) -> bool:
    """Is the job of ``record`` (sacct's) the Unix user ``user``'s (sacct's User, else its UID)?"""
    if record.get("user"):
        return str(record["user"]) == user
    try:
        return record.get("uid") is not None and int(record["uid"]) == pwd.getpwnam(user).pw_uid
    except KeyError:
        return user == f"uid{record.get('uid')}"


def check_jobs(lines: Sequence[dict[str, Any]], accounting: Accounting, *, key: Callable[[dict[str, Any]], Hashable],
               label: Callable[[dict[str, Any]], str], durations: Sequence[str] = (), noun: str = "run",
               many: str = "runs", measured: str = "trained", content: Callable[[dict[str, Any]], Hashable] | None = None) -> None:
    """Set ``line["evidence"]`` on every line (its ``job_id`` against ``accounting``, its poster ``line["user"]``).

    ``key(line)``: what the line measures (a seed, a cell of a sweep): a job backs one line per key; several
    lines of the job's owner claiming the same job and key are all marked, unless ``content`` says they are
    the same record posted again (``content(line)`` equal; None: every line is a claim of its own);
    ``label(line)``: that key in words ("seed 0"); ``durations``: the line's fields that a clock inside the job
    measured (the first present one is the line's share of its job's time: the shares of one job's lines, one
    per key, add up within the job's elapsed time; each field alone is within it too); ``noun``/``many``: a line
    and several lines in the reasons ("run"/"seeds", "record"/"records"); ``measured``: what the durations
    are, in the reasons ("trained", "measured").

    Where the site hides other users' jobs from the reader (``accounting`` an ``AccountingAnswer`` with
    ``own_only``), a job of another user that the answer lacks is no evidence of forgery: the line gets no
    reason but ``line["unverifiable"]`` (why, in words; None on every other line), and the instructor's view,
    which sees every job, decides."""
    rightful: dict[tuple[str, Hashable], list[dict[str, Any]]] = {}  # (job, key) -> lines of the job's own owner
    own_only = getattr(accounting, "own_only", None)
    for line in lines:
        reasons: list[str] = []
        line["unverifiable"] = None
        job_id = line.get("job_id")
        record = accounting.get(str(job_id)) if job_id not in (None, "") else None
        if job_id in (None, ""):
            reasons.append("names no Slurm job (job_id is empty): nothing stands behind its time")
        elif record is None and own_only is not None and str(line.get("user")) != own_only:
            line["unverifiable"] = (f"{NOT_VISIBLE}: job {job_id} is Unix user {line.get('user')}'s, and this site's "
                                    "Slurm shows each participant only their own jobs (PrivateData=jobs); the "
                                    "instructor's view checks it")
        elif record is None:
            reasons.append(f"job {job_id} is unknown to Slurm's accounting: no such job ran")
        else:
            if not owned_by(record, str(line.get("user"))):
                reasons.append(f"job {job_id} is Unix user {record.get('user') or record.get('uid')}'s, not "
                               f"{line.get('user')}'s who posted it: a copied {noun}")
            else:
                rightful.setdefault((str(job_id), key(line)), []).append(line)
            if record.get("state") != "COMPLETED":
                reasons.append(_not_completed(str(job_id), str(record.get("state"))))
            longest = max((t for t in (seconds(line.get(f)) for f in durations) if t is not None), default=None)
            elapsed = seconds(record.get("elapsed_s"))
            if longest is not None and elapsed is not None and longest > elapsed + ELAPSED_TOLERANCE_S:
                reasons.append(f"the {noun} says it {measured} {longest:.1f} s, but its job {job_id} ran {elapsed:.0f} s "
                               "in Slurm's accounting")
        line["evidence"] = reasons
    by_job: dict[str, list[dict[str, Any]]] = {}
    for (job_id, _), claims in rightful.items():
        distinct = {content(line) for line in claims} if content is not None else {id(line) for line in claims}
        if len(distinct) > 1:
            for line in claims:
                line["evidence"].append(f"job {job_id} ({label(line)}) is claimed by {len(claims)} lines: a job backs "
                                        f"one {noun}, posted once")
        by_job.setdefault(job_id, []).append(claims[-1] if content is not None else claims[0])
    for job_id, shares in by_job.items():
        if len(shares) < 2:
            continue  # one line: its own bound is checked above
        total = sum(next((t for t in (seconds(line.get(f)) for f in durations) if t is not None), 0.0)
                    for line in shares)
        elapsed = seconds(accounting[job_id].get("elapsed_s"))
        if elapsed is not None and total > elapsed + ELAPSED_TOLERANCE_S:
            for line in shares:
                line["evidence"].append(f"the {len(shares)} {many} of job {job_id} {measured} {total:.1f} s in all, "
                                        f"more than the job's elapsed {elapsed:.0f} s in Slurm's accounting")


def _not_completed(job_id: str, state: str) -> str:
    from coursekit import slurm_cli

    if slurm_cli.is_terminal(state):
        return f"job {job_id} ended {state} in Slurm's accounting, not COMPLETED"
    return (f"job {job_id} has not ended in Slurm's accounting ({state}), yet its record says it measured: it "
            "counts once the job has ended COMPLETED")


def settled_evidence(job_ids: Iterable[Any], settle_s: float = ACCOUNTING_SETTLE_S,
                     poll_s: float = ACCOUNTING_SETTLE_POLL_S,
                     sleep: Callable[[float], None] = time.sleep) -> dict[str, dict[str, Any]]:
    """sacct's records of ``job_ids`` (``slurm_cli.job_evidence``), asked again for the jobs accounting shows
    as not ended, every ``poll_s`` for at most ``settle_s``: a record is posted as its job ends, before
    slurmdbd hears of the end. One sacct call per ask, for the jobs still open only."""
    from coursekit import slurm_cli

    found = slurm_cli.job_evidence(str(j) for j in job_ids if j is not None)
    deadline = time.monotonic() + settle_s
    while True:
        still_open = [j for j, record in found.items() if not slurm_cli.is_terminal(str(record.get("state")))]
        if not still_open or time.monotonic() + poll_s > deadline:
            return found
        sleep(poll_s)
        found.update(slurm_cli.job_evidence(still_open))


class AccountingCache:
    """Slurm's records of a board's jobs, asked for gently: ONE sacct call per refresh for the ids not known yet
    (a finished job's record never changes: kept; an id accounting did not know, or a job not ended, is asked
    again at most every ``retry_s``). ``records(job_ids)`` -> job id -> record (``slurm_cli.job_evidence``)."""

    def __init__(self, retry_s: float = ACCOUNTING_RETRY_S) -> None:
        self.retry_s = retry_s
        self.known: dict[str, dict[str, Any]] = {}  # jobs that ended: their record is final
        self.pending: dict[str, dict[str, Any]] = {}  # jobs still running at the last ask: their latest record
        self.asked: dict[str, float] = {}  # id -> when it was last asked about without a final record

    def records(self, job_ids: Iterable[Any]) -> dict[str, dict[str, Any]]:
        from coursekit import slurm_cli

        now = time.monotonic()
        ids = {str(j) for j in job_ids if j is not None}
        ask = sorted(j for j in ids if j not in self.known and now - self.asked.get(j, -math.inf) >= self.retry_s)
        if ask:
            found = slurm_cli.job_evidence(ask)
            for job_id in ask:
                record = found.get(job_id)
                if record is not None and slurm_cli.is_terminal(str(record.get("state"))):
                    self.known[job_id] = record
                    self.asked.pop(job_id, None)
                    self.pending.pop(job_id, None)
                else:
                    self.asked[job_id] = now
                    if record is not None:
                        self.pending[job_id] = record
        return {j: self.known.get(j) or self.pending[j] for j in ids if j in self.known or j in self.pending}


def site_accounting(records: Iterable[Mapping[str, Any]], problems: list[str], cache: AccountingCache | None = None,
                    what: str = "the times below") -> AccountingAnswer | None:
    """Slurm's records of the records' jobs on a Slurm site (one sacct call for all of them, asked again for
    jobs not ended yet: ``settled_evidence``; ``cache``: a view's, that asks again only for what it does not
    know), None on the local site (no accounting). Accounting that
    does not answer on a Slurm site is said in ``problems`` (``what`` are then unverified) and gives None."""
    from coursekit import slurm_cli
    from coursekit.sites import load_site

    if load_site().is_local:
        return None
    job_ids = [r.get("job_id") for r in records]
    try:
        found = cache.records(job_ids) if cache is not None else settled_evidence(job_ids)
        return AccountingAnswer(found, slurm_cli.accounting_viewer())
    except slurm_cli.SlurmError as error:
        problems.append(f"Slurm's accounting did not answer ({error}): {what} are unverified")
        return None
