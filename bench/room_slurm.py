"""A room rehearsed on the workshop hub (slurm/hub.sh): N participants spawn at once through the hub's REST
API, each runs notebook 00 headless inside their server, and the room is measured.

    python bench/room_slurm.py --participants 8 [--out bench/results/room_slurm.json]

Needs root, the local Slurm (slurm/cluster.sh start) and the hub (slurm/hub.sh install && start). Participants
are the Unix users room1..roomN (``slurm/hub.sh add-user``). Each server is asked for 0 GPUs / 30 min; in each,
``jupyter nbconvert --execute`` runs notebook 00 as that user, in its node's namespaces, with the server's
environment (``tests/hub/hub_helpers.in_server``).

Measured: spawn time (POST to ready; median, max), time from a notebook's start to its first COMPLETED job
(sacct), Slurm RPCs per second at the controller per participant (sdiag's per-user counts, before/after; the
kit's watcher promises <= 0.2 per participant process) and the whole room's, and nothing lost: every job in a
participant's registry is in sacct with a final state and has its folder and logs, every job of theirs in
sacct is in their registry, every notebook ran without error. Prints a JSON summary (and writes it with --out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "hub"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from hub_helpers import (  # noqa: E402
    HUB_SCRIPT,
    PARTICIPANT_PYTHON,
    api,
    as_user,
    course_of,
    in_server,
    run,
    server_of,
    stop_server,
    write_as,
)
from robust import check_writable, missing, save_text  # noqa: E402

from coursekit import slurm_cli  # noqa: E402

NOTEBOOK = "00_cluster.ipynb"
JOB_PREFIX = "ws-"
SPAWN_TIMEOUT_S = 600
NOTEBOOK_TIMEOUT_S = 1800
POLL_S = 1.0
FINAL_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"}
MIN_PARTICIPANTS, MAX_PARTICIPANTS = 1, 32


def spread(values: list[float]) -> dict[str, float]:
    """Median, 95th percentile (nearest rank) and maximum of ``values``."""
    ordered = sorted(values)
    p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]
    return {"median": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def participants(count: int) -> list[str]:
    return [f"room{i}" for i in range(1, count + 1)]


def sdiag_by_user() -> dict[str, int]:
    """sdiag's "Remote Procedure Call statistics by user": total RPC count per user name."""
    text = run(["sdiag"]).stdout
    counts, inside = {}, False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by user"):
            inside = True
            continue
        if inside:
            if not line.strip() or line.startswith("Pending RPC") or line.startswith("Remote Procedure"):
                break
            name, _, rest = line.strip().partition("(")
            counts[name.strip()] = int(rest.split("count:")[1].split()[0])
    return counts


def spawn(user: str) -> float:
    """Start the user's server (0 GPUs, 30 min) and wait until the hub calls it ready: seconds taken."""
    start = time.monotonic()
    status, body = api("POST", f"/users/{user}/server", {"gpus": 0, "time_min": 30})
    assert status in (201, 202), f"spawn {user}: {status} {body}"
    while not (server_of(user) or {}).get("ready"):
        assert time.monotonic() - start < SPAWN_TIMEOUT_S, f"{user}'s server not ready in {SPAWN_TIMEOUT_S} s"
        time.sleep(POLL_S)
    return time.monotonic() - start


def run_notebook(user: str) -> dict[str, Any]:
    """Notebook 00 executed headless inside the user's server: start (epoch), seconds, errors."""
    course = course_of(user)
    write_as(user, course / NOTEBOOK, (REPO / "notebooks" / NOTEBOOK).read_bytes())
    started = time.time()
    done = in_server(user, [str(PARTICIPANT_PYTHON), "-m", "nbconvert", "--to", "notebook", "--execute",
                            f"--ExecutePreprocessor.timeout={NOTEBOOK_TIMEOUT_S}", "--output", f"{NOTEBOOK}.out",
                            str(course / NOTEBOOK)], check=False, timeout_s=NOTEBOOK_TIMEOUT_S)
    errors = []
    if done.returncode != 0:
        errors.append(done.stderr[-1500:])
    else:
        executed = json.loads(as_user(user, ["cat", str(course / f"{NOTEBOOK}.out.ipynb")]).stdout)
        for cell in executed["cells"]:
            for output in cell.get("outputs", []):
                if output["output_type"] == "error" or output.get("name") == "stderr":
                    errors.append(str(output.get("ename") or output.get("text"))[:300])
    return {"started": started, "seconds": time.time() - started, "errors": errors}


SLURM_COMMANDS = ("sinfo", "squeue", "sacct", "sdiag")


def sacct_jobs(user: str, since: float) -> list[dict[str, str]]:
    start = datetime.datetime.fromtimestamp(since).strftime("%Y-%m-%dT%H:%M:%S")
    text = run(["sacct", "-n", "-P", "-X", "-u", user, "-S", start, "-o", "JobID,JobName,State,End"]).stdout
    rows = [dict(zip(("job_id", "name", "state", "end"), line.split("|"), strict=True)) for line in text.splitlines()]
    return [r for r in rows if r["name"].startswith(JOB_PREFIX)]


