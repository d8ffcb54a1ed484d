"""The leaderboard in a notebook: a live widget refreshed in the background (never blocking the kernel),
and a plot of time-to-target with error bars per entry, the baseline marked."""

from __future__ import annotations

import html
import textwrap
import threading
from pathlib import Path
from typing import Any

from coursekit.labs.kit.evidence import NOT_VISIBLE, AccountingCache, site_accounting
from coursekit.labs.kit.plots import RECORDED_COLOR, new_figure
from coursekit.labs.kit.pool import CLAIM_SUFFIX, RUNS_SUFFIX
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab09_race.leaderboard import BASELINE, group_runs, leaderboard_path, read_race
from coursekit.labs.lab09_race.rules import Rules
from coursekit.labs.lab09_race.verify import UNVERIFIED, EntryKey, entries, rerun_groups, rerun_state

TITLE_WIDTH = 75  # characters a line of the figure's title holds: the board's notes wrap under its name
BOARD_FIGSIZE = (9.0, 4.0)  # inches: room for the entries' names beside their bars

DEFAULT_REFRESH_S = 5.0
DEFAULT_STOP_AFTER_S = 3 * 3600.0  # a workshop's afternoon; stop() ends it earlier
COUNTS_COLOR, MARKED_COLOR, BASELINE_COLOR = "tab:blue", "tab:red", "tab:gray"


AUTO = "auto"
_ACCOUNTING = AccountingCache()


def board_accounting(runs: list[dict[str, Any]], problems: list[str],
                     cache: AccountingCache | None = None) -> dict[str, dict[str, Any]] | None:
    """Slurm's records of the runs' jobs on a Slurm site (one sacct call for the board, through the view's
    ``cache``), None on the local site (no accounting: the board's times are unverified). Accounting that does
    not answer on a Slurm site is said in ``problems`` and leaves the times unverified for this refresh."""
    return site_accounting(runs, problems, cache or _ACCOUNTING)


def verification(runs: list[dict[str, Any]], reruns: list[dict[str, Any]]
                 ) -> tuple[dict[EntryKey, list[dict[str, Any]]] | None, dict[EntryKey, str]]:
    """The instructor's re-runs of the board's entries: (entry -> its finished re-run runs, entry -> why its
    re-run is not finished); (None, {}) when nobody re-ran anything (the board of a race under way)."""
    if not reruns:
        return None, {}
    lines = rerun_groups(reruns)
    finished: dict[EntryKey, list[dict[str, Any]]] = {}
    notes: dict[EntryKey, str] = {}
    for key, group in group_runs(runs).items():
        if key not in lines:
            continue
        done, note = rerun_state(group, lines[key])
        if done is not None:
            finished[key] = done
        else:
            notes[key] = note
    return finished, notes


def standings(rules: Rules, kit_code_hash: str, path: Path | None = None, accounting: Any = AUTO) -> ResultsTable:
    """The leaderboard now: every entry, ranked when it counts, marked and explained when it does not;
    ``table.problems``: the lines and files of the race folder that are not runs (skipped). ``accounting``:
    job id -> Slurm's record of the job (``verify.check_evidence``), None for none (times unverified), or
    ``AUTO``: sacct's on a Slurm site (one call for the whole board), none on the local site.

    The board a race ends with: once the instructor re-ran the top entries (`coursekit instructor race verify`),
    their re-runs (the instructor's own lines, ``leaderboard.read_race``; a re-run line in anyone else's file is
    ignored, with a note) are read here too: each re-run entry shows its verified time (``verified_s``, the
    re-run's mean) beside its claimed one, and ranks by it; an entry whose re-run misses the target with a seed,
    or is slower than its claim by more than the larger of 3 standard errors of the difference of the two means
    and 25 % of the claim, is marked "not reproduced" and loses its rank. Why those two numbers: seeds make time
    to target vary, and each side's own spread says by how much — an honest entry's re-run is more than 3
    standard errors slower about once in 700; and both sides ran on different nodes at different moments, which
    seeds cannot show (a 2-GPU job's efficiency moved by 10 % with its host's load), hence a 25 % floor, an
    allowance not yet measured on re-runs (``verify.REPRO_Z``,
    ``verify.REPRO_FLOOR``). A claim cut to a half or a tenth of its real time is far outside both."""
    runs, reruns, problems = read_race(path)
    if isinstance(accounting, str) and accounting == AUTO:
        accounting = board_accounting(runs, problems)
    finished, notes = verification(runs, reruns)
    return entries(runs, rules, kit_code_hash, problems, accounting, reruns=finished, rerun_notes=notes)


