"""The ``coursekit`` command (also ``python -m coursekit``).

    coursekit doctor [--site NAME]          is this machine ready? exit 0 only when all is well
    coursekit queue [--name N] [--watch]    the course's active and recent jobs
    coursekit jobs [--name N] [--limit K]   every job of the course (newest last)
    coursekit logs JOB [-n N] [--err] [--task K]
    coursekit cancel JOB... | --name N
    coursekit sites                          the site profiles, the chosen one marked
    coursekit instructor ACTION              setup, data, jobs, cancel, results (coursekit/instructor/)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from coursekit.jobs.logs import job_logs, looks_like_job_id
from coursekit.sites import load_site, site_names
from coursekit.slurm_cli import SlurmError

DEFAULT_LOG_LINES = 20
DEFAULT_JOBS_LIMIT = 50
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Handler = Callable[[argparse.Namespace], int]


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a number > 0")
    return value


def _job_id(text: str) -> str:
    if not looks_like_job_id(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id (digits, or <array>_<task> such as 12_3)")
    return text


# ------------------------------------------------------------------------------------------ commands


def cmd_doctor(args: argparse.Namespace) -> int:
    from coursekit.doctor import doctor

    return EXIT_OK if doctor(args.site) else EXIT_FAILED


def cmd_queue(args: argparse.Namespace) -> int:
    from coursekit.jobs.queue_view import QueueSource, print_queue, watch_queue

    if args.watch:
        try:
            watch_queue(args.name, args.interval)
        except KeyboardInterrupt:
            print()
    else:
        print_queue(QueueSource(args.name))
    return EXIT_OK


def cmd_jobs(args: argparse.Namespace) -> int:
    from coursekit.jobs.queue_view import QueueSource, print_queue

    print_queue(QueueSource(args.name, recent_s=float("inf"), max_rows=args.limit))
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    from coursekit.jobs.handle import get_job, tail_lines

    job = get_job(args.job)
    stream = "err" if args.err else "out"
    logs = job_logs(job.folder, stream)
    if args.task >= len(logs):
        print(f"coursekit: job {job.job_id} ({job.name}) has no {stream} log for task {args.task} in {job.folder}"
              + (f" (tasks 0-{len(logs) - 1})" if logs else " (not started yet?)"), file=sys.stderr)
        return EXIT_FAILED
    print(f"==> {logs[args.task]} <==", file=sys.stderr)
    for line in tail_lines(logs[args.task], args.lines):
        print(line)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    from coursekit.jobs.handle import get_job, list_jobs

    if bool(args.jobs) == bool(args.name):
        print("coursekit cancel: give job ids or --name NAME (not both)", file=sys.stderr)
        return EXIT_USAGE
    if args.name:
        jobs = [job for job in list_jobs(args.name) if not job.done()]
        if not jobs:
            print(f"no running or pending job called {args.name!r}")
    else:
        jobs = []
        for job_id in args.jobs:
            try:
                jobs.append(get_job(job_id))
            except KeyError as error:
                print(f"coursekit: {error.args[0]}", file=sys.stderr)
                return EXIT_FAILED
    for job in jobs:
        job.cancel()
        print(f"cancelled {job.job_id} ({job.name})")
    return EXIT_OK


def cmd_sites(args: argparse.Namespace) -> int:
    try:
        chosen = load_site().name
    except ValueError as error:
        chosen = ""
        print(f"coursekit: the course's site is not valid: {error}", file=sys.stderr)
    rows = [("", "site", "scheduler", "GPUs/node", "description")]
    for name in site_names():
        site = load_site(name)
        gpus = str(site.gpus_per_node or "") or ("detected" if not site.partitions else "")
        if site.partitions:
            gpus = "/".join(sorted({str(p.gpus_per_node) for p in site.partitions.values()}))
        rows.append(("*" if name == chosen else "", name, site.scheduler, gpus, site.description))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4])
    print("* = the course's site (COURSEKIT_SITE, site = \"...\" in coursekit.toml, else slurm/local)")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coursekit", description="Deep-learning labs on GPU clusters: "
                                     "check the setup and follow the course's jobs.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    doctor = commands.add_parser("doctor", help="check Python, torch, GPUs, the site and Slurm")
    doctor.add_argument("--site", help="site profile to check (default: the course's)")
    doctor.set_defaults(handler=cmd_doctor)

    queue = commands.add_parser("queue", help="the course's active and recent jobs")
    queue.add_argument("--name", help="only the jobs with this name")
    queue.add_argument("--watch", action="store_true", help="refresh until every job has ended (Ctrl-C stops)")
    queue.add_argument("--interval", type=_positive_float, default=2.0, help="seconds between refreshes")
    queue.set_defaults(handler=cmd_queue)

    jobs = commands.add_parser("jobs", help="every job of the course, with its state")
    jobs.add_argument("--name", help="only the jobs with this name")
    jobs.add_argument("--limit", type=_positive_int, default=DEFAULT_JOBS_LIMIT, help="newest jobs shown")
    jobs.set_defaults(handler=cmd_jobs)

    logs = commands.add_parser("logs", help="the end of a job's log")
    logs.add_argument("job", type=_job_id, help="job id")
    logs.add_argument("-n", "--lines", type=_positive_int, default=DEFAULT_LOG_LINES, help="lines shown")
    logs.add_argument("--err", action="store_true", help="stderr instead of stdout")
    logs.add_argument("--task", type=int, default=0, help="task number (one log per task)")
    logs.set_defaults(handler=cmd_logs)

    cancel = commands.add_parser("cancel", help="cancel jobs by id, or every active job with a name")
    cancel.add_argument("jobs", nargs="*", type=_job_id, help="job ids")
    cancel.add_argument("--name", help="cancel every running or pending job with this name")
    cancel.set_defaults(handler=cmd_cancel)

    sites = commands.add_parser("sites", help="list the site profiles")
    sites.set_defaults(handler=cmd_sites)

    demo = commands.add_parser("demo", help="submit a real training job, follow it, read back its log, "
                               "metrics and a plot (local executor: no Slurm needed)")
    demo.add_argument("--site", default=None, help="site profile (default: local)")
    demo.add_argument("--output", default=None, help="folder for the plot (default: demo-output)")
    from coursekit import demo as demo_module

    demo_module.add_data_arguments(demo)
    demo.set_defaults(handler=cmd_demo)

    from coursekit import instructor

    instructor.add_parser(commands)  # coursekit instructor setup | data | jobs | cancel | results
    return parser


def cmd_demo(args: argparse.Namespace) -> int:
    """The README's main job (coursekit/demo.py)."""
    from coursekit import demo

    return demo.run_demo_on(args.site or demo.DEMO_SITE, args.output or demo.DEMO_OUTPUT, args.data, args.data_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code. Errors are one line on stderr, never a traceback."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except (ValueError, SlurmError) as error:
        print(f"coursekit {args.command}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except KeyError as error:
        print(f"coursekit {args.command}: error: {error.args[0] if error.args else error}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
