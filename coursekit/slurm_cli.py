"""The one module that runs Slurm's commands (squeue, sacct, scancel, sinfo, scontrol) and reads them.

Every call is ``subprocess.run([...], capture_output=True, text=True, timeout=...)``; a failure raises
``SlurmError`` carrying Slurm's own message. Parsers are plain functions of the text so that they can
be tested without a cluster.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence

COMMAND_TIMEOUT_S = 30
BEGIN_AFTER_S = 60  # sbatch --begin=now+60; started at once by start_now when the job's folder exists
ACCOUNTING_CACHE_S = 60.0
VIEWER_CACHE_S = 600.0  # who sacct shows everything to: a site's settings, read again every 10 minutes
FIELD_SEPARATOR = "|"

SQUEUE_FIELDS = {  # squeue -o letters -> our names
    "job_id": "%i", "array_job_id": "%F", "array_task_id": "%K", "name": "%j", "state": "%T",
    "reason": "%r", "elapsed": "%M", "time_limit": "%l", "nodes": "%D", "node_list": "%N",
    "partition": "%P", "user": "%u", "submit_time": "%V", "start_time": "%S",
}
SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Elapsed", "NodeList", "Submit", "Start", "End",
                "Partition")
SINFO_FORMAT = "%P|%G|%c|%D|%a|%l"

# Slurm's job states: the ones after which a job never runs again.
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
    "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "VANISHED",
})
ACTIVE_STATES = frozenset({
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
    "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD",
})
_STATE_ABBREVIATIONS = {"CA": "CANCELLED", "CD": "COMPLETED", "F": "FAILED", "TO": "TIMEOUT",
                        "OOM": "OUT_OF_MEMORY", "NF": "NODE_FAIL", "PD": "PENDING", "R": "RUNNING",
                        "CG": "COMPLETING", "PR": "PREEMPTED", "RQ": "REQUEUED", "BF": "BOOT_FAIL"}


class SlurmError(RuntimeError):
    """A Slurm command failed; ``message`` is what Slurm said."""

    def __init__(self, message: str, command: Sequence[str] = (), returncode: int | None = None) -> None:
        self.message = message.strip()
        self.command = list(command)
        self.returncode = returncode
        where = f"`{' '.join(self.command[:2])}`" if self.command else "Slurm"
        super().__init__(f"{where} failed: {self.message}")


def slurm_available() -> bool:
    """Slurm's client commands are on PATH (says nothing about the controller)."""
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def run(command: Sequence[str], timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run one Slurm command; its stdout, or ``SlurmError`` with its stderr."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as error:
        raise SlurmError(f"{command[0]} is not installed or not on PATH", command) from error
    except subprocess.TimeoutExpired as error:
        raise SlurmError(f"no answer within {timeout:.0f} s (is slurmctld up?)", command) from error
    if done.returncode != 0:
        raise SlurmError(done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}",
                         command, done.returncode)
    return done.stdout


