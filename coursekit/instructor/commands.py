"""``coursekit instructor ...``: set up a course, stage its data once, follow and clean up the room's jobs.

The argparse group and its dispatch: each action's handler, guarded so that a failure of the environment
ends in one sentence, never a traceback (the actions themselves: the package's other modules)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coursekit import slurm_cli
from coursekit.course import (
    JOBS_SUBDIR,
    course_dir,
    course_setting,
)
from coursekit.instructor.common import EXIT_FAILED, EXIT_OK, os_reason
from coursekit.instructor.course_setup import participant_folders, setup
from coursekit.instructor.data import data_cifar10, data_fashion_mnist
from coursekit.instructor.jobs import cancel_course, course_jobs, job_prefix, print_jobs
from coursekit.instructor.lab05_jpeg import data_jpeg
from coursekit.instructor.lab09_race import cmd_race
from coursekit.instructor.results import DEFAULT_RESULTS, gather_results, write_results
from coursekit.instructor.room import print_room, room_table, write_room
from coursekit.instructor.room_jobs import STDERR_LINES
from coursekit.sites import site_jobs_dir


def cmd_setup(args: argparse.Namespace) -> int:
    return setup(args.course_dir, args.site, args.account, args.data_dir, args.leaderboard, args.job_prefix,
                 args.profile, doctor=not args.no_doctor, force=args.force, pools=args.pools,
                 instructor=args.instructor, participants=args.participants)


def cmd_data(args: argparse.Namespace) -> int:
    if args.dataset == "cifar10":
        return data_cifar10(args.dir)
    if args.dataset == "fashion-mnist":
        return data_fashion_mnist(args.dir, args.source)
    return data_jpeg(args.dir, args.profile, args.workers)


def cmd_jobs(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    notes: list[str] = []
    print_jobs(course_jobs(prefix, finished=args.all, notes=notes), prefix)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    ids = cancel_course(prefix)
    print(f"cancelled {len(ids)} job(s) of course prefix {prefix!r}" + (f": {' '.join(ids)}" if ids else ""))
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    prefix = args.prefix or course_setting("job_prefix")
    roots = [Path(p) for p in args.jobs_dir] or [p for p in [site_jobs_dir()] if p.exists()]  # none yet: no run
    if not args.jobs_dir:  # the participants' own course folders too (a hub's ~/course)
        roots += [folder / JOBS_SUBDIR for folder in participant_folders() if (folder / JOBS_SUBDIR).exists()]
    if args.jobs_dir and not any(root.is_dir() for root in roots):
        raise ValueError(f"--jobs-dir {' '.join(args.jobs_dir)}: no such folder; give the participants' jobs folders, "
                         "e.g. --jobs-dir /home/*/dl-course/jobs")
    notes: list[str] = []
    rows = gather_results(roots, prefix, warnings=notes)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    out = args.out or course_dir() / DEFAULT_RESULTS
    try:
        write_results(rows, out)
    except OSError as error:
        where = "" if args.out else " (the default place, in the course folder)"
        raise ValueError(f"cannot write the results table to {out}{where}: {os_reason(error)}; give --out a CSV "
                         "file in a folder you can write to, e.g. --out ~/results.csv") from error
    people = sorted({r["participant"] for r in rows})
    print(f"{len(rows)} run(s) of {len(people)} participant(s) ({', '.join(people) or '-'}) -> {out}")
    return EXIT_OK


def cmd_room(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    if args.jobs_dir and not any(Path(root).expanduser().is_dir() for root in args.jobs_dir):
        raise ValueError(f"--jobs-dir {' '.join(args.jobs_dir)}: no such folder; give the participants' jobs or course "
                         "folders, e.g. --jobs-dir /home/*/dl-course")
    notes: list[str] = []
    guesses: list[str] = []
    rows = room_table(args.jobs_dir or None, prefix, stderr_lines=args.lines, warnings=notes, predictions=guesses)
    failed: OSError | None = None
    if args.csv:  # written first: the table on the screen cannot lose it
        try:
            write_room(rows, args.csv)
        except OSError as error:
            failed = error
    print_room(rows, prefix, guesses)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    if failed is not None:
        raise ValueError(f"cannot write the room to {args.csv}: {os_reason(failed)}; give --csv a file in a folder "
                         "you can write to (the table above is complete)") from failed
    if args.csv:
        print(f"-> {args.csv}")
    return EXIT_OK


WHAT_TO_DO = {  # per action: what the instructor can do about a file or folder that cannot be used
    "setup": "choose a COURSE_DIR (and --data-dir, --leaderboard, --pools) you can write to",
    "data": "choose a --dir you can write to (the course's shared data folder)",
    "jobs": "check that the course folder and the job folders can be read (COURSEKIT_COURSE_DIR, --prefix)",
    "cancel": "check that the course folder and the job folders can be read (COURSEKIT_COURSE_DIR, --prefix)",
    "results": "give --out a CSV file in a folder you can write to, and --jobs-dir folders you can read",
    "room": "give --jobs-dir folders you can read, and --csv a file in a folder you can write to",
    "race": "run it as the instructor (coursekit.toml's `instructor`), from a course folder of theirs (the re-runs' "
            "job folders go there), the race folder theirs too (chown it to them once, as root)",
}


def slurm_advice(error: slurm_cli.SlurmError) -> str:
    """What to do about a Slurm command that failed, after what it said."""
    if "not installed or not on PATH" in error.message:
        return ("this course's site is a Slurm site: run this on the cluster's login node, where Slurm's commands "
                "are, or use the local site (COURSEKIT_SITE=local)")
    if "no answer within" in error.message:
        return "Slurm's controller did not answer: try again in a minute, or ask the cluster's admins"
    return "check that Slurm answers here (squeue, sacct), or ask the cluster's admins"


def guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """An instructor command whose failures caused by the environment (a file or folder that cannot be read or
    written, Slurm's commands missing or failing, a child process failing) end in one sentence on stderr, naming
    the problem and what to do, and exit status 1: never a Python traceback."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        action = getattr(args, "instructor_command", None) or "command"
        said = f"coursekit instructor {action}: error:"
        try:
            return handler(args)
        except BrokenPipeError:  # the reader stopped reading (`... | head`): nothing to say
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # so that Python's flush at exit says nothing
            return EXIT_OK
        except slurm_cli.SlurmError as error:
            print(f"{said} {error}; {slurm_advice(error)}", file=sys.stderr)
        except OSError as error:
            print(f"{said} {os_reason(error)}; {WHAT_TO_DO.get(action, 'check the paths given')}", file=sys.stderr)
        except subprocess.SubprocessError as error:
            print(f"{said} a command it runs failed ({error}); {WHAT_TO_DO.get(action, 'check the paths given')}",
                  file=sys.stderr)
        except (ValueError, KeyError) as error:
            print(f"{said} {error.args[0] if isinstance(error, KeyError) and error.args else error}", file=sys.stderr)
        return EXIT_FAILED

    return run


def _positive(text: str) -> int:
    """``--top``, ``--round``: a whole number, 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number, 1 or more")
    return int(text)


def _lines(text: str) -> int:
    """``--lines``: a count of lines, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"--lines {text!r}: give a number of lines, 0 or more")
    return int(text)


