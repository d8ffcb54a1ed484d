"""``coursekit doctor``: is this machine ready to run the labs? One check per line, what to fix when not.

Checks: Python, torch, CUDA and GPUs, submitit, the course folder, what each data set the labs ask for
will be (``labs.kit.datasets.resolve``, the labs' own choice: the course's data folder, Debian's system copy
of Fashion-MNIST, or the generated stand-in), lab 09's leaderboard folder (writable); the site profile; for a
Slurm site also Slurm's commands on PATH, the controller, accounting (sacct), and the partition (per sinfo).
A check is ``ok``, ``warn`` (worth knowing, does not fail: e.g. no GPU on a login node) or ``fail``; the
verdict counts the warnings too.
"""

from __future__ import annotations

import importlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from coursekit import slurm_cli
from coursekit.course import (
    course_dir,
    data_dir,
    jobs_dir,
    user_name,
)
from coursekit.sites import load_site, site_names

MIN_PYTHON = (3, 10)
SLURM_COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scancel", "sinfo", "scontrol")
SYMBOLS = {"ok": "✓", "warn": "!", "fail": "✗"}
ASCII_SYMBOLS = {"ok": "OK", "warn": "!!", "fail": "XX"}


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    status: str  # "ok" | "warn" | "fail"
    title: str
    detail: str = ""
    fix: str = ""


def check_python() -> Check:
    version = ".".join(str(v) for v in sys.version_info[:3])
    if sys.version_info[:2] >= MIN_PYTHON:
        return Check("ok", f"Python {version}", sys.executable)
    return Check("fail", f"Python {version}", "coursekit needs Python >= 3.10",
                 "use a newer Python (conda env from environment.yml)")


def check_module(name: str, fix: str) -> Check:
    try:
        module = importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - any import failure is the finding
        return Check("fail", f"{name} importable", f"{type(error).__name__}: {error}", fix)
    return Check("ok", f"{name} {getattr(module, '__version__', '')}".strip(), os.path.dirname(module.__file__ or ""))


def check_gpus() -> Check:
    try:
        import torch
    except Exception:  # noqa: BLE001 - reported by check_module
        return Check("warn", "CUDA and GPUs", "torch is missing, GPUs not checked")
    if not torch.cuda.is_available():
        return Check("warn", "CUDA and GPUs: none on this machine",
                     "jobs run on the CPU here; on a cluster the GPUs are on the compute nodes")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check("ok", f"CUDA {torch.version.cuda}: {len(names)} GPU(s)", ", ".join(names))


def check_course_folder() -> Check:
    folder = course_dir()
    try:
        jobs_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=jobs_dir()):
            pass
    except OSError as error:
        return Check("fail", f"course folder {folder}", f"jobs/ is not writable: {error}",
                     "run from a folder you own, or set COURSEKIT_COURSE_DIR")
    return Check("ok", f"course folder {folder}", f"jobs in {jobs_dir()}")


def check_data() -> list[Check]:
    """One line per data set the labs ask for: what a participant's lab trains on, decided by the labs' own
    ``resolve``; a warning only for the generated stand-in or a copy someone staged that the labs pass over."""
    try:
        from coursekit.labs.kit import datasets
    except Exception as error:  # noqa: BLE001 - e.g. torch missing: reported by check_module
        return [Check("warn", "data sets not checked", f"{type(error).__name__}: {error}")]
    checks = []
    for wanted, label in datasets.WANTED.items():
        try:
            source = datasets.resolve(wanted)
        except Exception as error:  # noqa: BLE001 - torch missing: reported by check_module
            checks.append(Check("warn", f"{label}: not checked", f"{type(error).__name__}: {error}"))
            continue
        title, folder = f"{label} -> {source.describe()}", source.data_dir
        if source.passed_over:
            what = "; ".join(problem for problem, _ in source.passed_over)
            checks.append(Check("warn", title, f"{what}: the labs pass over it",
                                "; ".join(fix for _, fix in source.passed_over)))
        elif not source.real:
            checks.append(Check("warn", title, f"no real data in the course's data folder {folder} nor in "
                                "Debian's system copy: the labs train on generated images, a smoke test of the "
                                "code, not evidence about accuracy",
                                f"coursekit instructor data fashion-mnist --dir {folder} (offline; needs Debian's "
                                f"package dataset-fashion-mnist), or data cifar10 --dir {folder}"))
        else:
            notes = []
            if wanted == datasets.CIFAR10 and source.dataset != datasets.CIFAR10:
                notes.append(f"CIFAR-10 is not staged in {folder}: the accuracies are Fashion-MNIST's")
            if source.origin == datasets.SYSTEM_COPY:
                notes.append(f"no copy in the course's data folder {folder}: the nodes that run the jobs read "
                             f"their own system copy (to share one: coursekit instructor data fashion-mnist --dir "
                             f"{folder})")
            checks.append(Check("ok", title, "; ".join(notes)))
    folder = Path(data_dir()).expanduser()
    jpeg = sorted(path.parent.name for path in folder.glob("jpeg-*/.complete"))
    checks.append(Check("ok", "lab 05's JPEG tree (generated, by design)", f"in {folder}: {', '.join(jpeg)}" if jpeg
                        else f"written into {folder} on first use (or now: coursekit instructor data jpeg --dir "
                        f"{folder})"))
    return checks


