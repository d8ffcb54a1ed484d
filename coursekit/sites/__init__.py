"""Site profiles: what a cluster looks like (GPUs and CPUs per node, partitions, account, modules).

Each site is a TOML file beside this module (``local``, ``slurm``, ``jean-zay``, ...). ``load_site()``
chooses one: the argument, else ``$COURSEKIT_SITE``, else ``site = "..."`` in the course's
``coursekit.toml``, else ``slurm`` where ``sbatch`` is on PATH and ``local`` elsewhere. A course's
``coursekit.toml`` may also override a site's defaults in a ``[site_defaults]`` table (account, qos,
partition, modules, container, ...). A path to a ``.toml`` file is accepted as a site name.

``site_paths()`` gives the course's job folders under its site's ``log_folder`` (``coursekit.course.CoursePaths``);
``python -m coursekit.sites`` prints their root, for shell scripts (the sbatch templates).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from coursekit import slurm_cli
from coursekit.course import CoursePaths, choose, course_config, course_config_path, course_paths

SITE_ENV = "COURSEKIT_SITE"
SITES_DIR = Path(__file__).resolve().parent
SCHEDULERS = ("local", "slurm")
LAUNCHERS = ("srun", "torchrun")  # how a job starts its processes (coursekit.jobs.plan)
DETECT = 0  # gpus_per_node / cpus_per_gpu = 0 in a profile: learn it from the machine or from sinfo
NVIDIA_SMI_TIMEOUT_S = 10
OVERRIDABLE = ("partition", "constraint", "qos", "account", "modules", "container", "hint_nomultithread",
               "log_folder", "gpus_per_node", "cpus_per_gpu", "max_cpu_processes")


@dataclass(frozen=True)
class Partition:
    """One partition (or constraint-selected node type) of a site."""

    name: str
    gpus_per_node: int
    cpus_per_gpu: int
    description: str = ""
    constraint: str | None = None
    select_by_constraint: bool = False  # send only -C <constraint>, not --partition (Jean Zay A100/H100)
    gpu_type: str | None = None  # GRES type, e.g. "a100" -> --gpus-per-task=a100:1
    account_suffix: str | None = None  # Jean Zay: "abc" -> "abc@v100"
    qos: tuple[str, ...] = ()  # the QoS names this partition accepts (empty: not checked)
    arch_module: str | None = None  # loaded before the job's modules (Jean Zay: cpuarch/amd, arch/h100)


@dataclass(frozen=True)
class NodeShape:
    """What one node offers to a job, once detection is done."""

    gpus_per_node: int  # GPUs, or CPU processes when cpu_only
    cpus_per_gpu: int
    cpu_only: bool = False  # local machine without GPU: n_gpu counts processes
    partition: Partition | None = None
    max_nodes: int | None = None  # nodes a job may span (from sinfo on the generic site; None: not known)


@dataclass(frozen=True)
class Site:
    """A cluster profile (see the TOML files beside this module)."""

    name: str
    description: str = ""
    scheduler: str = "slurm"
    gpus_per_node: int = DETECT
    cpus_per_gpu: int = DETECT
    partition: str | None = None
    partitions: dict[str, Partition] = field(default_factory=dict)
    constraint: str | None = None
    qos: str | None = None
    account: str | None = None
    account_required: bool = False
    modules: tuple[str, ...] = ()
    container: str | None = None
    hint_nomultithread: bool = False
    source: str = ""
    values_from: str = ""
    notes: tuple[str, ...] = ()
    log_folder: str = "jobs"
    max_cpu_processes: int = 8
    launchers: tuple[str, ...] = LAUNCHERS  # the launchers this site's jobs can use

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"site {self.name!r}: scheduler={self.scheduler!r}, allowed: {SCHEDULERS}")
        unknown = sorted(set(self.launchers) - set(LAUNCHERS))
        if unknown:
            raise ValueError(f"site {self.name!r}: launchers {unknown} unknown, allowed: {list(LAUNCHERS)}")

    @property
    def is_local(self) -> bool:
        return self.scheduler == "local"

    def partition_info(self, partition: str | None = None) -> Partition | None:
        """The profile's record of ``partition`` (default: the site's); ValueError when it is unknown."""
        chosen = partition or self.partition
        if chosen is None or not self.partitions:
            return None
        if chosen not in self.partitions:
            raise ValueError(
                f"partition={chosen!r} is not a partition of site {self.name!r}: "
                f"use one of {sorted(self.partitions)}")
        return self.partitions[chosen]

    def select_partition(self, partition: str | None = None, constraint: str | None = None,
                         account: str | None = None) -> str | None:
        """The partition a job goes to, as idr_pytools and the centre choose it: ``partition`` when given,
        else the one selected by ``constraint`` (Jean Zay: ``a100`` -> gpu_p5), else the one whose account
        suffix ``account`` carries (``abc@h100`` -> gpu_p6), else the site's default. ValueError when the
        partition, the constraint and the account's suffix disagree."""
        chosen = account or self.account
        suffix = "@" + chosen.split("@", 1)[1] if chosen and "@" in chosen else None
        if not self.partitions:
            return partition or self.partition
        by_constraint = [p for p in self.partitions.values() if p.select_by_constraint and p.constraint == constraint]
        by_suffix = [p for p in self.partitions.values() if suffix and p.account_suffix == suffix]
        if partition is not None:
            info = self.partition_info(partition)
        elif by_constraint:
            info = by_constraint[0]
        elif by_suffix:
            default = self.partitions[self.partition] if self.partition in self.partitions else None
            info = default if default in by_suffix else by_suffix[0]
        else:
            info = self.partition_info()
        assert info is not None
        if by_constraint and info is not by_constraint[0]:
            raise ValueError(f"constraint={constraint!r} selects partition {by_constraint[0].name!r} on site "
                             f"{self.name!r}, not {info.name!r}: give one of them, not both")
        known_suffixes = {p.account_suffix for p in self.partitions.values() if p.account_suffix}
        if suffix in known_suffixes and info.account_suffix and suffix != info.account_suffix:
            raise ValueError(f"account={chosen!r}: partition {info.name!r} of site {self.name!r} is charged to "
                             f"'...{info.account_suffix}' hours; use the account with that suffix, or the "
                             f"partition of your hours ({[p.name for p in by_suffix]})")
        return info.name

    def node_shape(self, partition: str | None = None) -> NodeShape:
        """GPUs and CPUs per node for a job in ``partition``: from the profile, else detected."""
        info = self.partition_info(partition)
        if info is not None:
            return NodeShape(info.gpus_per_node, info.cpus_per_gpu, partition=info)
        if self.is_local:
            gpus = self.gpus_per_node or visible_gpu_count()
            if gpus == 0:
                return NodeShape(self.max_cpu_processes, 1, cpu_only=True)
            return NodeShape(gpus, self.cpus_per_gpu or 1)
        gpus, cpus_per_gpu, max_nodes = self.gpus_per_node, self.cpus_per_gpu, None
        if gpus == DETECT or cpus_per_gpu == DETECT:
            found_gpus, found_cpus, max_nodes = _sinfo_shape(partition or self.partition)
            gpus = gpus or found_gpus
            cpus_per_gpu = cpus_per_gpu or max(1, found_cpus // max(1, gpus))
        if gpus == DETECT:
            where = f"partition {partition or self.partition}" if (partition or self.partition) else "any partition"
            raise ValueError(f"site {self.name!r}: sinfo shows no GPU (GRES gpu) on {where}; "
                             "set gpus_per_node under [site_defaults] in coursekit.toml or choose a GPU partition")
        return NodeShape(gpus, cpus_per_gpu, max_nodes=max_nodes)

    def paths(self) -> CoursePaths:
        """The course's job folders under this site's ``log_folder``."""
        return course_paths(self.log_folder)

    def jobs_root(self) -> Path:
        """The folder holding this site's ``<name>/<job_id>/`` job folders."""
        return self.paths().jobs_root

    def full_account(self, account: str | None, partition: str | None = None) -> str | None:
        """The account to send: the argument or the site's, with the partition's suffix when missing."""
        chosen = account or self.account
        info = self.partition_info(partition)
        if chosen and info is not None and info.account_suffix and "@" not in chosen:
            chosen += info.account_suffix
        return chosen


def visible_gpu_count() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES, else torch (when imported), else nvidia-smi -L."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v for v in visible.split(",") if v.strip()]
        return 0 if not entries or entries[0].strip() == "-1" else len(entries)
    torch = sys.modules.get("torch")
    if torch is not None:
        return int(torch.cuda.device_count())
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.stdout.splitlines()) if listing.returncode == 0 else 0