def normalise_state(raw: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``CA`` -> ``CANCELLED``; ``OUT_OF_ME+`` -> ``OUT_OF_MEMORY``."""
    word = (raw or "").strip().split(" ")[0].rstrip("+").upper()
    if not word:
        return "UNKNOWN"
    if word in _STATE_ABBREVIATIONS:
        return _STATE_ABBREVIATIONS[word]
    for full in TERMINAL_STATES | ACTIVE_STATES:
        if full.startswith(word) and len(word) >= 8:
            return full
    return word


def parse_duration(text: str) -> float | None:
    """Slurm's elapsed time (``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``) -> seconds; None when absent."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", (text or "").strip())
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def is_terminal(state: str) -> bool:
    return normalise_state(state) in TERMINAL_STATES


# ---------------------------------------------------------------- squeue


def parse_squeue(text: str) -> list[dict[str, str]]:
    """Rows of ``squeue -h -o <SQUEUE_FIELDS joined by |>``."""
    names = list(SQUEUE_FIELDS)
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split(FIELD_SEPARATOR)
        if len(values) != len(names):
            continue
        row = dict(zip(names, (v.strip() for v in values), strict=True))
        row["state"] = normalise_state(row["state"])
        if row["array_task_id"] not in ("", "N/A") and "[" not in row["array_task_id"]:
            row["job_id"] = f"{row['array_job_id']}_{row['array_task_id']}"
        rows.append(row)
    return rows


def squeue(job_ids: Iterable[str] | None = None, user: str | None = None, name: str | None = None,
           all_states: bool = True) -> list[dict[str, str]]:
    """Jobs known to the controller (with ``all_states``, also those finished less than MinJobAge ago)."""
    command = ["squeue", "-h", "-r", "-o", FIELD_SEPARATOR.join(SQUEUE_FIELDS.values())]
    if all_states:
        command.append("--states=all")
    ids = sorted({str(j).split("_")[0] for j in job_ids}) if job_ids is not None else None
    if ids is not None:
        if not ids:
            return []
        command += ["-j", ",".join(ids)]
    if user:
        command += ["-u", user]
    if name:
        command += ["-n", name]
    try:
        rows = parse_squeue(run(command))
    except SlurmError as error:
        if "Invalid job id" in error.message:  # every id asked for has left the controller
            return []
        raise
    if job_ids is not None:
        asked = {str(j) for j in job_ids}
        wanted = _with_array_ids(asked)
        rows = [r for r in rows if r["job_id"] in wanted or r["array_job_id"] in asked]
    return rows


def _with_array_ids(job_ids: Iterable[str]) -> set[str]:
    """The ids, plus the array id of each array task (Slurm reports never-started tasks under it)."""
    ids = {str(j) for j in job_ids}
    return ids | {j.split("_")[0] for j in ids if "_" in j}


def row_for(rows: Sequence[dict[str, str]], job_id: str) -> dict[str, str] | None:
    """The row of ``job_id``; for an array task not listed on its own (cancelled before it was split
    off the array), the array's own row, which stands for its unstarted tasks."""
    exact = [r for r in rows if r["job_id"] == job_id]
    if exact:
        return exact[-1]
    base = job_id.split("_")[0]
    if base != job_id:
        unsplit = [r for r in rows if r["job_id"] == base]
        return unsplit[-1] if unsplit else None
    return None


# ---------------------------------------------------------------- sacct


def _expand_array_ids(job_id: str) -> list[str]:
    """``12_[0-2,5%4]`` -> ``12_0 12_1 12_2 12_5``; other ids unchanged."""
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    main, ranges = match.groups()
    ids = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        ids += [f"{main}_{i}" for i in range(int(low), int(high or low) + 1)]
    return ids


def parse_sacct(text: str) -> list[dict[str, str]]:
    """Rows of ``sacct -n -P -X -o <SACCT_FIELDS>``; array ranges expanded, state normalised."""
    rows = []
    for line in text.splitlines():
        values = line.split(FIELD_SEPARATOR)
        if len(values) != len(SACCT_FIELDS):
            continue
        raw = dict(zip(SACCT_FIELDS, (v.strip() for v in values), strict=True))
        if "." in raw["JobID"]:
            continue  # a step, not the job
        for job_id in _expand_array_ids(raw["JobID"]):
            rows.append({
                "job_id": job_id, "name": raw["JobName"], "state": normalise_state(raw["State"]),
                "exit_code": raw["ExitCode"], "elapsed": raw["Elapsed"], "node_list": raw["NodeList"],
                "submit_time": raw["Submit"], "start_time": raw["Start"], "end_time": raw["End"],
                "partition": raw["Partition"],
            })
    return rows


def sacct(job_ids: Iterable[str]) -> list[dict[str, str]]:
    """Accounting rows of these jobs (arrays: one row per task); SlurmError when accounting is off."""
    ids = sorted({str(j).split("_")[0] for j in job_ids})
    if not ids:
        return []
    command = ["sacct", "-n", "-P", "-X", "-o", ",".join(SACCT_FIELDS), "-j", ",".join(ids)]
    wanted = _with_array_ids(job_ids)
    return [r for r in parse_sacct(run(command)) if r["job_id"] in wanted or r["job_id"].split("_")[0] in wanted]


# What accounting (slurmctld -> slurmdbd, never the job's user) says of a job: the evidence behind a posted run.
EVIDENCE_FIELDS = ("JobID", "User", "UID", "State", "ElapsedRaw", "Start", "End", "JobName")
JOB_ID_PATTERN = re.compile(r"\d+(?:_\d+)?")  # 123 or 123_4 (an array task): anything else is not Slurm's
EVIDENCE_IDS_PER_CALL = 1000  # ids in one sacct call (a command line of ~10 kB); a board rarely has more


def parse_sacct_evidence(text: str) -> dict[str, dict[str, object]]:
    """``sacct -n -P -X -a -o <EVIDENCE_FIELDS>`` -> job id -> {job_id, user, uid, state, elapsed_s, start, end,
    name}; array ranges expanded, steps skipped, a job listed twice (requeued) keeps its last record."""
    records: dict[str, dict[str, object]] = {}
    for line in text.splitlines():
        values = line.split(FIELD_SEPARATOR)
        if len(values) != len(EVIDENCE_FIELDS):
            continue
        raw = dict(zip(EVIDENCE_FIELDS, (v.strip() for v in values), strict=True))
        if "." in raw["JobID"]:
            continue
        elapsed = raw["ElapsedRaw"]
        for job_id in _expand_array_ids(raw["JobID"]):
            records[job_id] = {"job_id": job_id, "user": raw["User"], "uid": int(raw["UID"]) if raw["UID"].isdigit()
                               else None, "state": normalise_state(raw["State"]),
                               "elapsed_s": float(elapsed) if elapsed.isdigit() else None,
                               "start": raw["Start"], "end": raw["End"], "name": raw["JobName"]}
    return records


def job_evidence(job_ids: Iterable[str]) -> dict[str, dict[str, object]]:
    """Accounting's record of each of ``job_ids`` that Slurm knows, whoever owns it (``-a``): job id -> record
    (``parse_sacct_evidence``). ONE sacct call for all of them (a board's every run: never one per run; a
    thousand ids per call at most); ids that are not Slurm's (``JOB_ID_PATTERN``) are never passed to sacct;
    a job absent from the answer is unknown to accounting. SlurmError when accounting does not answer."""
    wanted = sorted({str(j) for j in job_ids if j is not None and JOB_ID_PATTERN.fullmatch(str(j))})
    bases = sorted({j.split("_")[0] for j in wanted}, key=int)
    records: dict[str, dict[str, object]] = {}
    for start in range(0, len(bases), EVIDENCE_IDS_PER_CALL):
        chunk = bases[start:start + EVIDENCE_IDS_PER_CALL]
        command = ["sacct", "-n", "-P", "-X", "-a", "-o", ",".join(EVIDENCE_FIELDS), "-j", ",".join(chunk)]
        records.update(parse_sacct_evidence(run(command)))
    return {j: records[j] for j in wanted if j in records}


_accounting_cache: dict[str, tuple[float, bool]] = {}


def accounting_enabled(max_age_s: float = ACCOUNTING_CACHE_S) -> bool:
    """sacct answers (accounting storage is configured and slurmdbd is up); cached for ``max_age_s``."""
    cached = _accounting_cache.get("sacct")
    if cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    try:
        run(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now"])
        enabled = True
    except SlurmError:
        enabled = False
    _accounting_cache["sacct"] = (time.monotonic(), enabled)
    return enabled


def parse_dbd_private_data(text: str) -> set[str]:
    """The ``PrivateData`` values of slurmdbd (what sacct hides) in ``sacctmgr show configuration``'s answer:
    the ``PrivateData`` line after ``SlurmDBD configuration:`` (the one before it is slurmctld's, for squeue)."""
    _, dbd, rest = text.partition("SlurmDBD configuration:")
    for line in (rest if dbd else "").splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "PrivateData":
            return {v.strip().lower() for v in value.split(",") if v.strip() and v.strip().lower() != "none"}
    return set()


def sees_every_job(private_data: set[str], admin_level: str, coordinates: str) -> bool:
    """Does sacct show this user every user's jobs? Yes unless slurmdbd's PrivateData has ``jobs``; then only
    to Slurm's operators and administrators, and to coordinators (their accounts' jobs: a course's account)."""
    return ("jobs" not in private_data or admin_level.strip().lower() in ("operator", "administrator")
            or bool(coordinates.strip()))


_viewer_cache: dict[str, tuple[float, str | None]] = {}


def accounting_viewer(max_age_s: float = VIEWER_CACHE_S) -> str | None:
    """The Unix user whose own jobs are all that sacct shows here (a site with ``PrivateData=jobs`` in slurmdbd,
    read by a participant), None when sacct shows every user's jobs (no such setting; root, an operator or
    administrator, an account's coordinator such as the course's instructor; or sacctmgr does not say).
    Two sacctmgr calls, cached for ``max_age_s``."""
    import os
    import pwd

    if os.geteuid() == 0:
        return None
    me = pwd.getpwuid(os.geteuid()).pw_name
    cached = _viewer_cache.get(me)
    if cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    viewer: str | None = None
    try:
        hidden = parse_dbd_private_data(run(["sacctmgr", "-n", "show", "configuration"]))
        if "jobs" in hidden:
            said = run(["sacctmgr", "-n", "-P", "show", "user", me, "withcoord", "format=adminlevel,coordinators"])
            level, _, coordinates = (said.strip().splitlines() or [""])[0].partition(FIELD_SEPARATOR)
            viewer = None if sees_every_job(hidden, level, coordinates) else me
    except SlurmError:
        viewer = None  # sacctmgr does not say: read the answer as before (every job it knows)
    _viewer_cache[me] = (time.monotonic(), viewer)
    return viewer


# ---------------------------------------------------------------- scancel, sinfo, scontrol


def scancel(job_ids: Iterable[str], signal: str | None = None) -> None:
    ids = [str(j) for j in job_ids]
    if not ids:
        return
    run(["scancel", *([f"--signal={signal}"] if signal else []), *ids])


def start_now(job_ids: Iterable[str]) -> None:
    """``scontrol update JobId=... StartTime=now``: pending jobs submitted with a later ``--begin`` may start."""
    ids = [str(j) for j in job_ids]
    if ids:
        run(["scontrol", "update", f"JobId={','.join(ids)}", "StartTime=now"])


def gpus_in_gres(gres: str) -> int:
    """GPUs per node in a GRES string: ``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:v100:2,mps:100`` -> count."""
    total = 0
    for item in re.split(r",(?![^(]*\))", gres or ""):
        fields = re.sub(r"\(.*?\)", "", item).split(":")
        if fields and fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def parse_sinfo(text: str) -> list[dict[str, object]]:
    """Rows of ``sinfo -h -o SINFO_FORMAT``: name, default, gres, gpus_per_node, cpus, nodes, available."""
    rows = []
    for line in text.splitlines():
        values = line.strip().split(FIELD_SEPARATOR)
        if len(values) != 6:
            continue
        partition, gres, cpus, nodes, available, time_limit = values
        rows.append({
            "name": partition.rstrip("*"), "default": partition.endswith("*"), "gres": gres,
            "gpus_per_node": gpus_in_gres(gres), "cpus": int(re.sub(r"\D", "", cpus) or 0),
            "nodes": int(re.sub(r"\D", "", nodes) or 0), "available": available, "time_limit": time_limit,
        })
    return rows


def sinfo_partitions() -> list[dict[str, object]]:
    """Partitions with their GPUs and CPUs per node (one row per node configuration)."""
    return parse_sinfo(run(["sinfo", "-h", "-o", SINFO_FORMAT]))


def controller_reachable() -> bool:
    try:
        return "UP" in run(["scontrol", "ping"])
    except SlurmError:
        return False


def submission_error(error: Exception) -> SlurmError:
    """A SlurmError from submitit's failed ``sbatch`` call (its stderr is Slurm's message)."""
    message = str(error).strip() or repr(error)
    return SlurmError(message, ["sbatch"])
