"""Several engine runs in one process: ``python -m coursekit.train.sweep ARGS [--next ARGS ...]``.

Each group of arguments is exactly one ``python -m coursekit.train`` run (the same options); the runs go
one after the other in this process, so that tiny runs (the labs' cpu profiles) do not each pay the
start-up of Python and torch (~3 s, ten times a tiny run). Every group is parsed and checked before the
first run starts. Run ``i`` writes its ``metrics.jsonl`` into ``<folder>/run<i>`` (``run000``, ...),
``<folder>`` being the job's run folder (``--out`` of the first group, else the job's, else
``runs/<timestamp>``); a group with its own ``--out`` keeps it.

Launched as several processes (torchrun, srun, submitit's local tasks: ``coursekit.launch.launch_info``),
the sweep joins the process group once, before the first run, and leaves it after the last: the engine
leaves a group it did not create as it is, so that no rank joins the next run's rendezvous while another
still leaves the last one's. There the first run that fails ends the sweep (every rank stops; a rank that
went on would wait for the others in the next run's collectives). In one process a failed run is
reported and the next runs still go.

Exit codes: 0 every run ended (completed, or stopped on a NaN loss, which its summary records),
1 a run failed, 2 a bad configuration (nothing ran, or nothing after it).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

from coursekit.launch import launch_info
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig, parse_args
from coursekit.train.engine import EXIT_CODES, ConfigError, resolve_run_dir, train
from coursekit.train.parallel.process_group import cleanup, init_distributed

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
    """Run every group of ``argv`` (default: the command line) as one engine run; the exit code above."""
    try:
        configs = plan(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        return _config_error(str(error))
    if launch_info().world_size == 1:
        return _run_each(configs)
    devices = sorted({config.device for config in configs})
    if len(devices) > 1:
        return _config_error(f"--device differs between runs ({', '.join(devices)}): the runs of a sweep on "
                             "several processes share one process group, so give them one device")
    try:
        init_distributed(configs[0].device)
    except ValueError as error:  # a world size the job was not submitted for, a missing GPU
        return _config_error(str(error))
    try:
        return _run_until_one_fails(configs)
    finally:
        gc.collect()  # free DDP's reducer (in reference cycles) and its gloo work before the group goes
        cleanup()


def _config_error(message: str) -> int:
    print(f"coursekit.train.sweep: error: {message}", file=sys.stderr)
    return EXIT_CODES["config"]


def _announce(index: int, configs: list[TrainConfig]) -> None:
    print(f"coursekit.train.sweep: run {index + 1}/{len(configs)} -> {configs[index].out}", flush=True)


def _release_memory() -> None:
    """What a finished run leaves (tensors in reference cycles, an out-of-memory error's frames, the allocator's
    cache) goes before the next run starts: its peak memory is then its own, as in a process of its own."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _run_each(configs: list[TrainConfig]) -> int:
    """One process: every run, a failed one reported and the next ones still run."""
    failed = 0
    for index, config in enumerate(configs):
        _announce(index, configs)
        try:
            status = train(config)["status"]
        except ConfigError as error:
            return _config_error(f"run {index}: {error}")
        except Exception as error:  # noqa: BLE001 - the run's summary records it; the other runs go on
            print(f"coursekit.train.sweep: run {index} failed: {type(error).__name__}: {error}", file=sys.stderr)
            status = "failed"
        _release_memory()
        failed += status not in ("completed", "nan")
    return EXIT_CODES["failed"] if failed else EXIT_CODES["completed"]


def _run_until_one_fails(configs: list[TrainConfig]) -> int:
    """Several processes, in the process group main() joined: the runs in turn, up to the first that fails
    (its error, raised on a rank, ends that rank; its peers fail in their next collective or are stopped by
    the launcher)."""
    for index, config in enumerate(configs):
        _announce(index, configs)
        try:
            status = train(config)["status"]
        except ConfigError as error:  # the same on every rank: the configuration is
            return _config_error(f"run {index}: {error}")
        gc.collect()  # the run's DDP reducer and gloo work go before the next run's
        if status not in ("completed", "nan"):
            print(f"coursekit.train.sweep: run {index} ended {status}: the runs after it do not start",
                  file=sys.stderr)
            return EXIT_CODES["failed"]
    return EXIT_CODES["completed"]


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # every file is written: skip the interpreter's teardown of torch (seconds on a busy CPU)
