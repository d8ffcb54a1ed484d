"""``coursekit instructor ...``: set up a course, stage its data once, follow and clean up the room's jobs.

    coursekit instructor setup COURSE_DIR [--site S] [--account A] [--data-dir D] [--leaderboard F] [--job-prefix P]
    coursekit instructor data cifar10 --dir D      download + verify CIFAR-10 once for everyone (login node)
    coursekit instructor data jpeg --dir D         lab 05's synthetic JPEG tree, written once in a shared folder
    coursekit instructor data fashion-mnist --dir D  copy + verify Debian's Fashion-MNIST (no internet needed)
    coursekit instructor jobs [--all]              every participant's jobs of this course (by its job prefix)
    coursekit instructor cancel --course           cancel every active job of this course
    coursekit instructor results [--out F.csv]     each participant's lab results in one CSV table

The course's job prefix (``job_prefix`` in its coursekit.toml) starts every job name of its participants
(``<prefix>-<pseudonym>-<experiment>``, ``labs.job_name``): on a cluster the instructor finds the room's
jobs in Slurm by it. On the local site (no Slurm) the course's own job registry is read instead.
"""

from __future__ import annotations

import argparse
import csv
import getpass
import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

from coursekit import slurm_cli
from coursekit.course import COURSE_CONFIG_FILE, COURSE_DIR_ENV, course_dir, course_setting
from coursekit.sites import load_site, site_jobs_dir

REPO_NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PARTICIPANT_NOTEBOOKS = "notebooks"
DEFAULT_RESULTS = "results.csv"
RESULT_FIELDS = ("participant", "experiment", "job_name", "job_id", "status", "model", "dataset", "batch_size",
                 "precision", "world_size", "steps", "val_acc", "images_per_s", "total_time_s", "time_to_target_s",
                 "device_name", "run_dir")
JOB_FIELDS = ("job_id", "name", "user", "state", "elapsed", "node_list")
RESULT_DIGITS = 4  # significant digits of a float in the results CSV
EXIT_OK, EXIT_FAILED = 0, 1


# ------------------------------------------------------------------------------------------ setup


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string (quotes, backslashes and control characters escaped)."""
    return json.dumps(value)  # JSON's string escapes are TOML's for basic strings


def course_toml(site: str, account: str | None, data_dir: str, leaderboard: str, job_prefix: str,
                profile: str | None) -> str:
    """The course's coursekit.toml."""
    q = toml_string
    lines = ["# written by `coursekit instructor setup`; every participant's notebook reads it",
             f"site = {q(site)}", f"data_dir = {q(data_dir)}          # CIFAR-10 and lab 05's JPEG tree, shared",
             f"leaderboard = {q(leaderboard)}    # lab 09's race: a JSON-lines file every participant can append to",
             f"job_prefix = {q(job_prefix)}          # starts every job name: `coursekit instructor jobs` finds them"]
    if profile:
        lines.append(f"profile = {q(profile)}")
    if account:
        lines += ["", "[site_defaults]", f"account = {q(account)}"]
    return "\n".join(lines) + "\n"


def setup(folder: Path, site: str, account: str | None, data_dir: str | None, leaderboard: str | None,
          job_prefix: str, profile: str | None, doctor: bool, force: bool) -> int:
    from coursekit.labs.kit.exercises import strip_folder
    from coursekit.labs.kit.participant import check_pseudonym

    check_pseudonym(job_prefix, what="job_prefix")  # the same rules: short, safe in a job name
    folder = folder.expanduser().resolve()
    config = folder / COURSE_CONFIG_FILE
    if config.exists() and not force:
        raise ValueError(f"{config} exists: give --force to overwrite it, or choose another COURSE_DIR")
    folder.mkdir(parents=True, exist_ok=True)
    data = data_dir or str(folder / "data")
    board = leaderboard or str(folder / "race" / "leaderboard.jsonl")
    config.write_text(course_toml(site, account, data, board, job_prefix, profile))
    Path(board).parent.mkdir(parents=True, exist_ok=True)
    reports = strip_folder(REPO_NOTEBOOKS, folder / PARTICIPANT_NOTEBOOKS)
    print(f"wrote {config}")
    print(f"participants' notebooks (no solutions): {len(reports)} files in {folder / PARTICIPANT_NOTEBOOKS}")
    print(f"data folder: {data} (stage it: coursekit instructor data cifar10 --dir {data}; "
          f"coursekit instructor data jpeg --dir {data}; offline: coursekit instructor data fashion-mnist --dir {data})")
    print(f"leaderboard: {board} (participants need write access to its folder)")
    if not doctor:
        return EXIT_OK
    from coursekit.doctor import doctor as run_doctor

    os.environ[COURSE_DIR_ENV] = str(folder)
    return EXIT_OK if run_doctor(site) else EXIT_FAILED


