"""Entries of the leaderboard and their verification: marked and explained, never silently dropped.

An entry (one participant's submission in one round) counts when it has no mark. Marks:
- a run's configuration breaks a rule (``Rules.problems``);
- a run's validation set is not the baseline's (its size or hash differs);
- a run's code hash is not the kit's (the coursekit source that ran was changed);
- fewer seeds than the rules ask, a seed used twice, or seeds run with different configurations;
- a seed did not reach the target (or did not finish);
- the target was reached on evaluation luck: the held-out part of the validation set (``confirm_fraction``,
  never read by the stopping evaluations, evaluated once at each stop) gives a mean accuracy over the seeds
  more than ``CONFIRM_Z`` standard errors below the target;
- the runs ran on another GPU model (or CPU) than the baseline of the same round (a comparison needs the same
  GPUs; how many of them is the participant's choice within ``max_gpus``);
- the runs are not their poster's: the pseudonym belongs to another Unix user, or the file they came from
  can be written by others (``leaderboard.read_board``). Entries are grouped by the Unix user who posted them
  too: another user's runs under your pseudonym never join or replace yours;
- the runs are not backed by Slurm's accounting (``check_evidence``; the records are ``sacct``'s, written by
  slurmctld and slurmdbd, never by the participant, who can write anything into their own runs file): each
  run must name a job that accounting knows, owned (sacct's User/UID) by the Unix user who owns the runs file
  the line sits in, that ended COMPLETED; no other line may claim the same job and seed; and the job's elapsed
  time bounds the run's own clock: time to target <= training time <= Elapsed (summed over the seeds when
  one job ran several), within ``ELAPSED_TOLERANCE_S`` (Slurm stamps a job's start and end in whole seconds).
  This defeats copied lines (another user's job), invented job ids, failed or cancelled jobs, a job posted
  twice (its time cut the second time) and times longer than the job. What it cannot see is a time cut
  *within* its job's elapsed time in a file rewritten by its owner: the re-run of the top entries by the
  instructor is the check for that. Without accounting (the local site: one user, a laptop) every time is
  ranked as posted and the board says its times are unverified (``table.evidence``, ``UNVERIFIED``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from coursekit.labs.kit.evidence import ELAPSED_TOLERANCE_S as ELAPSED_TOLERANCE_S
from coursekit.labs.kit.evidence import NOT_VISIBLE, Accounting, check_jobs, seconds
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab09_race.leaderboard import BASELINE, group_runs, is_theirs
from coursekit.labs.lab09_race.rules import Rules
from coursekit.metrics import mean_std

# An entry is marked when its held-out accuracy at the stops is this many standard errors below the target: an
# honest entry (its models truly at the target) is marked by chance about once in 40, one that stopped on a lucky
# evaluation is marked when its luck was large against the noise of both parts of the validation set.
CONFIRM_Z = 2.0
# The engine's clocks (time to target, training time) are one clock read at two moments: equal at the stop up to
# float rounding (a job's elapsed time has its own tolerance: kit.evidence.ELAPSED_TOLERANCE_S).
CLOCK_TOLERANCE_S = 1e-3
SUBMITTED = "submitted"  # the status of a re-run line written at submission, before its run's result is collected
UNVERIFIED = ("times unverified: this site keeps no Slurm accounting (the local site), so nothing stands behind a "
              "posted time but its line; ranked as posted")
# Verification by re-run (the instructor re-runs an entry's configuration and seeds on the room's hardware): the
# claimed mean is "not reproduced" when the re-run's mean is slower than the claim by more than BOTH
# - REPRO_Z = 3 standard errors of the difference of the two means (claim of k seeds, re-run of k seeds): seeds
#   change the initialisation and the data order, so time to target varies from seed to seed, and each side's own
#   standard deviation says by how much; the difference of two honest means is within 3 of its standard errors
#   but about once in 700 (one-sided, normal), so in a room of twenty, at the top 3 re-run per round, an honest
#   entry is almost never called a cheat by the noise of its seeds; and
# - REPRO_FLOOR = 25 % of the claim: what seeds do not show, because both sides ran on different machines at
#   different moments: another node of the same GPU model (clocks, thermals), a busier shared file system or
#   network, a neighbour's job on the node. An allowance, not yet measured on re-runs: the same 2-GPU job's
#   efficiency moved 0.966 -> 0.874 (10 %) when the host's other GPUs were busy (LAB-REVIEW-3); three seeds with an accidentally small spread would otherwise make the 3-standard-error bound
#   tighter than these. A cut time (the forgery accounting cannot see: a time lowered within its job's elapsed
#   time) that still passes has gained less than a quarter: a claim 2x or 10x too fast is far outside.
# A re-run FASTER than its claim is never a mark (the claim was honest, or modest).
REPRO_Z = 3.0
REPRO_FLOOR = 0.25
EntryKey = tuple[str, str, int, str]  # (participant, submission, round, Unix user): an entry of the board


def hardware(run: dict[str, Any]) -> str:
    """``2 x NVIDIA H100 80GB HBM3`` or the CPU's name: what a time was measured on."""
    if run.get("gpu_count"):
        return f"{run['gpu_count']} x {run.get('gpu_name') or run.get('device_name')}"
    return str(run.get("device_name") or "?")


