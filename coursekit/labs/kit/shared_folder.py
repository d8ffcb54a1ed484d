"""A folder shared by several Unix users (a JupyterHub), append-only: each user's records land in their own
file, and every user (and the instructor) reads them all. The pools of results (``kit/pool.py``) and lab 09's
race are such folders.

The folder has mode 1777, sticky, so that everyone creates files and nobody deletes or replaces another's.
Each user appends only to ``<unix user>.jsonl`` in it (created by them, mode 0644: they write, all read),
one JSON line per record, in one ``write`` under an exclusive ``flock``: many kernels may post at once
and no line is ever torn or lost. Readers merge every ``*.jsonl`` of the folder and attribute each record
to the **owner of its file** (``record["user"]``), never to a field of the line.

Nobody can squat another's file. In a 1777 folder anyone may create any name, so ``bob`` can create
``ada.jsonl`` before ada posts. The reader therefore accepts a runs file only under a name its owner
may use: ``<user>.jsonl`` owned by ``<user>``, or ``<user>.<uid>.<token>.jsonl`` owned by the uid it names
(and by the user it names); any other ``*.jsonl`` (a squatted ``ada.jsonl`` owned by bob, a stray
``notes.jsonl``) is ignored, with a note naming it and its owner (``problems``). The writer posts to
``<user>.jsonl``; when that name is taken by someone else it posts, without anybody's help, to its own
``<user>.<uid>.<token>.jsonl`` (``token``: random hex, which a squatter cannot guess in advance; an existing
one of its own is reused). ``extra`` names (lab 09's ``leaderboard`` setting, a course from before) are read
whoever owns them, attributed to their owner. A pseudonym belongs to the
user who claimed it first: posting creates ``<pseudonym>.claim`` in the folder (``O_EXCL``: the kernel
decides who was first), except a name reserved for someone (``reserved_for``): another user's login (bob cannot
post as ``ada``, nor take ``ada`` by claiming it before her: the reader gives a login's pseudonym to that user
as soon as they post under it) and the names a lab fixes (lab 09's ``baseline``: the instructor's); the
refusal says what to do. Records of a pseudonym posted by another user, or read from a file other users can
write, carry a ``not_theirs`` reason: shown, never counted. A line that is not a record of the pool, a link
or an unreadable file is reported (``problems``) and skipped, never fatal.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import pwd
import re
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from coursekit.course import user_name

RUNS_SUFFIX, CLAIM_SUFFIX = ".jsonl", ".claim"  # <unix user>.jsonl: a writer's records; <pseudonym>.claim
RUN_FILE_MODE = 0o644  # the owner writes, everyone (the instructor, the other participants) reads
SHARED_FOLDER_MODE = 0o1777  # everyone creates files, nobody deletes or replaces another's (sticky)
READER_FIELDS = ("user", "not_theirs")  # set by the reader from the file, never taken from a line
CLAIMABLE = re.compile(r"[a-z][a-z0-9]*")  # pseudonyms that may have a claim file
SPARE_NAME = re.compile(r"(?P<user>[^.]+)\.(?P<uid>\d+)\.(?P<token>[0-9a-f]{8,})")  # <user>.<uid>.<token>.jsonl
SPARE_TOKEN_BYTES = 8


def open_own(path: Path, flags: int) -> int:
    """Open ``path`` (never through a link) and check it is this user's own regular file."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, RUN_FILE_MODE)
    except FileExistsError:
        raise  # a claim made first by someone: the caller asks whose
    except OSError as error:
        try:
            holder = user_name(os.lstat(path).st_uid)
        except OSError:
            raise PermissionError(f"{path}: cannot write it ({error.strerror or error}): the shared folder "
                                  f"{path.parent} must let every participant create a file (chmod 1777)") from error
        raise PermissionError(f"{path} belongs to {holder}, not to you ({user_name(os.geteuid())}), or is a link: "
                              "ask the instructor to remove it, then post again") from error
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise PermissionError(f"{path} belongs to {user_name(info.st_uid)}, not to you "
                              f"({user_name(os.geteuid())}): ask the instructor to remove it, then post again")
    if stat.S_IMODE(info.st_mode) != RUN_FILE_MODE:
        os.fchmod(fd, RUN_FILE_MODE)  # readable by all (a umask of 027 would hide it), writable by you only
    return fd


