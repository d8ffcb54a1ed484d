"""Lab 09's part of ``coursekit instructor``: ``race verify`` (the top entries re-run as the instructor's jobs,
the verified board) and ``race clear`` (a round ended)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coursekit.instructor.common import EXIT_OK


def race_rules(profile: str | None) -> tuple[Any, dict[str, Any]]:
    """Lab 09's rules of the course's profile (``--profile``, else the labs' choice: coursekit.toml's ``profile``,
    $COURSEKIT_PROFILE, a visible GPU) and its settings (the job options of its runs)."""
    from coursekit.labs.kit.profiles import choose_profile
    from coursekit.labs.lab09_race import Rules, settings

    chosen = choose_profile(profile)
    s = settings(chosen.name)
    rules = Rules("lab 09", s["baseline"], models=s["models"], max_parameters=s["max_parameters"],
                  max_gpus=s["max_gpus"], seeds=s["seeds"])
    return rules, {**s, "profile": chosen.name}


def race_verify(args: argparse.Namespace) -> int:
    """``race verify``: re-run the top entries of the board as the instructor's jobs, wait for them (or not:
    ``--collect`` later) and print the verified board (``labs/lab09_race/rerun.py``)."""
    from coursekit.labs.lab09_race import rerun
    from coursekit.labs.lab09_race.leaderboard import read_race
    from coursekit.labs.lab09_race.verify import entries
    from coursekit.labs.lab09_race.view import board_accounting, standings
    from coursekit.train.target import code_hash

    path = args.leaderboard
    me = rerun.check_verifier(path)
    rules, s = race_rules(args.profile)
    kit = code_hash()
    runs, reruns, problems = read_race(path)
    round_ = rerun.board_round(runs, args.round)
    submitted = 0
    if not args.collect:
        claimed = entries(runs, rules, kit, problems, board_accounting(runs, problems))  # the board of the race
        rows, said = rerun.choose(claimed, round_, args.top, reruns, args.again)
        for line in said:
            print(line)
        if not rows and not said:
            raise ValueError(f"no ranked entry in round {round_} to verify ({len(claimed)} entr(y/ies) on the board, "
                             f"read with lab 09's rules of the {s['profile']} profile; another profile: --profile)")
        lines = rerun.submit(rows, rules, s["job"], path)
        submitted = len(lines)
        if lines:
            jobs = sorted({line["job_id"] for line in lines})
            print(f"submitted {submitted} re-run(s) of {len(rows)} entr{'y' if len(rows) == 1 else 'ies'} "
                  f"({', '.join(r['participant'] + '/' + r['submission'] for r in rows)}) as {me}'s job(s) "
                  f"{' '.join(jobs)}")
    running: list[str] = []
    if args.wait or args.collect:
        timeout = args.timeout if args.timeout is not None else float(s["timeout_s"]) * max(1, submitted or rules.seeds)
        try:
            written, running = rerun.collect(path, round_, wait=args.wait, timeout_s=timeout)
        except TimeoutError as error:
            written, running = rerun.collect(path, round_, wait=False)
            print(f"{error}: collect them later", file=sys.stderr)
        print(f"collected {written} re-run(s)" + (f"; still running: {'; '.join(running)}" if running else ""))
    if running or not (args.wait or args.collect):
        print("the re-runs are under way: coursekit instructor race verify --collect (waits for them, then prints "
              "the verified board)")
    table = standings(rules, kit, path)
    print(rerun.report(table, round_))
    _, reruns, _ = read_race(path)
    spent = rerun.cost(table, reruns)
    if spent["runs"]:
        print(f"re-runs' cost: {spent['runs']} run(s), {spent['wall_s'] / 60:.1f} minutes of jobs' wall time, "
              f"{spent['gpu_minutes']:.1f} GPU-minutes (a CPU run counts as one device)")
    for problem in getattr(table, "problems", []):
        print(f"note: {problem}", file=sys.stderr)
    return EXIT_OK


def cmd_race(args: argparse.Namespace) -> int:
    """``race clear``: end a round of lab 09 (its files moved into the race folder's archive); ``race verify``:
    re-run the top entries (``race_verify``)."""
    from coursekit.labs.lab09_race.leaderboard import clear_round

    if args.race_command == "verify":
        return race_verify(args)
    archive, moved = clear_round(args.leaderboard)
    print(f"cleared the round: {len(moved)} file(s) moved to {archive}" + (f": {' '.join(moved)}" if moved else ""))
    return EXIT_OK