def check_leaderboard() -> Check:
    """Lab 09 appends to this user's own file of the leaderboard's folder (``<folder>/<user>.jsonl``): the user
    must be able to create it there (or own it already), and in a shared folder nobody else may remove it."""
    try:  # lab 09's module imports torch: where torch is broken, check_module has said so already
        from coursekit.labs.lab09_race.leaderboard import leaderboard_path, own_runs_path
    except ImportError as error:
        return Check("warn", "lab 09's leaderboard", f"not checked: {error}", "install torch (see the torch line)")
    board = leaderboard_path()
    folder, mine = board.parent, own_runs_path(board)
    what = f"lab 09's leaderboard {board}"
    fix = f"make {folder} writable by every participant, sticky: chmod 1777 {folder}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if mine.is_symlink() or mine.exists():
            info = mine.lstat()
            if info.st_uid != os.geteuid() or not stat.S_ISREG(info.st_mode):
                spare = f"{user_name(os.geteuid())}.{os.geteuid()}.<token>.jsonl"
                return Check("warn", what, f"your runs file's name {mine} was taken by {user_name(info.st_uid)} (or "
                             f"is a link): the board ignores that file, and your runs go to your own {spare} instead",
                             f"nothing to do for you; the instructor may end the round to remove {mine} "
                             "(coursekit instructor race clear)")
            if not os.access(mine, os.W_OK):
                return Check("fail", what, f"your runs file {mine} is not writable by you", f"chmod u+w {mine}")
        else:
            with tempfile.NamedTemporaryFile(dir=folder):
                pass
    except OSError as error:
        return Check("fail", what, f"its folder is not writable: {error}", fix)
    mode = folder.stat().st_mode
    shared = mode & 0o002 or mode & 0o020
    if shared and not mode & stat.S_ISVTX:
        return Check("warn", what, f"writable by you, but {folder} is not sticky: any participant can delete or "
                     "replace another's runs file", fix)
    return Check("ok" if shared else "warn", what,
                 f"you post to {mine.name}" + ("" if shared else "; others cannot write its folder: fine for one "
                                                "participant, not for a room (chmod 1777 it)"))


def check_site(site_name: str | None) -> tuple[Check, Any]:
    try:
        site = load_site(site_name)
    except ValueError as error:
        return Check("fail", "site profile", str(error), f"choose one of {site_names()} (COURSEKIT_SITE or "
                     "site = \"...\" in coursekit.toml)"), None
    if site.account_required and not site.account and not site.is_local:
        return Check("warn", f"site {site.name} ({site.scheduler}): needs a project account",
                     "jobs without account= will be refused before submission",
                     "set account under [site_defaults] in coursekit.toml"), site
    return Check("ok", f"site {site.name} ({site.scheduler})", site.description), site


def check_slurm_commands() -> Check:
    missing = [command for command in SLURM_COMMANDS if shutil.which(command) is None]
    if missing:
        return Check("fail", "Slurm commands on PATH", f"missing: {', '.join(missing)}",
                     "load your site's Slurm module, or use the local site (COURSEKIT_SITE=local); "
                     "for a local test cluster: bash slurm/cluster.sh install && bash slurm/cluster.sh start")
    return Check("ok", "Slurm commands on PATH", ", ".join(SLURM_COMMANDS))


