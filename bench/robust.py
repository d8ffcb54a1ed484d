"""What every benchmark does where its machine lacks something: say it in one line, keep what was measured.

The benchmarks run where they are run: a GPU machine without nvImageCodec, a CUDA-less node, fewer GPUs than
asked, a results folder that cannot be written. A missing optional part is reported in one plain line (what is
missing, what it means for the results, how to get it) and the script goes on with what it can measure; when
nothing can be measured it stops with that line and a non-zero status. Results are written before anything is
printed from them, and a value that may be None (a decoder that did not run) prints as ``n/a``: a print can
never lose a measurement.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

NOT_AVAILABLE = "n/a"


def script_name() -> str:
    """``bench/<script>.py`` of the running benchmark, for its messages."""
    return f"bench/{Path(sys.argv[0]).name}" if sys.argv and sys.argv[0].endswith(".py") else "bench"


def missing(what: str, meaning: str, how: str, script: str | None = None) -> str:
    """Say on stderr, in one line, that ``what`` is missing here, what it means for the results and how to get
    it; returns the line (to keep in the results)."""
    line = f"{what} is missing: {meaning}; {how}"
    print(f"{script or script_name()}: {line}", file=sys.stderr, flush=True)
    return line


def number(value: Any, spec: str = ".1f", why: str | None = None) -> str:
    """``value`` formatted with ``spec``; ``n/a`` (with ``why`` in brackets) where it is None or not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return f"{NOT_AVAILABLE} ({why})" if why else NOT_AVAILABLE


def check_writable(path: Path, option: str = "--out", script: str | None = None) -> None:
    """Stop now, with one line, when ``path`` cannot be written: not after the measurements."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            path.unlink()
    except OSError as error:
        raise SystemExit(f"{script or script_name()}: cannot write {path} ({error.strerror or error}): nothing was "
                         f"measured; give {option} a file in a folder you can write to") from error


def save_text(path: Path, text: str, script: str | None = None) -> Path:
    """Write ``text`` (the results) to ``path``; where that fails, to a file in the temporary folder instead, said
    on stderr: the measurements are never lost. Returns where they went."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path
    except OSError as error:
        handle, spare = tempfile.mkstemp(prefix=f"{path.stem}-", suffix=path.suffix or ".json")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"{script or script_name()}: cannot write {path} ({error.strerror or error}); the results are in "
              f"{spare} instead", file=sys.stderr, flush=True)
        return Path(spare)


def read_json(path: Path, what: str = "results file", script: str | None = None) -> Any:
    """The JSON in ``path``; a missing or unreadable file stops the script with one line, not a traceback."""
    path = Path(path)
    name = script or script_name()
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise SystemExit(f"{name}: {path}: no such {what}; give the path of one a benchmark wrote (its --out), "
                         "or run the benchmark first") from error
    except OSError as error:
        raise SystemExit(f"{name}: cannot read {path} ({error.strerror or error})") from error
    except ValueError as error:
        raise SystemExit(f"{name}: {path} is not a JSON {what} ({error}); was the run that wrote it cut short?") from error


def cuda_devices() -> int:
    """CUDA devices torch sees here (0 without torch, CUDA or a GPU)."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except RuntimeError:  # a broken driver: no usable device
        return 0


def require_cuda(smoke_option: str | None = "--cpu-smoke", script: str | None = None) -> None:
    """Stop with one line on stderr and status 2 when there is no CUDA GPU here: nothing to measure."""
    if cuda_devices() == 0:
        hint = f"; {smoke_option} checks the script on a CPU" if smoke_option else ""
        print(f"{script or script_name()}: no CUDA GPU here (torch sees none): nothing to measure; run it on a GPU "
              f"machine (source bench/setup_gpu.sh there){hint}", file=sys.stderr, flush=True)
        raise SystemExit(2)  # as the GPU benchmarks that check it themselves (ladder_gpu.py, large_batch_gpu.py)