# ------------------------------------------------------------------------------------------ data


def data_cifar10(folder: Path) -> int:
    """Download CIFAR-10 once (torchvision checks each archive's MD5) and verify the extracted batches."""
    from coursekit.labs.kit import datasets

    if not datasets.cifar10_present(folder):
        try:
            datasets.stage_cifar10(folder)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"--dir {folder}: could not download CIFAR-10 ({error}); run this on a login node "
                             "with internet access") from error
    problems = verify_cifar10(folder)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"CIFAR-10 in {folder / datasets.CIFAR10_FOLDER}: " + ("verified" if not problems else "NOT valid"))
    return EXIT_FAILED if problems else EXIT_OK


def verify_cifar10(folder: Path) -> list[str]:
    """Every batch file present with torchvision's MD5 (empty: all is well)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    base = Path(folder) / CIFAR10.base_folder
    return [f"{base / name}: missing or corrupt (MD5 differs)" for name, md5 in CIFAR10.train_list + CIFAR10.test_list
            if not check_integrity(str(base / name), md5)]


def data_fashion_mnist(folder: Path, source: Path | None = None) -> int:
    """Copy Debian's Fashion-MNIST (package dataset-fashion-mnist, or ``source``) to ``folder/fashion-mnist/``,
    each file verified by the MD5 of its uncompressed bytes; intact files already there are kept."""
    from coursekit.train.data import fashion_mnist

    staged = fashion_mnist.stage(folder, source)
    what = (f"copied {len(staged.copied)} of its 4 files from {staged.source}" if staged.copied
            else "already staged, its 4 files intact")
    print(f"Fashion-MNIST in {staged.folder}: {what} ({staged.bytes / 1e6:.1f} MB, MD5s verified); "
          f"train with --dataset fashion-mnist --data-dir {Path(folder).expanduser()}")
    return EXIT_OK


def data_jpeg(folder: Path, profile: str, workers: int) -> int:
    """Lab 05's JPEG tree (its ``profile`` settings), written once in ``folder`` under the name lab 05 looks for."""
    from coursekit.labs import lab_settings
    from coursekit.labs.lab05_data_loading import jpeg_tree_name
    from coursekit.train.data.jpeg import write_synthetic_jpeg_tree

    s = lab_settings("05", profile)
    root = Path(folder).expanduser() / jpeg_tree_name(s.jpeg_classes, s.jpeg_images_per_class, s.jpeg_size)
    done = root / ".complete"
    if done.exists():
        print(f"lab 05's JPEG tree is already in {root}")
        return EXIT_OK
    info = write_synthetic_jpeg_tree(root, s.jpeg_classes, s.jpeg_images_per_class, size=tuple(s.jpeg_size),
                                     workers=workers)
    done.write_text("written by coursekit instructor data jpeg\n")
    print(f"lab 05's JPEG tree ({profile} profile) in {root}: {info['images']:,} images, "
          f"{info['bytes'] / 1e6:.1f} MB, written in {info['seconds']:.0f} s")
    return EXIT_OK


# ------------------------------------------------------------------------------------------ jobs


def job_prefix(explicit: str | None) -> str:
    prefix = explicit or course_setting("job_prefix")
    if not prefix:
        raise ValueError(f"no job prefix: {course_dir()} is not a course folder with a job_prefix. Run this from the "
                         f"course folder (the one `coursekit instructor setup` wrote {COURSE_CONFIG_FILE} into), set "
                         f"{COURSE_DIR_ENV} to it, or give --prefix")
    return prefix


