"""``--publish``: write the recording the labs read on a CPU from a benchmark's result JSON.

The labs show GPU figures from package data, ``coursekit/labs/recordings/<name>.json``; nothing in coursekit
reads ``bench/``. A benchmark that feeds a lab (``ladder_gpu.py`` -> ``gpu_ladder``, ``ddp_gpu.py`` ->
``ddp_gpu``, ``model_parallel_gpu.py`` -> ``model_parallel_gpu``, ``large_batch_gpu.py`` -> ``large_batch_gpu``)
writes its JSON where ``--out`` says (``bench/results/`` by default, what its report is generated from) and,
with ``--publish``, the recording too, through ``coursekit.labs.kit.recorded.publish`` (which checks its
shape; ``python -m coursekit.labs.kit.recorded`` does the same by hand, merging parts of several runs).
Read the report before committing the recording: the notebooks' stored outputs quote it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "coursekit" / "labs" / "recordings"


def publish(result: Path, name: str, logs: dict[str, Path] | None = None, recordings: Path | None = None) -> Path:
    """Write recording ``name`` from ``result`` (with text ``logs`` kept in it) to ``<recordings>/<name>.json``
    (default: the package's recordings); return that path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from coursekit.labs.kit.recorded import publish as write_recording

    folder = recordings or RECORDINGS
    folder.mkdir(parents=True, exist_ok=True)
    target = write_recording(name, result, logs=logs or None, out=folder / f"{name}.json")
    print(f"published {result} as the labs' recording {target}", flush=True)
    return target