def device_kind(run: dict[str, Any]) -> str:
    """The GPU model (or the CPU's name without its thread count) a time was measured on: entries must share it
    with the baseline; the number of GPUs is the participant's choice, within the rules' ``max_gpus``."""
    if run.get("gpu_count"):
        return str(run.get("gpu_name") or run.get("device_name"))
    return re.sub(r"\s*\(\d+ threads?\)$", "", str(run.get("device_name") or "?"))


def confirmed_accuracy(runs: list[dict[str, Any]]) -> float | None:
    """The mean held-out accuracy at the stops of the runs that reached the target (None: none was confirmed)."""
    values = [float(r["confirm_acc"]) for r in runs if r.get("target_reached") and r.get("confirm_acc") is not None]
    return sum(values) / len(values) if values else None


def confirm_floor(runs: list[dict[str, Any]], target: float) -> tuple[float, float, int, float] | None:
    """The held-out accuracy below which the runs' target looks reached on evaluation luck: ``(floor, mean held-out
    accuracy, seeds, held-out samples)``; None where no run that reached the target has a held-out part.

    The standard error of the mean over ``k`` seeds counts the noise of both parts of the validation set: the
    stopping part (a run stops at its first evaluation over the target, so its own noise can put it there) and
    the held-out part: ``sqrt(t (1 - t) (1/n_held + 1/n_stop) / k)``."""
    confirmed = [r for r in runs if r.get("target_reached") and r.get("confirm_acc") is not None
                 and r.get("confirm_samples") and r.get("val_samples")]
    if not confirmed:
        return None
    mean = sum(float(r["confirm_acc"]) for r in confirmed) / len(confirmed)
    held = sum(int(r["confirm_samples"]) for r in confirmed) / len(confirmed)
    stopping = sum(int(r["val_samples"]) for r in confirmed) / len(confirmed)
    error = math.sqrt(target * (1 - target) * (1 / held + 1 / stopping) / len(confirmed))
    return target - CONFIRM_Z * error, mean, len(confirmed), held


def luck_mark(runs: list[dict[str, Any]], target: float) -> str | None:
    """Why the runs' target looks reached on evaluation luck (None: the held-out part confirms it, or there is none):
    their mean held-out accuracy at the stops is under :func:`confirm_floor`."""
    found = confirm_floor(runs, target)
    if found is None or found[1] >= found[0]:
        return None
    floor, mean, seeds, held = found
    return (f"the target looks reached on evaluation luck: at the stops, the held-out part of the validation set "
            f"({held:,.0f} samples, never used for stopping) gave {mean:.1%} (mean of {seeds} seeds), more "
            f"than {CONFIRM_Z:g} standard errors ({target - floor:.1%}) below the target {target:.1%}")


