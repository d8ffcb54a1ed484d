"""The end of a race: the instructor re-runs the top entries (`coursekit instructor race verify`).

A participant writes their own runs file; Slurm's accounting (``verify.check_evidence``) proves a job ran, but
not that its time was not cut within the job's elapsed time. So the race ends as timed competitions do: the
instructor re-runs each top entry's exact configuration and seeds, on the room's hardware, as their own jobs,
and the board ranks the re-runs' times (``verify.reproduction`` judges them).

- ``rebuild(runs, rules)``: the configurations of an entry's seeds, from what its runs recorded: the engine's
  own ``config`` (every option of the run, ``TrainConfig.to_dict()``), checked against the run's ``config_hash``
  and ``seed`` and against the race's rules; an entry whose records do not say enough is refused, in a sentence;
- ``submit(...)``: the re-runs as the instructor's jobs through the kit's job API (``labs.submit_sweep``, one job
  per seed with the entry's GPU count on a Slurm site; on the local site, and for entries that ran on the CPU (lab
  09's cpu profile), every re-run in ONE job, one after the other, as the notebook runs its seeds, so that no two
  share the CPU and slow each other down), named ``<job prefix>-verify-<participant>``;
  one ``submitted`` line per seed goes into the instructor's own runs file at once (``leaderboard.RERUN``);
- ``collect(...)``: the runs of ended re-run jobs, appended as re-run lines (the run's summary fields, as an
  entry's own lines hold them), optionally after waiting for them.

Cost: every re-run costs about its entry's own time: top N entries of k seeds cost N x k runs of about the
entry's ``total_time_s`` each (start-up, warm-up and evaluations included), x its GPU count (``cost``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from coursekit.course import course_dir, course_setting, user_name
from coursekit.labs.kit import pool
from coursekit.labs.lab09_race.leaderboard import (
    BASELINE,
    RERUN,
    RUN_FIELDS,
    group_runs,
    leaderboard_path,
    read_race,
    verifier,
)
from coursekit.labs.lab09_race.rules import Rules
from coursekit.labs.lab09_race.verify import SUBMITTED, EntryKey, rerun_groups, rerun_state
from coursekit.train.config import TrainConfig
from coursekit.train.target import CONFIG_HASH_IGNORES, config_hash

DEFAULT_TOP = 3
# reset to TrainConfig's defaults in a re-run: where its run writes and what it resumes are the instructor's
RESET_FIELDS = tuple(name for name in CONFIG_HASH_IGNORES if name not in ("seed", "device"))


def check_verifier(path: Path | None = None) -> str:
    """This Unix user, when they are the one whose re-runs count (``leaderboard.verifier``); else PermissionError."""
    me, who = user_name(os.geteuid()), verifier(path)
    if me != who:
        raise PermissionError(f"{me} may not verify the race: only the re-runs of Unix user {who} (the course's "
                              "instructor, coursekit.toml's `instructor`) count; run this as them")
    return me


def check_jobs_folder(root: Path, course: Path) -> None:
    """The re-runs are this user's jobs: their folders go under ``root`` (the site's jobs folder of the course
    they run `race verify` from). PermissionError, saying what to do, when this user cannot make them there (a
    course folder of root's, such as the hub's template, instead of their own ``~/course``)."""
    existing = next((p for p in (root, *root.parents) if p.exists()), root)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"the re-runs are your ({user_name(os.geteuid())}'s) jobs and their folders go to {root}, "
                              f"but {existing} is {user_name(existing.stat().st_uid)}'s and you cannot write it: run "
                              f"`coursekit instructor race verify` from a course folder of your own (on the hub: cd "
                              f"~/course), or point COURSEKIT_COURSE_DIR at one (it is now {course})")


def rebuild(runs: list[dict[str, Any]], rules: Rules) -> list[TrainConfig]:
    """The configuration of each seed of an entry, rebuilt from its runs' records (ValueError, in one sentence,
    when the records do not say enough: no recorded configuration, a configuration from another kit, one that
    does not hash to the run's config_hash or whose seed is not the run's, or one the rules or the engine refuse)."""
    who = f"{runs[0]['participant']}/{runs[0]['submission']}" if runs else "?"
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    defaults = TrainConfig()
    configs = []
    for run in runs:
        recorded = run.get("config")
        seed = run.get("seed")
        if not isinstance(recorded, dict) or not recorded:
            raise ValueError(f"{who}: seed {seed}'s run (job {run.get('job_id')}) records no configuration (its line "
                             "has no `config`): it cannot be re-run; ask the participant to post it again from the "
                             "lab 09 notebook")
        unknown = sorted(set(recorded) - known)
        if unknown:
            raise ValueError(f"{who}: seed {seed}'s configuration has options this kit does not know ({', '.join(unknown)}): "
                             "it ran another version of coursekit and cannot be re-run exactly")
        if run.get("config_hash") != config_hash(recorded):
            raise ValueError(f"{who}: seed {seed}'s recorded configuration hashes to {config_hash(recorded)}, not to the "
                             f"run's config_hash {run.get('config_hash')}: the line was edited, it cannot be re-run as "
                             "claimed")
        if recorded.get("seed") != seed or seed is None:
            raise ValueError(f"{who}: the run of seed {seed} records a configuration of seed {recorded.get('seed')}: "
                             "it cannot be re-run as claimed")
        config = TrainConfig(**recorded).replace(**{**{name: getattr(defaults, name) for name in RESET_FIELDS},
                                                    "progress": "off"})
        problems = rules.problems(config)
        if problems:
            raise ValueError(f"{who}: seed {seed}'s configuration is refused: {'; '.join(problems)}")
        configs.append(config)
    return configs


def job_name(participant: str, round_: int | None = None) -> str:
    """``<job prefix>-verify-<participant>`` (``-r<round>`` for the local site's one job of every re-run)."""
    prefix = course_setting("job_prefix")
    return f"{prefix + '-' if prefix else ''}verify-" + (participant if round_ is None else f"r{round_}")


def board_round(runs: list[dict[str, Any]], round_: int | None) -> int:
    """The round to verify: ``round_``, else the latest round on the board (1 on an empty board)."""
    if round_ is not None:
        return round_
    return max((int(r.get("round") or 1) for r in runs), default=1)


def choose(table: Any, round_: int, top: int, reruns: list[dict[str, Any]], again: bool = False
           ) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows to re-run: the ``top`` entries of ``round_`` ranked by their claimed time (the board during the
    race: ``table`` computed without re-runs), the baseline left out (the instructor's own runs); entries already
    re-run (or under way) are kept as they are unless ``again``. Returns (rows, what was left out and why)."""
    lines = rerun_groups(reruns)
    ranked = sorted((r for r in table if r["counts"] and r["round"] == round_ and r["participant"] != BASELINE),
                    key=lambda r: r["time_to_target_s"])[:top]
    chosen, said = [], []
    for row in ranked:
        key = (row["participant"], row["submission"], row["round"], row["user"])
        if key in lines and not again:
            done, note = rerun_state(row["runs"], lines[key])
            if done is not None or note.startswith("re-run pending"):
                said.append(f"{row['participant']}/{row['submission']}: already re-run"
                            + ("" if done is not None else " (pending)") + "; --again re-runs it")
                continue
        chosen.append(row)
    return chosen, said


def _line(row: dict[str, Any], seed: Any, job: Any, extra: dict[str, Any]) -> dict[str, Any]:
    return {"participant": RERUN, "submission": f"{row['participant']}/{row['submission']}", "round": row["round"],
            "rerun_of": {"participant": row["participant"], "submission": row["submission"], "round": row["round"],
                         "user": row["user"]},
            "job_id": str(job.job_id), "job_name": job.name, "posted": time.time(), "seed": seed, **extra}


def submit(rows: list[dict[str, Any]], rules: Rules, job_options: dict[str, Any], path: Path | None = None,
           site: Any = None) -> list[dict[str, Any]]:
    """Submit the re-runs of ``rows`` (entries of the board) as this user's jobs and write one ``submitted`` line
    per seed into their own runs file; returns those lines. Every entry is rebuilt first (``rebuild``): one whose
    records do not say enough refuses the whole submission, before any job is submitted."""
    from coursekit.labs.kit.experiments import SweepRun, submit_sweep, submit_sweeps
    from coursekit.sites import load_site

    check_verifier(path)
    folder = Path(path or leaderboard_path()).parent
    plans = [(row, rebuild(row["runs"], rules)) for row in rows]
    the_site = load_site(site) if not hasattr(site, "is_local") else site
    lines: list[dict[str, Any]] = []
    if not plans:
        return lines
    check_jobs_folder(the_site.jobs_root(), course_dir())
    on_cpu = [(row, configs) for row, configs in plans if not int(row["runs"][0].get("gpu_count") or 0)]
    on_gpus = [(row, configs) for row, configs in plans if int(row["runs"][0].get("gpu_count") or 0)]
    if the_site.is_local:
        on_cpu, on_gpus = plans, []
    if on_cpu:  # every re-run in one job, one after the other: none shares the CPU with another (as the lab's
        round_ = on_cpu[0][0]["round"]  # cpu profile ran its seeds: one job)
        groups = [configs for _, configs in on_cpu]
        sweeps = submit_sweeps(groups, names=[job_name("", round_)] * len(groups), one_job=True, site=the_site,
                               **job_options)
        for (row, configs), sweep in zip(on_cpu, sweeps, strict=True):
            for config, run in zip(configs, sweep.jobs, strict=True):
                index = int(Path(run.run_dir).name.removeprefix("run")) if isinstance(run, SweepRun) else None
                lines.append(_line(row, config.seed, run.job, {"status": SUBMITTED, "run_index": index}))
    for row, configs in on_gpus:  # one job per seed, each with the entry's GPUs (the race's rules: max_gpus)
        gpus = int(row["runs"][0]["gpu_count"])
        sweep = submit_sweep(configs, name=job_name(row["participant"]), n_gpu=gpus, site=the_site, **job_options)
        for config, job in zip(configs, sweep.jobs, strict=True):
            lines.append(_line(row, config.seed, job, {"status": SUBMITTED, "run_index": None, "gpus": gpus}))
    for line in lines:
        pool.append_record(line, folder)
    return lines


def _handle(line: dict[str, Any]) -> Any:
    from coursekit.jobs.handle import get_job
    from coursekit.labs.kit.experiments import SweepRun

    job = get_job(line["job_id"])
    return SweepRun(job, int(line["run_index"])) if line.get("run_index") is not None else job


def collect(path: Path | None = None, round_: int | None = None, wait: bool = True,
            timeout_s: float | None = None) -> tuple[int, list[str]]:
    """Append the result of every re-run of ``round_`` (all rounds: None) whose job ended: one line per seed
    with the run's summary fields (``status`` None and the job's state when it left no summary); with ``wait``,
    wait for those still running first (TimeoutError after ``timeout_s``). Returns (lines written, the seeds
    still running)."""
    from coursekit.labs.kit.experiments import wait_all
    from coursekit.metrics import summary

    check_verifier(path)
    folder = Path(path or leaderboard_path()).parent
    _, reruns, _ = read_race(path)
    pending = [line for seeds in rerun_groups(reruns).values() for line in seeds.values()
               if line.get("status") == SUBMITTED and (round_ is None or int(line.get("round") or 1) == round_)]
    handles = [_handle(line) for line in pending]
    if wait and handles:
        wait_all(handles, timeout_s, desc="re-runs")
    written, running = 0, []
    for line, handle in zip(pending, handles, strict=True):
        if not handle.done():
            running.append(f"{line['submission']} seed {line['seed']} (job {line['job_id']}, {handle.state})")
            continue
        ended = summary(handle.metrics()) or {}
        result = {k: ended.get(k) for k in RUN_FIELDS} if ended else {"status": None}
        pool.append_record({**{k: v for k, v in line.items() if k not in ("posted", "status")}, **result,
                            "state": handle.state, "posted": time.time()}, folder)
        written += 1
    return written, running


def cost(table: Any, reruns: list[dict[str, Any]]) -> dict[str, float]:
    """What the finished re-runs cost: runs, their jobs' wall time (``total_time_s``) and GPU-minutes (x each
    run's GPU count; a CPU run counts as one device)."""
    lines = [line for seeds in rerun_groups(reruns).values() for line in seeds.values() if line.get("status")
             and line.get("status") != SUBMITTED]
    seconds = sum(float(line.get("total_time_s") or 0.0) for line in lines)
    minutes = sum(float(line.get("total_time_s") or 0.0) * max(1, int(line.get("gpu_count") or 1)) for line in lines) / 60
    return {"runs": len(lines), "wall_s": seconds, "gpu_minutes": minutes}


def report(table: Any, round_: int) -> str:
    """The verified board of ``round_`` in words: claimed and verified time side by side, each entry's
    verification, the entries not reproduced marked and unranked, the final ranking by verified time."""
    rows = [r for r in table if r["round"] == round_]
    shown = []
    for row in rows:
        claimed = (f"{row['time_to_target_s']:.2f} ± {row['std_s'] or 0:.2f}" if row["time_to_target_s"] is not None
                   else "-")
        verified = f"{row['verified_s']:.2f}" if row.get("verified_s") is not None else "-"
        why = "" if row["counts"] else row["marks"]
        shown.append((str(row["rank"] or "-"), f"{row['participant']}/{row['submission']}", claimed, verified,
                      str(row.get("verification") or "claimed only"), why))
    head = ("rank", "entry", "claimed s", "verified s", "verification", "marks")
    widths = [max(len(line[i]) for line in [head, *shown]) for i in range(len(head) - 1)]
    lines = [f"Verified board, round {round_} ({table.title.split(' — ')[0]})"]
    for line in [head, *shown]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1])
    final = [r for r in rows if r["counts"] and r.get("verified_s") is not None]
    lines.append("final standings (verified times): " + (", ".join(
        f"#{r['rank']} {r['participant']}/{r['submission']} {r['verified_s']:.2f} s" for r in final) or "none yet"))
    dropped = [r for r in rows if r.get("verification") == "NOT REPRODUCED"]
    if dropped:
        lines.append("not reproduced, unranked: " + ", ".join(f"{r['participant']}/{r['submission']}" for r in dropped))
    return "\n".join(lines)


__all__ = ["DEFAULT_TOP", "EntryKey", "board_round", "check_verifier", "choose", "collect", "cost", "group_runs",
           "job_name", "rebuild", "report", "submit"]
