"""The leaderboard: a JSON-lines file in a folder the instructor shares, written only from finished runs.

One line per run (a seed of a submission), appended under an exclusive ``flock`` in one ``write``: many
participants' kernels may post at once and no line is ever torn or lost (the same scheme as the job
registry, ``coursekit/jobs/registry.py``). No network service, no keys: the path comes from the course's
``coursekit.toml`` (``leaderboard = "/shared/course/race/leaderboard.jsonl"``), default
``<course>/race/leaderboard.jsonl``.

``entries(...)`` groups the runs by participant and submission: time-to-target mean ± std over the seeds,
and the marks of the verification (``verify.py``): an entry is ranked only when it has no mark. A seed run
again under the same submission replaces its earlier run (the latest counts): re-running a notebook, or a
second attempt under the same name, never piles runs onto one entry. ``entry_name(config)`` names a
submission after its settings, so a changed configuration is a new entry and the same one replaces itself.

Several Unix users (a JupyterHub) share the race folder (mode 1777: sticky, so nobody deletes or replaces
another's file). The setting names a file; its folder is the race folder. Each user appends only to
``<race folder>/<unix user>.jsonl`` (created by them, mode 0644), and readers merge every ``*.jsonl`` of the
folder (the setting's own file too: a course from before). A run is attributed to the **owner of the file**
it came from (``run["user"]``), never to a field of the line. A pseudonym belongs to the user who claimed it
first: posting creates ``<pseudonym>.claim`` in the folder (``O_EXCL``: the kernel decides who was first;
without a claim, the user of the earliest run); but nobody may claim ``baseline`` (the instructor's) or another
user's login (``pool.reserved_for``: the post is refused, saying what to do), and a login's pseudonym is its
user's as soon as they post under it, whoever claimed it by hand before. Runs of a pseudonym posted by another user, or read from a
file other users can write, keep a ``not_theirs`` reason: shown and marked, never ranked. A line that is
not a run, a link or an unreadable file is reported (``read_board``) and skipped, never fatal. These rules
of a folder shared by a room are those of every pool of results (``coursekit/labs/kit/pool.py``, which
implements them), squatting included: a file named after a user but owned by another is ignored (with a note
naming it), and a user whose ``<user>.jsonl`` was taken posts to their own ``<user>.<uid>.<token>.jsonl``.

The baseline (``BASELINE``) is the instructor's only: the Unix user ``instructor`` of the course's coursekit.toml
(`coursekit instructor setup` writes it). Only that user may post it (``may_post_baseline``; anyone else gets a
PermissionError saying whom to ask), and the reader marks baseline runs of any other user, whatever
``baseline.claim`` says. A course that names no instructor (one user, a laptop) lets its user post it.
The notebook's pretend rival posts as ``rival_name(pseudonym)`` (``<pseudonym>-rival``), a name no participant
can choose (a participant's pseudonym has no dash), under the poster's own pseudonym's job name: it never
collides with a participant's entry or job.

The race ends with the instructor's re-runs (`coursekit instructor race verify`, ``rerun.py``): each re-run of an
entry's seed is a line of the instructor's own runs file, ``participant`` ``RERUN`` (``re-run``: a name no
participant can take, with a dash, and never claimed) and ``rerun_of`` naming the entry (participant, submission,
round, Unix user). ``RERUN`` belongs to the verifier only (``verifier``: the course's instructor, else the race
folder's owner), as the baseline belongs to the instructor: the reader (``read_race``) takes re-runs from the
verifier's own file only; a re-run line anyone else writes into their own file is ignored, with a note, and
never joins an entry. Re-run lines live in the runs files, so `race clear` archives them with their round.

A round ends with `coursekit instructor race clear` (``clear_round``): every runs and claim file of the folder is
moved into ``archive/<time>/`` of the folder, a sub-folder the instructor owns (0755: nobody else adds to
it). The race folder is sticky (1777): in such a folder a file may be renamed or removed only by its owner,
by root, or by **the folder's owner**. So the race folder must be the instructor's (`coursekit instructor setup`
makes it so; on the hub `slurm/hub.sh install` chowns it to the instructor): then the instructor clears a round
without root, and nobody else can remove another's file.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
import warnings
from pathlib import Path
from typing import Any

from coursekit.course import course_instructor, course_path, user_name
from coursekit.labs.kit import pool
from coursekit.labs.kit.participant import check_pseudonym
from coursekit.labs.kit.pool import CLAIM_SUFFIX
from coursekit.labs.kit.results import ResultsTable
from coursekit.train.config import TrainConfig
from coursekit.train.target import config_hash

BASELINE = "baseline"  # the submission name of the instructor's baseline
RERUN = "re-run"  # the participant field of the instructor's re-run lines (no pseudonym has a dash)
RIVAL_SUFFIX = "-rival"  # the notebook's pretend rival: <pseudonym>-rival, a name no participant can choose
ARCHIVE = "archive"  # the race folder's sub-folder of cleared rounds (the instructor's)
ENTRY_HASH_CHARS = 8  # of the config hash, in an entry's name
# the summary fields a run keeps on the leaderboard
RUN_FIELDS = ("status", "target_acc", "target_reached", "time_to_target_s", "steps_to_target", "epochs_to_target",
              "val_acc_at_target", "confirm_acc", "confirm_samples", "confirm_hash", "seed", "config_hash", "code_hash",
              "val_samples", "val_hash", "torch_version",
              "cuda_version", "device_name", "gpu_name", "gpu_count", "world_size", "num_parameters", "train_time_s",
              "total_time_s", "evaluations", "config")

# a submission's table in the notebook, one line per seed: the run's target fields come from its summary
TARGET_FIELDS = ("time_to_target_s", "steps_to_target", "epochs_to_target")
SEED_COLUMNS = ("seed", "job_id", "state", "val_acc", *TARGET_FIELDS, "total_time_s")


LEADERBOARD_SETTING, DEFAULT_LEADERBOARD = "leaderboard", "race/leaderboard.jsonl"  # coursekit.toml key, default


def own_runs_path(board: Path | None = None) -> Path:
    """Where this Unix user posts the race's runs: ``<user>.jsonl`` in the folder of the leaderboard setting
    (``board``; by default the course's), one file per user."""
    board = Path(board or course_path(LEADERBOARD_SETTING, DEFAULT_LEADERBOARD))
    return board.parent / f"{user_name(os.geteuid())}.jsonl"


def leaderboard_path() -> Path:
    """The course's leaderboard file (``leaderboard`` in coursekit.toml, else ``<course>/race/leaderboard.jsonl``)."""
    return course_path(LEADERBOARD_SETTING, DEFAULT_LEADERBOARD)


def claim(participant: str, path: Path | None = None) -> str:
    """Claim ``participant`` for this Unix user in the race folder (first come); returns whose it is."""
    return pool.claim(participant, Path(path or leaderboard_path()).parent, reserved_names())


def rival_name(pseudonym: str) -> str:
    """The pseudonym of ``pseudonym``'s pretend rival: ``<pseudonym>-rival`` (no participant's pseudonym has a
    dash, and each participant's rival carries their own name: no two collide)."""
    return f"{check_pseudonym(pseudonym)}{RIVAL_SUFFIX}"


def may_post_baseline() -> bool:
    """May this Unix user post the baseline? Only the course's instructor (``instructor`` in coursekit.toml);
    anyone, in a course that names none (one user)."""
    instructor = course_instructor()
    return instructor is None or user_name(os.geteuid()) == instructor


def baseline_advice() -> str:
    """What a participant does when the round has no baseline: ask the instructor for one."""
    instructor = course_instructor()
    return (f"the baseline is posted by the instructor only (Unix user {instructor}): ask them to run lab 09's "
            "baseline cell for this round; your entry's time is compared with it once it is on the board")


def reserved_names() -> dict[str, str]:
    """Pseudonyms of the race that belong to one Unix user: ``baseline``, the course's instructor's (none in a
    course that names no instructor)."""
    instructor = course_instructor()
    return {BASELINE: instructor} if instructor else {}


def append_run(record: dict[str, Any], path: Path | None = None) -> None:
    """Append one run to this Unix user's own file of the race folder, after claiming its pseudonym (refused,
    saying what to do, for ``baseline`` unless you are the instructor, and for another user's login)."""
    pool.append_record(record, own_runs_path(path).parent, reserved_names())


def _is_run(record: dict[str, Any]) -> bool:
    return (isinstance(record.get("participant"), str) and bool(record["participant"])
            and isinstance(record.get("submission"), str) and bool(record["submission"]))


def verifier(path: Path | None = None) -> str:
    """The Unix user whose re-runs count: the course's instructor (``instructor`` in coursekit.toml), else, in a
    course that names none, the owner of the race folder (`coursekit instructor setup` makes it the instructor's)."""
    instructor = course_instructor()
    if instructor:
        return instructor
    try:
        return user_name(Path(path or leaderboard_path()).parent.stat().st_uid)
    except OSError:
        return user_name(os.geteuid())


def _is_rerun(record: dict[str, Any]) -> bool:
    of = record.get("rerun_of")
    return (isinstance(of, dict) and all(isinstance(of.get(k), str) and of[k] for k in ("participant", "submission", "user"))
            and isinstance(of.get("round"), int) and not isinstance(of.get("round"), bool))


def read_race(path: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Every run of the race folder, the verifier's re-runs, and what was skipped: ``(runs, reruns, problems)``.
    Runs are oldest first, each with ``user`` (the owner of its file) and ``not_theirs`` (why it is not that
    user's to post, or None). A re-run line counts only from the verifier's own file (``verifier``; not
    writable by others): any other is said in ``problems`` and left out of both lists."""
    board = Path(path or leaderboard_path())
    instructor = course_instructor()
    owners = {RERUN: verifier(board), **({BASELINE: instructor} if instructor else {})}
    records, problems = pool.read_folder(board.parent, _is_run, "a run of the race",
                                         extra=[board.name] if board.exists() else [], owners=owners)
    runs = [r for r in records if r["participant"] != RERUN]
    reruns, refused = [], {}
    for record in records:
        if record["participant"] != RERUN:
            continue
        if record.get("not_theirs") or not _is_rerun(record):
            refused.setdefault(record["user"], record.get("not_theirs") or "no rerun_of naming an entry")
            continue
        reruns.append(record)
    for user, why in refused.items():
        problems.append(f"re-run lines in {user}'s runs file ignored ({why}): only the re-runs of Unix user "
                        f"{owners[RERUN]} (the instructor) count")
    return runs, reruns, problems


def read_board(path: Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every run of the race folder and what was skipped: ``(runs, problems)`` (``read_race`` without the
    re-runs). Runs are oldest first, each with ``user`` (the owner of its file) and ``not_theirs`` (why it is
    not that user's to post, or None)."""
    runs, _, problems = read_race(path)
    return runs, problems


def read_runs(path: Path | None = None) -> list[dict[str, Any]]:
    """Every complete run of the race folder, oldest first, attributed to the owner of its file (``user``);
    what was skipped (a torn or foreign line, a foreign file) is reported as a warning."""
    runs, problems = read_board(path)
    for problem in problems:
        warnings.warn(f"leaderboard: {problem}", stacklevel=2)
    return runs


def is_theirs(run: dict[str, Any]) -> bool:
    """Is the run its file owner's to post (their pseudonym, in a file only they can write)?"""
    return not run.get("not_theirs")


def run_record(participant: str, submission: str, summary: dict[str, Any], job_id: str | None = None,
               round_: int = 1) -> dict[str, Any]:
    """The leaderboard line of one finished run (its summary's verifiable fields)."""
    if participant != BASELINE:
        check_pseudonym(participant.removesuffix(RIVAL_SUFFIX), what="participant")
    if not submission:
        raise ValueError("submission is empty: name it (e.g. 'bs512-bf16')")
    if not summary:
        raise ValueError(f"run of {participant}/{submission} (job {job_id}) has no summary: it did not finish")
    return {"participant": participant, "submission": submission, "round": round_, "job_id": job_id,
            "posted": time.time(), **{k: summary.get(k) for k in RUN_FIELDS}}


def post_runs(participant: str, submission: str, rows: Any, path: Path | None = None, round_: int = 1) -> int:
    """Post the finished runs of a submission (rows of ``labs.run_sweep``: ``job_id`` and ``summary``);
    a run already posted (same job id) is not posted twice. Returns how many were posted."""
    if participant == BASELINE and not may_post_baseline():
        raise PermissionError(f"{user_name(os.geteuid())} may not post the baseline: {baseline_advice()}")
    me = user_name(os.geteuid())
    known = {(r.get("job_id"), r.get("participant")) for r in read_runs(path) if r.get("job_id") and r["user"] == me}
    posted = 0
    for row in rows:
        if not row.get("summary"):
            continue  # a job that did not finish leaves no summary: nothing to post
        if (row.get("job_id"), participant) in known:
            continue
        append_run(run_record(participant, submission, row["summary"], row.get("job_id"), round_), path)
        posted += 1
    return posted


def entry_name(config: TrainConfig | dict[str, Any], prefix: str = "tuned") -> str:
    """``tuned-<config hash>``: the same settings (any seed) give the same name, other settings another."""
    values = config.to_dict() if isinstance(config, TrainConfig) else dict(config)
    return f"{prefix}-{config_hash(values)[:ENTRY_HASH_CHARS]}"


def failures(rows: Any, lines: int = 3) -> list[str]:
    """Why each run of a submission that left no summary failed: its state and its own last error lines."""
    from coursekit.jobs.handle import get_job

    found = []
    for row in rows:
        if row.get("summary"):
            continue
        job_id, state = row.get("job_id"), row.get("state") or "?"
        try:
            said = get_job(job_id).tail(lines, "err").strip() if job_id else ""
        except (LookupError, OSError, ValueError):
            said = ""
        seed = getattr(row.get("config"), "seed", row.get("seed"))
        found.append(f"seed {seed} (job {job_id}) {state}: " + (said.replace("\n", " | ") or "no error output"))
    return found


def post_entry(participant: str, submission: str, rows: Any, path: Path | None = None, round_: int = 1) -> int:
    """Post a submission's finished runs and print what happened: how many were posted and, for each run
    that failed, why (its job's last error lines). Returns how many runs were posted."""
    posted = post_runs(participant, submission, rows, path, round_)
    print(f"{participant}/{submission}: posted {posted} run(s)")
    me = user_name(os.geteuid())
    owner = pool.pseudonym_owner(participant, Path(path or leaderboard_path()).parent, reserved_names())
    if owner is not None and owner != me:
        print(f"  MARKED: the pseudonym {participant!r} belongs to Unix user {owner}: your runs are shown, never "
              "ranked; choose a pseudonym of your own")
    for line in failures(rows):
        print(f"  FAILED {line}")
    return posted


def seed_table(rows: Any) -> ResultsTable:
    """A submission's runs (``labs.run_sweep``'s rows), one line per seed: its job, its accuracy, its time, steps
    and epochs to the target (from the run's summary; "-" where it left none or missed the target), its wall time."""
    table = ResultsTable(rows, title=getattr(rows, "title", ""))  # copies of the rows: the sweep's stay as they are
    for row in table.rows:
        summary = row.get("summary") or {}
        row.update({name: summary.get(name) for name in TARGET_FIELDS})
    return table.with_columns(*SEED_COLUMNS)


def has_entry(participant: str, submission: str, path: Path | None = None, round_: int = 1) -> bool:
    """Has ``participant`` posted runs of ``submission`` in this round?"""
    return any((r["participant"], r["submission"], int(r.get("round") or 1)) == (participant, submission, round_)
               and is_theirs(r) for r in read_runs(path))


def has_baseline(path: Path | None = None, round_: int = 1) -> bool:
    """Has the baseline of this round been posted (by the instructor, on the room's hardware)?"""
    return any(r["participant"] == BASELINE and int(r.get("round") or 1) == round_ and is_theirs(r)
               for r in read_runs(path))


def baseline_epochs(path: Path | None = None, round_: int = 1) -> list[float]:
    """Each posted baseline seed's epochs to the target in this round (the instructor's runs that reached it, the
    latest run of each seed: a seed posted again replaces its earlier run, as on the board)."""
    runs = [r for (participant, _, round_no, _), group in group_runs(read_runs(path)).items()
            if participant == BASELINE and round_no == round_ for r in group]
    return sorted(float(r["epochs_to_target"]) for r in runs
                  if is_theirs(r) and r.get("target_reached") and r.get("epochs_to_target") is not None)


def group_runs(runs: list[dict[str, Any]]) -> dict[tuple[str, str, int, str], list[dict[str, Any]]]:
    """Runs by (participant, submission, round, Unix user), in posting order; a seed posted again by the same
    user replaces its earlier run (the latest counts): another user's runs never replace or join them."""
    latest: dict[tuple[str, str, int, str], dict[Any, dict[str, Any]]] = {}
    for run in runs:
        key = (run["participant"], run["submission"], int(run.get("round") or 1), str(run.get("user") or "?"))
        seeds = latest.setdefault(key, {})
        seeds.pop(run.get("seed"), None)  # re-inserted last: the group keeps posting order
        seeds[run.get("seed")] = run
    return {key: list(seeds.values()) for key, seeds in latest.items()}


def _archive_root(folder: Path) -> Path:
    """The instructor's archive folder in the race folder: ``archive/`` when it is theirs (made now if missing),
    else, when someone else made ``archive`` first, a fresh ``archive.<uid>.<token>/`` nobody could guess."""
    root = folder / ARCHIVE
    try:
        root.mkdir(mode=0o755)
    except FileExistsError:
        info = root.lstat()
        if not (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()):
            root = folder / f"{ARCHIVE}.{os.geteuid()}.{secrets.token_hex(8)}"
            root.mkdir(mode=0o755)
    return root


def clear_round(path: Path | None = None) -> tuple[Path, list[str]]:
    """End a round: move every runs and claim file of the race folder into ``archive/<time>/`` of it (a folder
    of the instructor's, which nobody else can add to); returns (that folder, the names moved). Needs no root
    when the race folder is the caller's: in a sticky folder, its owner may move anyone's file.
    PermissionError saying what to do when the folder is someone else's (root's, on an old hub)."""
    folder = Path(path or leaderboard_path()).parent
    me = os.geteuid()
    owner = folder.stat().st_uid
    if owner != me and me != 0:
        raise PermissionError(
            f"{folder} belongs to {user_name(owner)}, not to you ({user_name(me)}): in a sticky folder (mode 1777) "
            "only a file's owner, root or the folder's owner may move a file, so the race folder must be yours; "
            f"have it made yours once (as root: chown {user_name(me)} {folder}), then clear again")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith((pool.RUNS_SUFFIX, CLAIM_SUFFIX))
                   and not p.is_dir())
    archive = _archive_root(folder) / time.strftime("%Y%m%d-%H%M%S")
    archive.mkdir(mode=0o755, exist_ok=True)  # two clears in one second: one archive
    moved = []
    for name in names:
        try:
            os.rename(folder / name, archive / name)
        except FileNotFoundError:
            continue  # removed meanwhile by its owner
        moved.append(name)
    return archive, moved