def marks_of(runs: list[dict[str, Any]], rules: Rules, kit_code_hash: str,
             reference: dict[str, Any] | None) -> list[str]:
    """Every reason why these runs (one entry) do not count."""
    marks: list[str] = sorted({str(r["not_theirs"]) for r in runs if r.get("not_theirs")})
    marks += list(dict.fromkeys(reason for r in runs for reason in r.get("evidence") or ()))
    seeds = [r.get("seed") for r in runs]
    if len(runs) < rules.seeds:
        marks.append(f"{len(runs)} seed(s) posted, the rules ask for {rules.seeds}")
    if len(set(seeds)) != len(seeds):
        marks.append(f"seeds repeat: {seeds}")
    if len({r.get("config_hash") for r in runs}) > 1:
        marks.append("the seeds ran different configurations (config hashes differ)")
    broken: list[str] = []
    for run in runs:
        for problem in rules.problems(run.get("config") or {}, run.get("num_parameters"), run.get("gpu_count")):
            if problem not in broken:
                broken.append(problem)
    marks += [f"breaks a rule: {problem}" for problem in broken]
    if reference is not None:
        wrong = [r for r in runs if (r.get("val_hash"), r.get("val_samples"))
                 != (reference.get("val_hash"), reference.get("val_samples"))]
        if wrong:
            marks.append(f"validation set differs from the baseline's ({wrong[0].get('val_samples')} samples, hash "
                         f"{wrong[0].get('val_hash')} vs {reference.get('val_samples')}, {reference.get('val_hash')})")
        other = sorted({hardware(r) for r in runs if device_kind(r) != device_kind(reference)})
        if other:
            marks.append(f"ran on {', '.join(other)}, the baseline of this round on {hardware(reference)}")
    foreign = sorted({str(r.get("code_hash")) for r in runs if r.get("code_hash") != kit_code_hash})
    if foreign:
        marks.append(f"code hash {', '.join(foreign)} is not the kit's ({kit_code_hash}): the engine's source was changed")
    missed = [r.get("seed") for r in runs if not r.get("target_reached")]
    if missed:
        marks.append(f"seed(s) {missed} did not reach the target {rules.target_acc:.1%}")
    lucky = luck_mark(runs, rules.target_acc)
    if lucky:
        marks.append(lucky)
    return marks


def baseline_reference(runs: list[dict[str, Any]], round_: int) -> dict[str, Any] | None:
    """The first baseline run of the round (its validation set and hardware are the reference)."""
    for run in runs:
        if (run["participant"] == BASELINE and int(run.get("round") or 1) == round_ and is_theirs(run)
                and not run.get("evidence")):
            return run
    return None


def check_evidence(runs: list[dict[str, Any]], accounting: Accounting | None) -> None:
    """Set ``run["evidence"]`` on every run (every line read, including those a later line of the same seed
    replaces): the reasons why Slurm's accounting does not back it (empty: it does), each said in words
    (``kit.evidence.check_jobs``: a job backs one line per seed; time to target <= training time <= elapsed).
    ``accounting``: job id -> sacct's record (``slurm_cli.job_evidence``), data, so that tests can plant it;
    None: the site has no accounting, nothing is checked (the board says its times are unverified)."""
    if accounting is None:
        for run in runs:
            run["evidence"] = []
        return
    check_jobs(runs, accounting, key=lambda run: run.get("seed"), label=lambda run: f"seed {run.get('seed')}",
               durations=("train_time_s", "time_to_target_s"), noun="run", many="seeds")
    for run in runs:
        to_target, trained = seconds(run.get("time_to_target_s")), seconds(run.get("train_time_s"))
        if to_target is not None and trained is not None and to_target > trained + CLOCK_TOLERANCE_S:
            run["evidence"].append(f"time to target {to_target:.3f} s is longer than the run's training time "
                                   f"{trained:.3f} s")