def audit(user: str, since: float, accounting: bool = True) -> dict[str, Any]:
    """The user's jobs since ``since``: registry vs sacct (without accounting: the registry alone), final states,
    folders and logs present."""
    registry = course_of(user) / "jobs" / "registry.jsonl"
    lines = as_user(user, ["cat", str(registry)]).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    submitted = {r["job_id"]: r for r in records if r.get("event") == "submitted" and r["submitted_at"] >= since}
    accounted = {r["job_id"]: r for r in sacct_jobs(user, since)} if accounting else {}
    base = {job_id.split("_")[0] for job_id in submitted}
    lost = sorted(job_id for job_id in accounted if job_id.split("_")[0] not in base)
    missing_in_slurm = sorted(b for b in base if not any(j.split("_")[0] == b for j in accounted)) if accounting else []
    not_final = sorted(j for j, r in accounted.items() if r["state"].split()[0] not in FINAL_STATES)
    no_folder = []
    for job_id, record in submitted.items():
        if as_user(user, ["sh", "-c", 'ls "$1"/*_log.out', "sh", record["folder"]], check=False).returncode != 0:
            no_folder.append(job_id)
    ends = sorted(r["end"] for r in accounted.values() if r["state"] == "COMPLETED" and r["end"] not in ("", "Unknown"))
    first_end = datetime.datetime.fromisoformat(ends[0]).timestamp() if ends else None
    return {"registry_jobs": len(submitted), "sacct_jobs": len(accounted), "not_in_registry": lost,
            "not_in_sacct": missing_in_slurm, "not_final": not_final, "without_folder_or_log": no_folder,
            "first_completed_end": first_end}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, default=8, help="simulated participants (room1..roomN)")
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    args = parser.parse_args(argv)
    if not MIN_PARTICIPANTS <= args.participants <= MAX_PARTICIPANTS:
        parser.error(f"--participants: {args.participants} is not in {MIN_PARTICIPANTS}..{MAX_PARTICIPANTS}")
    if os.geteuid() != 0:
        parser.error("run as root (it creates the users and runs commands as them)")
    absent = [command for command in SLURM_COMMANDS if shutil.which(command) is None]
    if absent:
        raise SystemExit(f"bench/room_slurm.py: Slurm's {', '.join(absent)} not on PATH: nothing to measure; start the "
                         "local Slurm (bash slurm/cluster.sh install && bash slurm/cluster.sh start) and the hub "
                         "(bash slurm/hub.sh install && bash slurm/hub.sh start)")
    if args.out:
        check_writable(args.out)
    accounting = slurm_cli.accounting_enabled()
    if not accounting:
        missing("Slurm accounting (sacct)", "the audit compares the registries with nothing: jobs lost in Slurm and the "
                "time to the first completed job are not measured", "start slurmdbd (bash slurm/cluster.sh start)")
    users = participants(args.participants)
    run(["bash", str(HUB_SCRIPT), "status"])
    run(["bash", str(HUB_SCRIPT), "add-user", *users])
    for user in users:
        api("POST", f"/users/{user}")  # 201, or 409 when the hub knows the user already
        stop_server(user)

    rpc_before, t0 = sdiag_by_user(), time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(users)) as pool:
        spawn_s = dict(zip(users, pool.map(spawn, users), strict=True))
        notebooks = dict(zip(users, pool.map(run_notebook, users), strict=True))
    t1, rpc_after = time.time(), sdiag_by_user()
    audits = {}
    for user in users:
        try:
            audits[user] = audit(user, t0, accounting)
        except (AssertionError, OSError, ValueError, subprocess.SubprocessError) as error:  # the room is measured
            audits[user] = {"registry_jobs": 0, "sacct_jobs": 0, "first_completed_end": None,
                            "audit_failed": [str(error).splitlines()[0][:300]]}
    for user in users:
        stop_server(user)

    rpc = {user: (rpc_after.get(user, 0) - rpc_before.get(user, 0)) / (t1 - t0) for user in users}
    to_first = [audits[u]["first_completed_end"] - notebooks[u]["started"] for u in users
                if audits[u]["first_completed_end"] is not None]
    problems = {u: {k: v for k, v in {**audits[u], "errors": notebooks[u]["errors"]}.items()
                    if isinstance(v, list) and v} for u in users}
    summary = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs), Slurm {run(['sinfo', '--version']).stdout.strip()}",
        "command": f"python bench/room_slurm.py --participants {args.participants}",
        "participants": args.participants,
        "spawn_s": spread(list(spawn_s.values())),
        "notebook_s": spread([n["seconds"] for n in notebooks.values()]),
        "first_completed_job_s": spread(to_first) if to_first else None,
        "rpc_per_s_per_participant": spread(list(rpc.values())),
        "rpc_per_s_room": (sum(rpc_after.values()) - sum(rpc_before.values())) / (t1 - t0),
        "window_s": t1 - t0,
        "accounting": accounting,
        "jobs": {"registry": sum(a["registry_jobs"] for a in audits.values()),
                 "sacct": sum(a["sacct_jobs"] for a in audits.values())},
        "problems": {u: p for u, p in problems.items() if p},
    }
    text = json.dumps(summary, indent=2)
    written = save_text(args.out, text + "\n") if args.out else None  # first: the print cannot lose it
    print(text)
    ok = not summary["problems"] and (summary["first_completed_job_s"] or not accounting)
    return 0 if ok and written == args.out else 1


if __name__ == "__main__":
    sys.exit(main())
