"""Several engine runs in one process: ``python -m coursekit.train.sweep ARGS [--next ARGS ...]``.

Each group of arguments is exactly one ``python -m coursekit.train`` run (the same options); the runs go
one after the other in this process, so that tiny runs (the labs' cpu profiles) do not each pay the
start-up of Python and torch (~3 s, ten times a tiny run). Every group is parsed and checked before the
first run starts. Run ``i`` writes its ``metrics.jsonl`` into ``<folder>/run<i>`` (``run000``, ...),
``<folder>`` being the job's run folder (``--out`` of the first group, else the job's, else
``runs/<timestamp>``); a group with its own ``--out`` keeps it.

Exit codes: 0 every run ended (completed, or stopped on a NaN loss, which its summary records),
1 a run failed, 2 a bad configuration (nothing ran).
"""

from __future__ import annotations

import sys
from pathlib import Path

from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig, parse_args
from coursekit.train.engine import EXIT_CODES, ConfigError, resolve_run_dir, train

SEPARATOR = "--next"
RUN_FOLDER = "run{:03d}"


def split_groups(argv: list[str]) -> list[list[str]]:
    """``[a, --next, b, c]`` -> ``[[a], [b, c]]``."""
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == SEPARATOR:
            groups.append([])
        else:
            groups[-1].append(arg)
    return groups


def run_folder(root: Path | str, index: int) -> Path:
    """Where run ``index`` of a sweep job writes its metrics."""
    return Path(root) / RUN_FOLDER.format(index)


def plan(argv: list[str]) -> list[TrainConfig]:
    """The configurations of every group, each with its ``out``; a ValueError names the bad group."""
    configs = []
    for index, group in enumerate(split_groups(argv)):
        try:
            config = parse_args(group)
            validate(config)
        except SystemExit as error:  # argparse has printed the problem
            raise ValueError(f"run {index}: unknown or malformed option in {' '.join(group)!r}") from error
        except ValueError as error:
            raise ValueError(f"run {index}: {error}") from error
        configs.append(config)
    root = resolve_run_dir(configs[0].out)
    return [c.replace(out=str(run_folder(root, i))) if c.out in (None, configs[0].out) else c
            for i, c in enumerate(configs)]


def main(argv: list[str] | None = None) -> int:
    try:
        configs = plan(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        print(f"coursekit.train.sweep: error: {error}", file=sys.stderr)
        return EXIT_CODES["config"]
    failed = 0
    for index, config in enumerate(configs):
        print(f"coursekit.train.sweep: run {index + 1}/{len(configs)} -> {config.out}", flush=True)
        try:
            status = train(config)["status"]
        except ConfigError as error:
            print(f"coursekit.train.sweep: run {index}: error: {error}", file=sys.stderr)
            return EXIT_CODES["config"]
        except Exception as error:  # noqa: BLE001 - the run's summary records it; the other runs go on
            print(f"coursekit.train.sweep: run {index} failed: {type(error).__name__}: {error}", file=sys.stderr)
            status = "failed"
        failed += status not in ("completed", "nan")
    return EXIT_CODES["failed"] if failed else EXIT_CODES["completed"]


if __name__ == "__main__":
    sys.exit(main())