def reproduction(claimed: list[dict[str, Any]], reruns: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """The verified time of an entry (its re-run's mean time to target) and why it is not reproduced (None: it
    is): a re-run seed that missed the target, or a re-run slower than the claim by more than the spread allows
    (``REPRO_Z``, ``REPRO_FLOOR``)."""
    missed = [r.get("seed") for r in reruns if not r.get("target_reached") or r.get("time_to_target_s") is None]
    times = [float(r["time_to_target_s"]) for r in reruns if r.get("target_reached")
             and r.get("time_to_target_s") is not None]
    verified, rerun_std = mean_std(times, empty=None)
    if not reruns:
        return None, "not reproduced: the re-run left no run"
    if missed:
        return verified, f"not reproduced: the re-run of seed(s) {missed} did not reach the target"
    claims = [float(r["time_to_target_s"]) for r in claimed if r.get("time_to_target_s") is not None]
    claim, claim_std = mean_std(claims, empty=None)
    if claim is None or verified is None:
        return verified, None
    spread = REPRO_Z * math.sqrt(((claim_std or 0.0) ** 2) / max(len(claims), 1)
                                 + ((rerun_std or 0.0) ** 2) / max(len(times), 1))
    allowed = max(spread, REPRO_FLOOR * claim)
    if verified > claim + allowed:
        return verified, (f"not reproduced: the instructor's re-run took {verified:.2f} s to the target (mean of "
                          f"{len(times)} seeds), {verified / claim:.1f}x the claimed {claim:.2f} s; the spread allows "
                          f"{allowed:.2f} s more (the larger of {REPRO_Z:g} standard errors and {REPRO_FLOOR:.0%})")
    return verified, None


def rerun_groups(reruns: Sequence[dict[str, Any]]) -> dict[EntryKey, dict[Any, dict[str, Any]]]:
    """The instructor's re-run lines by the entry they re-run (``rerun_of``), the latest line of each seed
    (a seed re-run again replaces its earlier re-run; a "submitted" line is a re-run not collected yet)."""
    found: dict[EntryKey, dict[Any, dict[str, Any]]] = {}
    for line in reruns:
        of = line["rerun_of"]
        seeds = found.setdefault((of["participant"], of["submission"], int(of["round"]), of["user"]), {})
        seeds.pop(line.get("seed"), None)
        seeds[line.get("seed")] = line
    return found


def rerun_state(claimed: list[dict[str, Any]], lines: Mapping[Any, dict[str, Any]]) -> tuple[list[dict[str, Any]] | None, str]:
    """Where an entry's re-run stands: (its finished re-run runs, "") once every seed of the claim has a finished
    re-run line, else (None, why not yet: "re-run pending" or "re-run failed ..." or "re-run incomplete")."""
    seeds = [r.get("seed") for r in claimed]
    pending = [s for s in seeds if s in lines and lines[s].get("status") == SUBMITTED]
    if pending:
        return None, f"re-run pending (seed(s) {pending}): coursekit instructor race verify --collect"
    failed = [s for s in seeds if s in lines and not lines[s].get("status")]
    if failed:
        job = lines[failed[0]].get("job_id")
        return None, (f"re-run failed: seed(s) {failed} left no result (job {job} {lines[failed[0]].get('state')}); "
                      "re-run it: coursekit instructor race verify --again")
    missing = [s for s in seeds if s not in lines]
    if missing:
        return None, f"re-run incomplete: seed(s) {missing} not re-run"
    return [lines[s] for s in seeds], ""


def entries(runs: list[dict[str, Any]], rules: Rules, kit_code_hash: str,
            problems: Sequence[str] = (), accounting: Accounting | None = None,
            reruns: Mapping[EntryKey, list[dict[str, Any]]] | None = None,
            rerun_notes: Mapping[EntryKey, str] | None = None) -> ResultsTable:
    """One row per (participant, submission, round, Unix user): time-to-target mean ± std, the held-out accuracy
    at the stops, the marks, the rank;
    ``table.problems``: what the reader skipped (``problems``: lines or files that are not runs);
    ``accounting``: Slurm's records of the runs' jobs (``check_evidence``), None where the site keeps none:
    ``table.evidence`` is then ``UNVERIFIED`` (said in the title too), else "sacct";
    ``reruns``: the instructor's re-runs of entries (entry key -> its re-run's runs): the row's ``verified_s``
    beside the claimed time, marked "not reproduced" when it is not (``reproduction``); ``rerun_notes``: entries
    whose re-run is under way or failed (``rerun_state``), said in the ``verification`` column. Once re-runs are
    given (the final board), the entries re-run and reproduced rank first, by their verified time, with the
    instructor's own baseline by its time; the counting entries nobody re-ran follow, by their claimed time
    (``verification``: "claimed only")."""
    check_evidence(runs, accounting)
    rows = []
    for (participant, submission, round_, user), group in group_runs(runs).items():
        times = [r["time_to_target_s"] for r in group if r.get("target_reached") and r.get("time_to_target_s") is not None]
        steps = [r["steps_to_target"] for r in group if r.get("target_reached") and r.get("steps_to_target") is not None]
        mean, std = mean_std(times, empty=None)
        marks = marks_of(group, rules, kit_code_hash, baseline_reference(runs, round_))
        verified, key = None, (participant, submission, round_, user)
        verification = "claimed only"
        if participant == BASELINE:
            verification = "the instructor's"
        if reruns is not None and key in reruns:
            verified, failed = reproduction(group, reruns[key])
            marks += [failed] if failed else []
            verification = "NOT REPRODUCED" if failed else "reproduced"
        elif rerun_notes and key in rerun_notes:
            verification = rerun_notes[key]
        rows.append({"participant": participant, "submission": submission, "round": round_, "user": user,
                     "seeds": len(group), "reached": len(times), "time_to_target_s": mean, "std_s": std,
                     "steps_to_target": mean_std(steps, empty=None)[0], "confirm_acc": confirmed_accuracy(group),
                     "hardware": hardware(group[0]),
                     "evidence": "unverified" if accounting is None else "failed" if any(r["evidence"] for r in group)
                     else NOT_VISIBLE if any(r.get("unverifiable") for r in group) else "sacct",
                     "verified_s": verified, "verification": verification,
                     "counts": not marks, "marks": "; ".join(marks) or "-", "runs": group})
    final = reruns is not None

    def order(row: dict[str, Any]) -> tuple[bool, bool, float]:
        verified = row["verified_s"] is not None or row["participant"] == BASELINE
        time_s = row["verified_s"] if row["verified_s"] is not None else row["time_to_target_s"]
        return not row["counts"], final and not verified, float("inf") if time_s is None else time_s

    rows.sort(key=order)
    rank = 0
    for row in rows:
        row["rank"] = (rank := rank + 1) if row["counts"] else None
    columns = ["rank", "participant", "submission", "round", "seeds", "reached", "time_to_target_s", "std_s",
               "steps_to_target", "confirm_acc", "hardware", "evidence", *(["verified_s", "verification"] if final else []),
               "counts", "marks"]
    title = f"Leaderboard — {rules.name} (target {rules.target_acc:.1%})"
    if final:
        title += (" — the verified board: entries re-run by the instructor rank by their verified time (verified_s), "
                  "before those only claimed")
    hidden = sorted({row["user"] for row in rows if row["evidence"] == NOT_VISIBLE})
    if accounting is None:
        title += f" — {UNVERIFIED}"
    elif hidden:
        title += (f" — {NOT_VISIBLE}: the entries of {', '.join(hidden)} (this site's Slurm shows each participant "
                  "only their own jobs, PrivateData=jobs); they rank as claimed here, and the instructor's board, "
                  "which sees every job, is the one that counts")
    else:
        title += " — every ranked time backed by Slurm's accounting"
    table = ResultsTable(rows, columns=columns, title=title, wrap=("marks",))  # the marks are sentences
    table.problems = list(problems)  # type: ignore[attr-defined]
    table.evidence = UNVERIFIED if accounting is None else "sacct"  # type: ignore[attr-defined]
    table.verified = final  # type: ignore[attr-defined]
    return table
