"""``coursekit instructor ...``: set up a course, stage its data once, follow and clean up the room's jobs.

    coursekit instructor setup COURSE_DIR [--site S] [--account A] [--data-dir D] [--leaderboard F] [--pools D] [--job-prefix P]
                                   [--participants GLOB]
    coursekit instructor data cifar10 --dir D      download + verify CIFAR-10 once for everyone (login node)
    coursekit instructor data jpeg --dir D         lab 05's synthetic JPEG tree, written once in a shared folder
    coursekit instructor data fashion-mnist --dir D  copy + verify Debian's Fashion-MNIST (no internet needed)
    coursekit instructor jobs [--all]              every participant's jobs of this course (by its job prefix)
    coursekit instructor cancel --course           cancel every active job of this course
    coursekit instructor results [--out F.csv]     each participant's lab results in one CSV table
    coursekit instructor room [--csv F.csv]        who is at which lab, whose jobs failed and why, exit tickets
    coursekit instructor race verify [--top N]     lab 09: re-run the top entries as the instructor, the verified board
    coursekit instructor race clear                lab 09: end a round (its runs and claims moved to archive/)

The course's job prefix (``job_prefix`` in its coursekit.toml) starts every job name of its participants
(``<prefix>-<pseudonym>-<experiment>``, ``labs.job_name``): on a cluster the instructor finds the room's
jobs in Slurm by it. On the local site (no Slurm) the course's own job registry is read instead. Where each participant has a course
folder of their own (a hub: ``~/course``), the course's ``participants`` setting (a glob, e.g. ``/home/*/course``)
is where ``results`` and ``room`` read their job folders by default.

The package, one concern a module: ``commands`` (argparse and dispatch), ``course_setup`` (coursekit.toml, the
participants' notebooks and folders), ``data`` (CIFAR-10, Fashion-MNIST), ``jobs`` (the course's jobs, listed
or cancelled), ``results`` (the results CSV), ``room_jobs`` and ``room`` (the room view: its jobs, then its rows),
``common`` (exit statuses, an OSError in words, a CSV cell); the labs' own parts in ``lab05_jpeg`` (lab 05's
JPEG tree), ``lab06_teams`` (lab 06's team sweeps in the room) and ``lab09_race`` (lab 09's race commands).
This module re-exports the names other code imports (``room_table``, ``show_room``, ``add_parser``, ...).
"""

from __future__ import annotations

from coursekit.instructor.commands import WHAT_TO_DO, add_parser, guarded, slurm_advice
from coursekit.instructor.common import EXIT_FAILED, EXIT_OK, RESULT_DIGITS, os_reason
from coursekit.instructor.course_setup import (
    PARTICIPANT_NOTEBOOKS,
    REPO_NOTEBOOKS,
    course_toml,
    participant_folders,
    setup,
    toml_string,
)
from coursekit.instructor.data import data_cifar10, data_fashion_mnist, verify_cifar10
from coursekit.instructor.jobs import (
    JOB_FIELDS,
    NO_ACCOUNTING_NOTE,
    cancel_course,
    course_jobs,
    job_prefix,
    print_jobs,
)
from coursekit.instructor.lab05_jpeg import data_jpeg
from coursekit.instructor.lab06_teams import team_lines
from coursekit.instructor.lab09_race import race_rules, race_verify
from coursekit.instructor.results import (
    DEFAULT_RESULTS,
    RESULT_FIELDS,
    SWEEP_RUN_GLOB,
    gather_results,
    participant_of,
    write_results,
)
from coursekit.instructor.room import (
    ROOM_COLUMNS,
    ROOM_FIELDS,
    ROOM_TIME_FORMAT,
    exit_ticket_cells,
    participant_row,
    print_room,
    room_fields,
    room_prediction_lines,
    room_table,
    show_room,
    write_room,
)
from coursekit.instructor.room_jobs import (
    FAILED_STATES,
    PENDING_STATES,
    RUNNING_STATES,
    STDERR_LINES,
    Participant,
    Room,
    RoomJob,
    gather_room,
    last_stderr,
)

__all__ = [
    "DEFAULT_RESULTS", "EXIT_FAILED", "EXIT_OK", "FAILED_STATES", "JOB_FIELDS", "NO_ACCOUNTING_NOTE",
    "PARTICIPANT_NOTEBOOKS", "PENDING_STATES", "Participant", "REPO_NOTEBOOKS", "RESULT_DIGITS",
    "RESULT_FIELDS", "ROOM_COLUMNS", "ROOM_FIELDS", "ROOM_TIME_FORMAT", "RUNNING_STATES", "Room", "RoomJob",
    "STDERR_LINES", "SWEEP_RUN_GLOB", "WHAT_TO_DO", "add_parser", "cancel_course", "course_jobs",
    "course_toml", "data_cifar10", "data_fashion_mnist", "data_jpeg", "exit_ticket_cells", "gather_results",
    "gather_room", "guarded", "job_prefix", "last_stderr", "os_reason", "participant_folders",
    "participant_of", "participant_row", "print_jobs", "print_room", "race_rules", "race_verify",
    "room_fields", "room_prediction_lines", "room_table", "setup", "show_room", "slurm_advice", "team_lines",
    "toml_string", "verify_cifar10", "write_results", "write_room",
]