def check_controller() -> Check:
    try:
        answer = slurm_cli.run(["scontrol", "ping"]).strip()
    except slurm_cli.SlurmError as error:
        return Check("fail", "Slurm controller answers", error.message,
                     "slurmctld is down: ask your admins, or bash slurm/cluster.sh start on a test machine")
    if "UP" not in answer:
        return Check("fail", "Slurm controller answers", answer, "slurmctld is down (scontrol ping)")
    return Check("ok", "Slurm controller answers", answer.splitlines()[0] if answer else "")


def check_accounting() -> Check:
    if slurm_cli.accounting_enabled(max_age_s=0):
        return Check("ok", "Slurm accounting on (sacct answers)")
    return Check("fail", "Slurm accounting on (sacct answers)", "sacct fails: finished jobs' states are unknown",
                 "enable accounting (slurmdbd); the local test cluster has it: bash slurm/cluster.sh start")


def check_partition(site: Any) -> Check:
    try:
        partitions = slurm_cli.sinfo_partitions()
    except slurm_cli.SlurmError as error:
        return Check("fail", "partition (sinfo)", error.message, "sinfo must answer")
    wanted = site.partition
    if site.partitions and wanted is not None:
        info = site.partition_info(wanted)
        if info is not None and info.select_by_constraint:
            return Check("ok", f"partition: chosen by constraint {info.constraint}", info.description)
    rows = [row for row in partitions if row["name"] == wanted] if wanted else \
        [row for row in partitions if row["default"]]
    available = sorted({str(row["name"]) for row in partitions})
    if not rows:
        what = f"partition {wanted!r}" if wanted else "a default partition"
        return Check("fail", f"{what} exists", f"sinfo lists {available}",
                     "set partition under [site_defaults] in coursekit.toml to one of those")
    row = max(rows, key=lambda r: r["gpus_per_node"])
    gpus = row["gpus_per_node"]
    title = f"partition {row['name']}: {gpus} GPU(s), {row['cpus']} CPUs per node, {row['available']}"
    if row["available"] != "up":
        return Check("fail", title, "the partition is not up", "ask your admins")
    if not gpus:
        return Check("warn", title, "no GRES gpu on this partition: GPU jobs will be refused")
    return Check("ok", title)


def run_checks(site_name: str | None = None) -> list[Check]:
    """Every check, in order; Slurm's checks only for a Slurm site."""
    checks = [check_python(), check_module("torch", "pip install torch"), check_gpus(),
              check_module("submitit", "pip install submitit"), check_course_folder(), *check_data(),
              check_leaderboard()]
    site_check, site = check_site(site_name)
    checks.append(site_check)
    if site is None or site.is_local:
        if site is not None:
            checks.append(Check("ok", "Slurm not needed", "site local: jobs run on this machine"))
        return checks
    slurm_steps: list[Callable[[], Check]] = [check_slurm_commands, check_controller, check_accounting,
                                              lambda: check_partition(site)]
    for step in slurm_steps:
        check = step()
        checks.append(check)
        if check.status == "fail" and step in (check_slurm_commands, check_controller):
            break  # the next checks cannot answer
    return checks


def _symbols(stream: IO[str]) -> dict[str, str]:
    try:
        "".join(SYMBOLS.values()).encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return ASCII_SYMBOLS
    return SYMBOLS


def report(checks: list[Check], out: IO[str] | None = None) -> bool:
    """Print the check list and a verdict; True when nothing failed."""
    stream = out or sys.stdout
    symbols = _symbols(stream)
    for check in checks:
        print(f"{symbols[check.status]} {check.title}" + (f"  ({check.detail})" if check.detail else ""), file=stream)
        if check.fix and check.status != "ok":
            print(f"    fix: {check.fix}", file=stream)
    failed = [check for check in checks if check.status == "fail"]
    warned = [check for check in checks if check.status == "warn"]
    verdict = "all is well" if not failed else f"{len(failed)} problem(s): " + "; ".join(c.title for c in failed)
    if warned:
        verdict += f" ({len(warned)} warning(s): " + "; ".join(c.title for c in warned) + ")"
    print(verdict, file=stream, flush=True)
    return not failed


def doctor(site: str | None = None, out: IO[str] | None = None) -> bool:
    """Run the checks and print them (``site``: a profile name, default the course's); True when all is well."""
    return report(run_checks(site), out)
