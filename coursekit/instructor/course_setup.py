"""``coursekit instructor setup``: the course's coursekit.toml and the participants' notebooks; and where the
participants' own course folders are (the course's ``participants`` glob)."""

from __future__ import annotations

import getpass
import glob
import json
import os
import pwd
import sys
from pathlib import Path

from coursekit.course import (
    COURSE_CONFIG_FILE,
    COURSE_DIR_ENV,
    course_dir,
    course_setting,
)
from coursekit.instructor.common import EXIT_FAILED, EXIT_OK

REPO_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PARTICIPANT_NOTEBOOKS = "notebooks"


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quotes, backslashes and control characters escaped)."""
    return json.dumps(value)  # JSON's string escapes are TOML's for basic strings


def course_toml(site: str, account: str | None, data_dir: str, leaderboard: str, job_prefix: str,
                profile: str | None, pools: str | None = None, instructor: str | None = None,
                participants: str | None = None) -> str:
    """The course's coursekit.toml."""
    q = toml_string
    lines = ["# written by `coursekit instructor setup`; every participant's notebook reads it",
             f"site = {q(site)}", f"data_dir = {q(data_dir)}          # CIFAR-10 and lab 05's JPEG tree, shared",
             f"leaderboard = {q(leaderboard)}    # lab 09's race: its folder holds one runs file per user",
             f"job_prefix = {q(job_prefix)}          # starts every job name: `coursekit instructor jobs` finds them"]
    if instructor:
        lines.append(f"instructor = {q(instructor)}          # the instructor's Unix user: lab 09's baseline is theirs only")
    if pools:
        lines.append(f"pools = {q(pools)}          # the room's pooled results (lab 06's team sweeps), one file per user")
    if participants:
        lines.append(f"participants = {q(participants)}          # each participant's course folder: "
                     "`coursekit instructor results` and `room` read their jobs")
    if profile:
        lines.append(f"profile = {q(profile)}")
    if account:
        lines += ["", "[site_defaults]", f"account = {q(account)}"]
    return "\n".join(lines) + "\n"


def setup(folder: Path, site: str, account: str | None, data_dir: str | None, leaderboard: str | None,
          job_prefix: str, profile: str | None, doctor: bool, force: bool, pools: str | None = None,
          instructor: str | None = None, participants: str | None = None) -> int:
    from coursekit.labs.kit.exercises import strip_folder
    from coursekit.labs.kit.participant import check_pseudonym
    from coursekit.labs.kit.pool import make_shared_folder

    check_pseudonym(job_prefix, what="job_prefix")  # the same rules: short, safe in a job name
    teacher = instructor or getpass.getuser()
    try:
        pwd.getpwnam(teacher)
    except KeyError as error:
        raise ValueError(f"--instructor {teacher}: no such Unix user here; give the instructor's login") from error
    folder = folder.expanduser().resolve()
    config = folder / COURSE_CONFIG_FILE
    if config.exists() and not force:
        raise ValueError(f"{config} exists: give --force to overwrite it, or choose another COURSE_DIR")
    folder.mkdir(parents=True, exist_ok=True)
    data = data_dir or str(folder / "data")
    board = leaderboard or str(folder / "race" / "leaderboard.jsonl")
    shared_pools = pools or str(folder / "pools")
    config.write_text(course_toml(site, account, data, board, job_prefix, profile, shared_pools, teacher, participants))
    make_shared_folder(Path(board).parent)  # 1777, this user's: the instructor clears a round without root
    make_shared_folder(Path(shared_pools))  # 1777 where this setup creates it
    reports = strip_folder(REPO_NOTEBOOKS, folder / PARTICIPANT_NOTEBOOKS) if REPO_NOTEBOOKS.is_dir() else None
    print(f"wrote {config}")
    if reports is None:
        print(f"coursekit instructor setup: error: the kit's notebooks are not in {REPO_NOTEBOOKS} (coursekit installed "
              "without its repository): no participant notebooks written; run setup from a clone of the repository "
              "(pip install -e .)", file=sys.stderr)
        return EXIT_FAILED
    print(f"participants' notebooks (no solutions): {len(reports)} files in {folder / PARTICIPANT_NOTEBOOKS}")
    print(f"data folder: {data} (stage it: coursekit instructor data cifar10 --dir {data}; "
          f"coursekit instructor data jpeg --dir {data}; offline: coursekit instructor data fashion-mnist --dir {data})")
    print(f"leaderboard: {board} (each participant posts to their own file in its folder, mode 1777; the folder must "
          f"be the instructor's ({teacher}), who clears a round with `coursekit instructor race clear`)")
    print(f"pooled results: {shared_pools} (lab 06's team sweeps; every participant must be able to create "
          "files in it: chmod 1777)")
    if participants:
        print(f"participants' course folders: {participants} (`coursekit instructor results` and `room` read their "
              "jobs; the instructor must be able to read them)")
    if not doctor:
        return EXIT_OK
    from coursekit.doctor import doctor as run_doctor

    os.environ[COURSE_DIR_ENV] = str(folder)
    return EXIT_OK if run_doctor(site) else EXIT_FAILED


def participant_folders() -> list[Path]:
    """The participants' own course folders (the course's ``participants`` glob, e.g. ``/home/*/course``; ``~``
    and ``$VARS`` expanded), each holding a coursekit.toml; [] when the course has no such setting."""
    from coursekit.course import course_relative

    pattern = course_setting("participants")
    if not pattern:
        return []
    return [Path(m) for m in sorted(glob.glob(str(course_relative(pattern))))
            if (Path(m) / COURSE_CONFIG_FILE).is_file() and Path(m).resolve() != course_dir()]
