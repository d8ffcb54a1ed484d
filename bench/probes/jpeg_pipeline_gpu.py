"""Where the GPU-JPEG pipeline loses against synthetic data: the pipeline's own knobs, each run repeated.

bench/jpeg_decode_gpu.py measured (H100, 2026-11-26) synthetic 3,983 img/s, torchvision nvjpeg through the
pipeline 3,408 (0.86x), but synthetic training beside a thread that decodes the same JPEGs from memory 3,876
(0.97x) while that thread decoded 5,710 img/s: the overlap itself works. The first probe (2026-11-26: prefetch
depth, pin-memory thread, worker count; 0.86-0.88x each) did not find the loss. What its runs had and the
diagnostic thread had not: an epoch boundary every 50 steps (12,800 images, batch 256), where the decoding
thread stopped, and the next epoch started with an empty pipeline. ``GpuDecodedBatches`` now runs into the
next epoch, over a loader whose workers do not stop between epochs (``jpeg.EndlessEpochs``). This compares
the designs and prints each run's 20-step windows and its wait for each epoch's first batch, so that a loss
shows where it happens. Measured 2026-11-26 (H100, 2 runs each; bench/REPORT-gpu.md):
first design 0.86x; running into the next epoch over a loader restarted each epoch 0.87-0.90x, the windows
with an epoch boundary still lower; over the endless loader 0.92x, flat windows; a threaded file reader instead
of worker processes 0.83-0.89x (reverted).

    CUDA_VISIBLE_DEVICES=0 python bench/probes/jpeg_pipeline_gpu.py --jpeg-dir /tmp/jpegs --out probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jpeg_decode_gpu as bench  # noqa: E402
from robust import number  # noqa: E402

from coursekit.train import data
from coursekit.train.data import jpeg  # noqa: E402

TIMED_WINDOWS = 6
VARIANTS: dict[str, dict[str, Any]] = {  # loader options; GpuDecodedBatches' prefetch / run_ahead / sync; endless
    "one epoch at a time (first design)": {"run_ahead": False, "endless": False},
    "runs into the next epoch, loader restarted each epoch": {"endless": False},
    "runs into the next epoch, endless loader (now)": {},
    "endless loader, no pin-memory thread": {"pin_memory": False, "non_blocking": False},
}
PIPELINE_OPTIONS = ("prefetch", "run_ahead", "sync")


def with_pipeline(prefetch: int = jpeg.PREFETCH_BATCHES, run_ahead: bool | None = None, sync: bool = False) -> None:
    """Make every GpuDecodedBatches of this process decode ``prefetch`` batches ahead, run into the next epoch
    or not (None: its default), and wait for each batch's kernels (as the diagnostic thread does) or not."""
    batches = jpeg.GpuDecodedBatches
    init = batches.__dict__.get("_original_init") or batches.__init__
    decode = batches.__dict__.get("_original_decode") or batches._decode
    batches._original_init, batches._original_decode = init, decode  # type: ignore[attr-defined]

    def patched_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "prefetch": prefetch, "run_ahead": run_ahead})

    def patched_decode(self: Any, *args: Any) -> Any:
        out = decode(self, *args)
        if sync and self.device.type == "cuda":
            import torch

            torch.cuda.current_stream(self.device).synchronize()
        return out

    batches.__init__ = patched_init  # type: ignore[method-assign]
    batches._decode = patched_decode  # type: ignore[method-assign]


def with_endless(endless: bool) -> None:
    """Make the engine's GPU-decoding train loader endless (as it is) or end with each epoch (before)."""
    make = data.__dict__.get("_original_make_loader") or data.make_loader
    data._original_make_loader = make  # type: ignore[attr-defined]
    data.make_loader = lambda *args, **kwargs: make(*args, **{**kwargs, "endless": endless and kwargs.get("endless")})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jpeg-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = args.jpeg_dir
    if not (root / "train").is_dir():
        jpeg.write_synthetic_jpeg_tree(root, bench.CLASSES, bench.IMAGES_PER_CLASS, workers=os.cpu_count() or 1)
    steps = (bench.WARMUP_WINDOWS + TIMED_WINDOWS) * bench.WINDOW_STEPS
    loader = dict(dataset="jpeg_folder", data_dir=str(root), workers=bench.WORKERS, pin_memory=True,
                  non_blocking=True, persistent_workers=True, gpu_decode=True)
    rates: dict[str, list[float]] = {"synthetic": []}
    rates.update({name: [] for name in VARIANTS})
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in rates}
    steps_per_epoch = len(list((root / "train").glob("*/*.jpg"))) // bench.BATCH
    for repeat in range(args.repeats):
        row = bench.run(bench.config(dataset="synthetic", gpu_resident=True, test_steps=steps))
        rates["synthetic"].append(row["img_s"])
        runs["synthetic"].append(row)
        for name, variant in VARIANTS.items():
            options = dict(variant)
            with_pipeline(**{key: options.pop(key) for key in PIPELINE_OPTIONS if key in options})
            with_endless(options.pop("endless", True))
            row = bench.run(bench.config(**{**loader, **options}, test_steps=steps), "torchvision")
            rates[name].append(row["img_s"])
            runs[name].append(row)
            # the run's record first (a print cannot lose it), then its line
            args.out.write_text(json.dumps({"rates": rates, "timed_windows": TIMED_WINDOWS, "runs": runs,
                                            "steps_per_epoch": steps_per_epoch}, indent=1))
            windows = " ".join(f"{rate:,.0f}" for rate in row["window_img_s"])
            first = " ".join(f"{s:.2f}" for s in (row.get("loader_phases") or {}).get("first_batch_s") or [])
            print(f"[{repeat + 1}/{args.repeats}] {name:<55} {number(row['img_s'], '8.0f')} img/s  windows {windows}  "
                  f"first batch of each epoch (s) {first or 'n/a'}", flush=True)
    measured = {name: [v for v in values if v is not None] for name, values in rates.items()}
    synthetic = statistics.fmean(measured["synthetic"]) if measured["synthetic"] else None
    for name, values in measured.items():
        if not values:
            print(f"{name:<45} n/a (no run recorded a timed window)", flush=True)
            continue
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        mean = statistics.fmean(values)
        print(f"{name:<45} {mean:8.0f} ± {std:5.0f} img/s  x{number(mean / synthetic if synthetic else None, '.2f')}",
              flush=True)


if __name__ == "__main__":
    main()