def course_jobs(prefix: str, finished: bool) -> list[dict[str, str]]:
    """The course's jobs: Slurm's (every user's, by name prefix) on a Slurm site, else the course registry's."""
    start = prefix + "-"
    if load_site().is_local:
        from coursekit.jobs.handle import list_jobs

        rows = [{"job_id": j.job_id, "name": j.name, "user": _folder_owner(j.folder), "state": j.state,
                 "elapsed": _clock(j.elapsed), "node_list": "local"} for j in list_jobs() if j.name.startswith(start)]
        return [r for r in rows if finished or not _ended(r["state"])]
    rows = [r for r in slurm_cli.squeue(all_states=finished) if r["name"].startswith(start)]
    if finished and slurm_cli.accounting_enabled():
        seen = {r["job_id"] for r in rows}
        text = slurm_cli.run(["sacct", "-a", "-n", "-P", "-X", "-S", "now-7days", "-o", ",".join(slurm_cli.SACCT_FIELDS)])
        rows += [{**r, "user": ""} for r in slurm_cli.parse_sacct(text)
                 if r["name"].startswith(start) and r["job_id"] not in seen]
    return sorted(rows, key=lambda r: [int(p) if p.isdigit() else 0 for p in r["job_id"].split("_")])


def _folder_owner(folder: Path) -> str:
    """The Unix user who owns a local job's folder (who submitted it)."""
    try:
        return pwd.getpwuid(Path(folder).stat().st_uid).pw_name
    except (OSError, KeyError):
        return getpass.getuser()


def _clock(seconds: float | None) -> str:
    """Seconds as Slurm's elapsed time, ``H:MM:SS`` (empty before the job starts)."""
    if seconds is None:
        return ""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def _ended(state: str) -> bool:
    return slurm_cli.is_terminal(state)


def print_jobs(rows: list[dict[str, str]], prefix: str) -> None:
    table = [JOB_FIELDS] + [tuple(str(r.get(f, "")) for f in JOB_FIELDS) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(JOB_FIELDS))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    print(f"{len(rows)} job(s) of course prefix {prefix!r}")


def cancel_course(prefix: str) -> list[str]:
    """Cancel every active job of the course; their ids."""
    active = [r for r in course_jobs(prefix, finished=False) if not _ended(r["state"])]
    ids = [r["job_id"] for r in active]
    if load_site().is_local:
        from coursekit.jobs.handle import get_job

        for job_id in ids:
            get_job(job_id).cancel()
    else:
        slurm_cli.scancel(ids)
    return ids


# ------------------------------------------------------------------------------------------ results


def participant_of(job_name: str, prefix: str | None) -> tuple[str, str]:
    """``<prefix>-<pseudonym>-<experiment>`` -> (pseudonym, experiment)."""
    name = job_name[len(prefix) + 1:] if prefix and job_name.startswith(prefix + "-") else job_name
    who, _, experiment = name.partition("-")
    return who, experiment


def gather_results(roots: list[Path], prefix: str | None) -> list[dict[str, Any]]:
    """One row per finished run under the job folders ``<root>/<job name>/<job id>/metrics.jsonl``."""
    from coursekit.metrics import read_metrics, summary

    rows = []
    for root in roots:
        for path in sorted(Path(root).glob("*/*/metrics.jsonl")):
            job_name, job_id = path.parent.parent.name, path.parent.name
            if prefix and not job_name.startswith(prefix + "-"):
                continue
            final = summary(read_metrics(path.parent)) or {}
            if not final:
                continue
            config = final.get("config") or {}
            who, experiment = participant_of(job_name, prefix)
            row = {"participant": who, "experiment": experiment, "job_name": job_name, "job_id": job_id,
                   **{k: final.get(k) for k in RESULT_FIELDS if k in final},
                   **{k: config.get(k) for k in ("model", "dataset", "batch_size", "precision")},
                   "run_dir": str(path.parent)}
            rows.append(row)
    return rows


