"""Local jobs are processes: their start time (to tell a pid from a later reuse) and their children."""

from __future__ import annotations

from pathlib import Path


def process_start_time(pid: int) -> str | None:
    """Start time of a process (clock ticks since boot), to tell it from a later one with the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return None if fields[0] == "Z" else fields[19]


def child_pids(pid: int | None) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    if pid is None:
        return []
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children