def unix_user_named(name: str) -> bool:
    """Is ``name`` a Unix user of this machine (a participant's or the instructor's login, say)?"""
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def reserved_for(participant: str, owners: Mapping[str, str] | None = None) -> str | None:
    """The Unix user a pseudonym is reserved for, whoever claims it first: ``owners``' (lab 09's ``baseline``:
    the course's instructor), else the Unix user of that very name (nobody takes another's login as a
    pseudonym); None: first come."""
    if participant in (owners or {}):
        return (owners or {})[participant]
    return participant if CLAIMABLE.fullmatch(participant) and unix_user_named(participant) else None


def claim_refusal(participant: str, owner: str, me: str, owners: Mapping[str, str] | None = None) -> str:
    """Why ``me`` may not claim ``participant`` (reserved for ``owner``), and what to do instead."""
    from coursekit.labs.kit.participant import from_login

    mine = from_login(me)
    instead = (f"post under your own pseudonym: labs.choose_pseudonym({mine!r}) (your login, {me!r}, is "
               f"always yours)" if not unix_user_named(mine) or mine == me else
               "post under a pseudonym of your own: labs.choose_pseudonym('...'), 1 to 5 lower-case letters or digits "
               "that are nobody's login")
    if participant in (owners or {}):
        return (f"{me} may not post as {participant!r}: that name is Unix user {owner}'s only (the course's "
                f"coursekit.toml); {instead}")
    return (f"{me} may not post as {participant!r}: it is the login of another user of this machine ({owner}), "
            f"whose runs it names; {instead}")