def _cell(value: Any) -> Any:
    """A CSV cell: floats to RESULT_DIGITS significant digits (0.8512, 1234.6), the rest as it is."""
    return float(f"{value:.{RESULT_DIGITS}g}") if isinstance(value, float) else value


def write_results(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({key: _cell(value) for key, value in row.items()} for row in rows)


# ------------------------------------------------------------------------------------------ the CLI


def cmd_setup(args: argparse.Namespace) -> int:
    return setup(args.course_dir, args.site, args.account, args.data_dir, args.leaderboard, args.job_prefix,
                 args.profile, doctor=not args.no_doctor, force=args.force)


def cmd_data(args: argparse.Namespace) -> int:
    if args.dataset == "cifar10":
        return data_cifar10(args.dir)
    if args.dataset == "fashion-mnist":
        return data_fashion_mnist(args.dir, args.source)
    return data_jpeg(args.dir, args.profile, args.workers)


def cmd_jobs(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    print_jobs(course_jobs(prefix, finished=args.all), prefix)
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    prefix = job_prefix(args.prefix)
    ids = cancel_course(prefix)
    print(f"cancelled {len(ids)} job(s) of course prefix {prefix!r}" + (f": {' '.join(ids)}" if ids else ""))
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    prefix = args.prefix or course_setting("job_prefix")
    roots = [Path(p) for p in args.jobs_dir] or [site_jobs_dir()]
    rows = gather_results(roots, prefix)
    out = args.out or course_dir() / DEFAULT_RESULTS
    write_results(rows, out)
    people = sorted({r["participant"] for r in rows})
    print(f"{len(rows)} run(s) of {len(people)} participant(s) ({', '.join(people) or '-'}) -> {out}")
    return EXIT_OK


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
    s.add_argument("--job-prefix", default="ck", help="starts every participant's job name (1-5 letters/digits)")
    s.add_argument("--profile", choices=("cpu", "gpu"), help="force the labs' profile (default: chosen per kernel)")
    s.add_argument("--no-doctor", action="store_true", help="skip the doctor's checks of the site")
    s.add_argument("--force", action="store_true", help="overwrite an existing coursekit.toml")
    s.set_defaults(handler=cmd_setup)

    d = sub.add_parser("data", help="stage a dataset once in a shared folder")
    d.add_argument("dataset", choices=("cifar10", "fashion-mnist", "jpeg"),
                   help="cifar10: download + verify; fashion-mnist: copy + verify Debian's files; jpeg: lab 05's tree")
    d.add_argument("--dir", type=Path, required=True, help="the shared data folder (the course's data_dir)")
    d.add_argument("--profile", choices=("cpu", "gpu"), default="gpu", help="jpeg: whose size (default gpu)")
    d.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2), help="jpeg: writer processes")
    d.add_argument("--source", type=Path, help="fashion-mnist: the folder holding its four files (default Debian's "
                   "/usr/share/datasets/fashion-mnist)")
    d.set_defaults(handler=cmd_data)

    j = sub.add_parser("jobs", help="every participant's jobs of this course (active; --all: finished too)")
    j.add_argument("--all", action="store_true", help="also the finished jobs (sacct, last 7 days)")
    j.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    j.set_defaults(handler=cmd_jobs)

    c = sub.add_parser("cancel", help="cancel every active job of this course (end of the day)")
    c.add_argument("--course", action="store_true", required=True, help="every job of the course (required)")
    c.add_argument("--prefix", help="job prefix (default: job_prefix of the course's coursekit.toml)")
    c.set_defaults(handler=cmd_cancel)

    r = sub.add_parser("results", help="each participant's finished runs in one CSV table")
    r.add_argument("--out", type=Path, help=f"CSV file (default COURSE/{DEFAULT_RESULTS})")
    r.add_argument("--jobs-dir", action="extend", nargs="+", default=[],
                   help="job folders to read, one or more (default the course's): e.g. /home/*/dl-course/jobs")
    r.add_argument("--prefix", help="only jobs with this prefix (default: the course's job_prefix)")
    r.set_defaults(handler=cmd_results)
