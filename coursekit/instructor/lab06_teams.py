"""Lab 06's part of the room view: its team sweeps, one line per team."""

from __future__ import annotations


def team_lines() -> list[str]:
    """Lab 06's team sweeps, one line per team: who holds each part and how many runs they pooled."""
    from coursekit.labs.lab06_data_parallel.team import team_progress

    teams: dict[str, list[str]] = {}
    for row in team_progress():
        who = f"{row['pseudonym'] or row['holder']} ({row['cells']} runs)" if row["holder"] else "nobody yet"
        teams.setdefault(row["team"], []).append(f"part {row['part']} {who}")
    return [f"lab 06 team {team}: " + ", ".join(parts) for team, parts in teams.items()]