def folder_state(path: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when anyone posts: the name, mtime and size of every runs and claim file of the folder."""
    found = []
    for name in sorted(p.name for p in path.parent.glob("*") if p.name.endswith((RUNS_SUFFIX, CLAIM_SUFFIX))):
        try:
            info = (path.parent / name).lstat()
        except OSError:
            continue  # removed while listing
        found.append((name, info.st_mtime_ns, info.st_size))
    return tuple(found)


class LeaderboardView:
    """An ipywidgets HTML table re-read from the file every ``refresh_s`` seconds by a daemon thread."""

    def __init__(self, rules: Rules, kit_code_hash: str, path: Path | None = None,
                 refresh_s: float = DEFAULT_REFRESH_S, stop_after_s: float = DEFAULT_STOP_AFTER_S) -> None:
        import ipywidgets

        if not refresh_s > 0:
            raise ValueError(f"refresh_s={refresh_s}: give a positive number of seconds (e.g. 5)")
        self.rules, self.kit_code_hash = rules, kit_code_hash
        self.path = Path(path or leaderboard_path())
        self.refresh_s, self.stop_after_s = refresh_s, stop_after_s
        self.widget = ipywidgets.HTML(value="<i>loading the leaderboard…</i>")
        self.table: ResultsTable | None = None
        self._stop = threading.Event()
        self._seen: tuple[tuple[str, int, int], ...] | None = None
        self.thread = threading.Thread(target=self._run, name="coursekit-leaderboard", daemon=True)

    def refresh(self) -> None:
        """Re-read the race folder when a file of it changed and redraw."""
        seen = folder_state(self.path) if self.path.parent.is_dir() else ()
        if seen == self._seen:
            return
        self._seen = seen
        self.table = standings(self.rules, self.kit_code_hash, self.path)
        skipped = "".join(f"<div style='color:#9a6700'>skipped: {html.escape(problem)}</div>"
                          for problem in getattr(self.table, "problems", []))
        if getattr(self.table, "evidence", None) == UNVERIFIED:
            skipped = f"<div style='color:#9a6700'><b>{html.escape(UNVERIFIED)}</b></div>" + skipped
        elif any(row["evidence"] == NOT_VISIBLE for row in self.table):
            said = self.table.title.split(f" — {NOT_VISIBLE}", 1)[-1]
            skipped = f"<div style='color:#9a6700'><b>{html.escape(NOT_VISIBLE + said)}</b></div>" + skipped
        self.widget.value = (self.table.to_html() + skipped
                             + f"<div style='color:#57606a'>{html.escape(str(self.path))}</div>")

    def _run(self) -> None:
        waited = 0.0
        while not self._stop.is_set() and waited <= self.stop_after_s:
            try:
                self.refresh()
            except Exception as error:  # noqa: BLE001 - say why the view stopped instead of dying silently
                self.widget.value = f"<b>leaderboard view stopped: {error!r}</b>"
                return
            self._stop.wait(self.refresh_s)
            waited += self.refresh_s

    def start(self) -> LeaderboardView:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def live_leaderboard(rules: Rules, kit_code_hash: str, path: Path | None = None,
                     refresh_s: float = DEFAULT_REFRESH_S, stop_after_s: float = DEFAULT_STOP_AFTER_S) -> Any:
    """In a notebook: the live view (returned at once, refreshed in the background); elsewhere the table."""
    from coursekit.jobs.queue_view import in_kernel

    if not in_kernel():
        return standings(rules, kit_code_hash, path)
    view = LeaderboardView(rules, kit_code_hash, path, refresh_s, stop_after_s)
    view.refresh()  # the first rendering is there when the cell returns
    return view.start()


def plot_leaderboard(table: ResultsTable, title: str = "") -> Any:
    """Time-to-target (mean ± std over seeds) per entry; marked entries in red with their rank left empty;
    the baseline as a dashed line."""
    figure, ax = new_figure(figsize=BOARD_FIGSIZE)
    shown = [r for r in table if r["time_to_target_s"] is not None]
    labels = [f"{r['participant']}/{r['submission']}" + ("" if r["counts"] else " (marked)") for r in shown]
    colors = [BASELINE_COLOR if r["participant"] == BASELINE else COUNTS_COLOR if r["counts"] else MARKED_COLOR
              for r in shown]
    positions = list(range(len(shown)))
    ax.barh(positions, [r["time_to_target_s"] for r in shown], xerr=[r["std_s"] or 0 for r in shown],
            color=colors, capsize=4, alpha=0.85)
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()  # the fastest on top
    for row in shown:
        if row["participant"] == BASELINE and row["counts"]:
            ax.axvline(row["time_to_target_s"], color=RECORDED_COLOR, linestyle="--", label="baseline")
            ax.legend(fontsize="small", loc="lower left", bbox_to_anchor=(1.0, 0.0), frameon=False)
            break
    missing = len(table) - len(shown)
    never = f"\n{missing} entr{'y' if missing == 1 else 'ies'} never reached the target" if missing else ""
    ax.set_xlabel(f"time to target (s, mean ± std over seeds){never}")
    ax.set_title(wrapped_title(title or table.title), fontsize="medium")
    return figure


def wrapped_title(title: str) -> str:
    """The board's name on the first line, its notes (after the second " — ") wrapped under it."""
    parts = title.split(" — ", 2)
    head, notes = " — ".join(parts[:2]), parts[2] if len(parts) > 2 else ""
    return "\n".join([head, *textwrap.wrap(notes, TITLE_WIDTH)])