def _sinfo_shape(partition: str | None) -> tuple[int, int, int | None]:
    """(GPUs per node, CPUs per node, nodes with that many GPUs or None) of a partition (default partition
    when None), from sinfo."""
    rows = slurm_cli.sinfo_partitions()
    if partition is not None:
        names = [r["name"] for r in rows]
        rows = [r for r in rows if r["name"] == partition]
        if not rows:
            raise ValueError(f"partition={partition!r} is not on this cluster (sinfo lists {sorted(set(names))})")
    else:
        rows = [r for r in rows if r["default"]] or rows
    if not rows:
        return DETECT, DETECT, None
    best = max(rows, key=lambda r: r["gpus_per_node"])
    nodes = sum(int(r.get("nodes") or 0) for r in rows if r["gpus_per_node"] >= best["gpus_per_node"])
    return int(best["gpus_per_node"]), int(best["cpus"]), nodes or None


# ---------------------------------------------------------------- loading


def site_names() -> list[str]:
    """Names of the profiles shipped with coursekit."""
    return sorted(p.stem for p in SITES_DIR.glob("*.toml"))


def _read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def _site_from_mapping(data: dict[str, Any], origin: str) -> Site:
    data = dict(data)
    partitions = {}
    for part_name, part in (data.pop("partitions", None) or {}).items():
        part = dict(part)
        part["qos"] = tuple(part.get("qos", ()))
        partitions[part_name] = Partition(name=part_name, **part)
    for key in ("modules", "notes", "launchers"):
        if key in data or key != "launchers":
            data[key] = tuple(data.get(key, ()))
    for key in ("partition", "constraint", "qos", "account", "container"):
        data[key] = data.get(key) or None
    known = {f.name for f in dataclasses.fields(Site)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{origin}: unknown site field(s) {unknown}; known fields: {sorted(known)}")
    site = Site(partitions=partitions, **data)
    if site.partition is None and partitions:
        site = dataclasses.replace(site, partition=next(iter(partitions)))
    if site.partitions and site.partition not in site.partitions:
        raise ValueError(f"{origin}: default partition {site.partition!r} is not among {sorted(partitions)}")
    return site


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _default_site_name() -> str:
    return "slurm" if shutil.which("sbatch") else "local"


def load_site(name: str | None = None) -> Site:
    """The site profile to use: ``name`` > ``$COURSEKIT_SITE`` > course's ``site`` > slurm/local."""
    config = course_config()
    chosen = choose(name, SITE_ENV, "site", _default_site_name).value
    if not isinstance(chosen, str) or not chosen.strip():
        raise ValueError(f"site={chosen!r}: give a site name, one of {site_names()}")
    chosen = chosen.strip()
    if chosen.endswith(".toml"):
        path = Path(chosen).expanduser()
        if not path.is_file():
            raise ValueError(f"site={chosen!r}: no such profile file")
    else:
        path = SITES_DIR / f"{_normalise(chosen)}.toml"
        if not path.is_file():
            raise ValueError(f"site={chosen!r} is unknown: use one of {site_names()} or a path to a .toml profile")
    site = _site_from_mapping(_read_toml(path), str(path))
    overrides = config.get("site_defaults") or {}
    configured = config.get("site")
    if configured and _normalise(Path(str(configured)).stem) != _normalise(site.name):
        overrides = {}  # defaults written for another site do not apply
    bad = sorted(set(overrides) - set(OVERRIDABLE))
    if bad:
        raise ValueError(f"[site_defaults] in {course_config_path()}: cannot set {bad}; allowed: {list(OVERRIDABLE)}")
    if overrides:
        values = {k: (tuple(v) if k == "modules" else v) for k, v in overrides.items()}
        site = dataclasses.replace(site, **values)
        site.partition_info()  # an overridden default partition must exist
    return site


def site_paths(name: str | None = None) -> CoursePaths:
    """The course's job folders under the site's ``log_folder`` (``load_site(name)``); under the course's
    ``jobs/`` when no site loads."""
    try:
        return load_site(name).paths()
    except (ValueError, OSError):
        return course_paths()


def site_jobs_dir(name: str | None = None) -> Path:
    """Where the site's job folders live (``site_paths(name).jobs_root``)."""
    return site_paths(name).jobs_root


__all__ = ["Site", "Partition", "NodeShape", "load_site", "site_jobs_dir", "site_names", "site_paths",
           "visible_gpu_count", "SITE_ENV"]
