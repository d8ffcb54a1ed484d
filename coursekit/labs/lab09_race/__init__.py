"""Lab 09's race: a fixed task, timed and verified by the engine, and a leaderboard with no keys.

- ``rules.py``: what is fixed and what is free; ``Rules.problems(config)`` names every broken rule;
- ``leaderboard.py``: the file-locked JSON-lines file (path from the course's coursekit.toml), posted
  to from finished runs only;
- ``verify.py``: entries = mean ± std of time-to-target over the seeds, marked when they break a rule,
  use another validation set or code, miss the target with a seed, or ran on other hardware;
- ``view.py``: the live leaderboard widget and its plot.
"""

from coursekit.labs.lab09_race.leaderboard import (
    BASELINE,
    append_run,
    has_baseline,
    leaderboard_path,
    post_runs,
    read_runs,
    run_record,
)
from coursekit.labs.lab09_race.rules import DEFAULT_SEEDS, Rules
from coursekit.labs.lab09_race.verify import entries, marks_of
from coursekit.labs.lab09_race.view import LeaderboardView, live_leaderboard, plot_leaderboard, standings
from coursekit.train.target import code_hash, config_hash

__all__ = ["BASELINE", "DEFAULT_SEEDS", "LeaderboardView", "Rules", "append_run", "code_hash", "config_hash",
           "entries", "has_baseline", "leaderboard_path", "live_leaderboard", "marks_of", "plot_leaderboard",
           "post_runs", "read_runs", "run_record", "standings"]