def claim(participant: str, folder: Path, owners: Mapping[str, str] | None = None) -> str:
    """Claim ``participant`` for this Unix user in ``folder`` (first come: ``<pseudonym>.claim`` made with
    ``O_EXCL``); returns the user it belongs to (you, or whoever claimed it first). A pseudonym reserved for
    another user (``reserved_for``: ``owners``' names, another user's login) is refused with a PermissionError
    saying what to do (root, who can write any file anyway, may post under a login's name: the tests do)."""
    if not CLAIMABLE.fullmatch(participant):
        raise ValueError(f"participant {participant!r}: lower-case letters and digits, starting with a letter")
    claim_path = folder / f"{participant}{CLAIM_SUFFIX}"
    me = user_name(os.geteuid())
    owner = reserved_for(participant, owners)
    if owner is not None and owner != me and (participant in (owners or {}) or os.geteuid() != 0):
        raise PermissionError(claim_refusal(participant, owner, me, owners))
    try:
        fd = open_own(claim_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return claim_owner(claim_path) or me
    try:
        os.write(fd, f"{me}\n".encode())
    finally:
        os.close(fd)
    return me


def pseudonym_owner(participant: str, folder: Path, owners: Mapping[str, str] | None = None) -> str | None:
    """Whose pseudonym ``participant`` is in ``folder``, as the reader decides: ``owners``', else this user's own
    login's, else its claim's owner (None: unclaimed)."""
    if participant in (owners or {}):
        return (owners or {})[participant]
    if participant == user_name(os.geteuid()):
        return participant
    return claim_owner(folder / f"{participant}{CLAIM_SUFFIX}") if CLAIMABLE.fullmatch(participant) else None


def claim_owner(claim_path: Path) -> str | None:
    """The user who claimed a pseudonym (the owner of its regular claim file), None without one."""
    try:
        info = os.lstat(claim_path)
    except OSError:
        return None
    return user_name(info.st_uid) if stat.S_ISREG(info.st_mode) else None


def own_file(folder: Path) -> Path:
    """This Unix user's file in a shared folder: ``<folder>/<user>.jsonl`` (its first choice; ``posting_file``
    says where a post goes when another user took that name)."""
    return folder / f"{user_name(os.geteuid())}{RUNS_SUFFIX}"


def expected_owner(name: str) -> tuple[str, int | None] | None:
    """Who may own the runs file ``name``: (user, uid) for ``<user>.<uid>.<token>.jsonl``, (user, None) for
    ``<user>.jsonl``; None for a name that is not a runs file's."""
    if not name.endswith(RUNS_SUFFIX):
        return None
    stem = name[:-len(RUNS_SUFFIX)]
    spare = SPARE_NAME.fullmatch(stem)
    if spare:
        return spare["user"], int(spare["uid"])
    return (stem, None) if stem and "." not in stem else None


def _mine(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return info.st_uid == os.geteuid() and stat.S_ISREG(info.st_mode)


def spare_files(folder: Path) -> list[Path]:
    """This user's own ``<user>.<uid>.<token>.jsonl`` files of ``folder``, oldest name first."""
    me, uid = user_name(os.geteuid()), os.geteuid()
    return sorted(p for p in folder.glob(f"{glob.escape(me)}.{uid}.*{RUNS_SUFFIX}")
                  if expected_owner(p.name) == (me, uid) and _mine(p))


def posting_file(folder: Path) -> Path:
    """Where this user's next record goes: ``<user>.jsonl`` when it is free or theirs, else their own spare
    ``<user>.<uid>.<token>.jsonl`` (an existing one, or a new name nobody could have guessed)."""
    first = own_file(folder)
    if not (first.exists() or first.is_symlink()) or _mine(first):
        return first
    spares = spare_files(folder)
    if spares:
        return spares[0]
    return folder / f"{user_name(os.geteuid())}.{os.geteuid()}.{secrets.token_hex(SPARE_TOKEN_BYTES)}{RUNS_SUFFIX}"


def append_record(record: dict[str, Any], folder: Path, owners: Mapping[str, str] | None = None) -> None:
    """Append one record to this Unix user's own file of ``folder`` (one ``write`` under ``flock``:
    concurrent writers never interleave), after claiming its ``participant`` pseudonym (first come; ``claim``
    refuses one reserved for another user, ``owners``' or another's login)."""
    folder.mkdir(parents=True, exist_ok=True)
    participant = record.get("participant")
    if isinstance(participant, str) and CLAIMABLE.fullmatch(participant):
        claim(participant, folder, owners)
    line = {k: v for k, v in record.items() if k not in READER_FIELDS}
    target = posting_file(folder)
    try:
        fd = open_own(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except PermissionError:
        if target != own_file(folder):
            raise
        fd = open_own(posting_file(folder), os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # taken meanwhile: the spare
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            os.write(fd, (json.dumps(line, sort_keys=True, default=str) + "\n").encode())
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_lines(path: Path, problems: list[str]) -> tuple[os.stat_result, list[str]] | None:
    """The lines of one regular file (under a shared lock); None, with a problem, otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        problems.append(f"{path}: not read ({error.strerror or error}): skipped")
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"{path}: not a regular file: skipped")
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError as error:
        problems.append(f"{path}: not read ({error.strerror or error}): skipped")
        return None
    finally:
        os.close(fd)
    return info, b"".join(chunks).decode("utf-8", errors="replace").splitlines()


def read_folder(folder: Path, is_record: Callable[[Any], bool], kind: str, extra: Iterable[str] = (),
                owners: Mapping[str, str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of the ``*.jsonl`` files of ``folder`` (and the ``extra`` file names) that ``is_record``
    accepts, each with ``user`` (its file's owner) and ``not_theirs``, oldest posted first; and what was
    skipped (``kind`` names a record in those messages). ``owners``: pseudonyms that belong to a given Unix
    user whatever claims or earlier posts say (lab 09's baseline: the course's instructor)."""
    if not folder.is_dir():
        return [], []
    extra = set(extra)
    names = sorted({p.name for p in folder.glob(f"*{RUNS_SUFFIX}")} | extra)
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    seen: set[tuple[int, int]] = set()
    for name in names:
        found = read_lines(folder / name, problems)
        if found is None:
            continue
        info, lines = found
        if (info.st_dev, info.st_ino) in seen:
            problems.append(f"{folder / name}: a second link to a file already read: skipped")
            continue
        seen.add((info.st_dev, info.st_ino))
        owner = user_name(info.st_uid)
        if name not in extra:
            expected = expected_owner(name)
            if expected is None or expected[0] != owner or expected[1] not in (None, info.st_uid):
                named = f"named after {expected[0]}" if expected else "not named after a user"
                problems.append(f"{folder / name}: {named} but owned by {owner}: ignored (a runs file counts only "
                                f"under its owner's name: {owner}{RUNS_SUFFIX} or {owner}.{info.st_uid}.<token>"
                                f"{RUNS_SUFFIX})")
                continue
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        bad = 0
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not (isinstance(record, dict) and is_record(record)):
                bad += 1
                if bad == 1:
                    problems.append(f"{folder / name} line {number}: not {kind}: skipped")
                continue
            record["user"] = owner
            record["not_theirs"] = (f"posted in {name}, a file other users can write (mode "
                                    f"{stat.S_IMODE(info.st_mode):o}): not attributable" if shared else None)
            records.append(record)
        if bad > 1:
            problems.append(f"{folder / name}: {bad} lines in all are not {kind}: skipped")
    records.sort(key=_posted)  # stable: a file's own order is kept
    mark_pseudonyms(records, folder, owners)
    return records, problems


def _posted(record: dict[str, Any]) -> float:
    value = record.get("posted")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("inf")


def mark_pseudonyms(records: list[dict[str, Any]], folder: Path, fixed: Mapping[str, str] | None = None) -> None:
    """Mark the records of a pseudonym posted by another user than its owner (``fixed``'s, else its claim's
    owner, else the user of its earliest attributable record)."""
    owners: dict[str, str] = dict(fixed or {})
    # a pseudonym that is the login of a user who posted under it is theirs, whatever claims or order say: nobody
    # squats another's login by claiming it first (a claim file made by hand) or by posting under it first
    owners.update({r["participant"]: r["user"] for r in records if r["participant"] == r["user"]
                   and r["participant"] not in (fixed or {}) and r["not_theirs"] is None})
    for record in records:
        participant = record["participant"]
        if participant in (fixed or {}):
            if record["not_theirs"] is None and owners[participant] != record["user"]:
                record["not_theirs"] = (f"{participant!r} is Unix user {owners[participant]}'s only (coursekit.toml), "
                                        f"posted by {record['user']}")
            continue
        if participant not in owners:
            claimed = claim_owner(folder / f"{participant}{CLAIM_SUFFIX}") if CLAIMABLE.fullmatch(participant) else None
            if claimed is not None:
                owners[participant] = claimed
            elif record["not_theirs"] is None:
                owners[participant] = record["user"]
        owner = owners.get(participant)
        if record["not_theirs"] is None and owner is not None and owner != record["user"]:
            record["not_theirs"] = (f"pseudonym of another user: {participant!r} belongs to Unix user {owner}, "
                                    f"posted by {record['user']}")


def make_shared_folder(folder: Path) -> None:
    """Create ``folder`` shared (1777) if it is missing, in one step: made and opened up under a temporary
    name, then renamed into place, so that nobody ever sees it with this user's umask (two members who
    create it at once: the first rename wins, the other's folder is removed)."""
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    os.chmod(staging, SHARED_FOLDER_MODE)
    try:
        os.rename(staging, folder)
    except OSError:
        staging.rmdir()
        if not folder.is_dir():
            raise