def add_parser(commands: Any) -> None:
    """The ``instructor`` command group of ``coursekit`` (cli.py)."""
    group = commands.add_parser("instructor", help="set up a course, stage its data, follow and clean up the "
                                "room's jobs, gather results", description=__doc__.splitlines()[0])
    sub = group.add_subparsers(dest="instructor_command", metavar="ACTION", required=True)

    s = sub.add_parser("setup", help="write COURSE_DIR/coursekit.toml and the participants' notebooks, run the doctor")
    s.add_argument("course_dir", type=Path, metavar="COURSE_DIR", help="the course folder (created)")
    s.add_argument("--site", default="local", help="site profile (coursekit sites), default local")
    s.add_argument("--account", help="Slurm account of the course (site_defaults.account)")
    s.add_argument("--data-dir", help="shared data folder (default COURSE_DIR/data)")
    s.add_argument("--leaderboard", help="lab 09's leaderboard file (default COURSE_DIR/race/leaderboard.jsonl)")
    s.add_argument("--pools", help="folder of the room's pooled results, e.g. lab 06's team sweeps "
                                   "(default COURSE_DIR/pools)")
    s.add_argument("--job-prefix", default="ck", help="starts every participant's job name (1-5 letters/digits)")
    s.add_argument("--profile", choices=("cpu", "gpu"), help="force the labs' profile (default: chosen per kernel)")
    s.add_argument("--instructor", help="the instructor's Unix user, who alone posts lab 09's baseline and clears "
                   "its rounds (default: the user running setup)")
    s.add_argument("--participants", metavar="GLOB", help="where each participant's own copy of the course lives, "
                   "e.g. '/home/*/course' on a hub (quoted: a glob read later): results and room read their jobs")
    s.add_argument("--no-doctor", action="store_true", help="skip the doctor's checks of the site")
    s.add_argument("--force", action="store_true", help="overwrite an existing coursekit.toml")
    s.set_defaults(handler=guarded(cmd_setup))

    d = sub.add_parser("data", help="stage a dataset once in a shared folder")
    d.add_argument("dataset", choices=("cifar10", "fashion-mnist", "jpeg"),
                   help="cifar10: download + verify; fashion-mnist: copy + verify Debian's files; jpeg: lab 05's tree")
    d.add_argument("--dir", type=Path, required=True, help="the shared data folder (the course's data_dir)")
    d.add_argument("--profile", choices=("cpu", "gpu"), default="gpu", help="jpeg: whose size (default gpu)")
    d.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="jpeg: writer processes")
    d.add_argument("--source", type=Path, help="fashion-mnist: the folder holding its four files (default Debian's "
                   "/usr/share/datasets/fashion-mnist)")
    d.set_defaults(handler=guarded(cmd_data))

    j = sub.add_parser("jobs", help="every participant's jobs of this course (active; --all: finished too)")
    j.add_argument("--all", action="store_true", help="also the finished jobs (sacct, last 7 days)")
    j.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    j.set_defaults(handler=guarded(cmd_jobs))

    c = sub.add_parser("cancel", help="cancel every active job of this course (end of the day)")
    c.add_argument("--course", action="store_true", required=True, help="every job of the course (required)")
    c.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    c.set_defaults(handler=guarded(cmd_cancel))

    r = sub.add_parser("results", help="each participant's finished runs in one CSV table")
    r.add_argument("--out", type=Path, help=f"CSV file (default COURSE/{DEFAULT_RESULTS})")
    r.add_argument("--jobs-dir", action="extend", nargs="+", default=[],
                   help="job folders to read, one or more (default the course's): e.g. /home/*/dl-course/jobs")
    r.add_argument("--prefix", help="only jobs with this prefix (default: the course's job_prefix)")
    r.set_defaults(handler=guarded(cmd_results))

    m = sub.add_parser("room", help="one row per participant: their lab, jobs, last failure and its stderr, "
                       "exit-ticket scores; those needing help first")
    m.add_argument("--jobs-dir", action="extend", nargs="+", default=[],
                   help="participants' jobs (or course) folders, one or more (default the course's): "
                   "e.g. /home/*/dl-course")
    m.add_argument("--csv", type=Path, help="also write the room to this CSV file")
    m.add_argument("--lines", type=_lines, default=STDERR_LINES,
                   help=f"last stderr lines of each participant's last failed job (default {STDERR_LINES})")
    m.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    m.set_defaults(handler=guarded(cmd_room))

    g = sub.add_parser("race", help="lab 09's race: verify the top entries by re-running them, clear a round")
    g.add_argument("race_command", choices=("verify", "clear"), help="verify: re-run the top entries' configurations "
                   "and seeds as your jobs and print the verified board (the race's final standings); clear: move the "
                   "round's runs and claims to the race folder's archive/<time>/ (the folder must be yours: setup "
                   "makes it so)")
    g.add_argument("--leaderboard", type=Path, help="the leaderboard setting's file (default: the course's)")
    g.add_argument("--top", type=_positive, default=3, help="verify: how many of the top entries to re-run (default 3)")
    g.add_argument("--round", type=_positive, help="verify: the round (default: the latest on the board)")
    g.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                   help="verify: wait for the re-runs and collect them (default); --no-wait returns at once: "
                   "`race verify --collect` later")
    g.add_argument("--collect", action="store_true", help="verify: submit nothing, collect the re-runs submitted "
                   "before (waiting for them unless --no-wait) and print the verified board")
    g.add_argument("--again", action="store_true", help="verify: re-run entries already re-run too")
    g.add_argument("--profile", choices=("cpu", "gpu"), help="verify: lab 09's rules of this profile (default: the "
                   "course's, as the notebooks choose it)")
    g.add_argument("--timeout", type=float, help="verify: seconds to wait for the re-runs (default: the lab's "
                   "timeout per run x the runs)")
    g.set_defaults(handler=guarded(cmd_race))
