"""Where the GPU-JPEG pipeline loses against synthetic data: the pipeline's own knobs, each run repeated.

bench/gpu_jpeg_decode.py measured (H100, 2026-11-26) synthetic 3,983 img/s, torchvision nvjpeg through the
pipeline 3,408 (0.86x), but synthetic training beside a thread that decodes the same JPEGs from memory 3,876
(0.97x) while that thread decoded 5,710 img/s: the overlap itself works, so the loss is in the pipeline's
feeding (16 loader processes, the pin-memory thread, the prefetch depth) or in how far the decoding runs ahead
(the diagnostic thread waits for each batch). This runs each variant ``--repeats`` times in turn, with twice
the timed windows of the bench, and prints images/s mean ± std. Measured 2026-11-26 (first five variants):
0.86-0.88x, REPORT-gpu.md.

    CUDA_VISIBLE_DEVICES=1 python bench/dryrun/jpeg_probe.py --jpeg-dir /tmp/jpegs --out probe.json
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

import gpu_jpeg_decode as bench  # noqa: E402

from coursekit.train import jpeg  # noqa: E402

TIMED_WINDOWS = 6
VARIANTS: dict[str, dict[str, Any]] = {  # loader options, and "prefetch": batches decoded ahead
    "as the bench (16 workers, pinned, prefetch 4)": {},
    "no pin-memory thread": {"pin_memory": False, "non_blocking": False},
    "prefetch 8": {"prefetch": 8},
    "8 workers": {"workers": 8},
    "no pin-memory thread, prefetch 8": {"pin_memory": False, "non_blocking": False, "prefetch": 8},
    # as the diagnostic thread that kept 0.97x: one decoded batch in flight, the thread waiting for each
    "prefetch 1": {"prefetch": 1},
    "prefetch 1, thread waits for each batch": {"prefetch": 1, "sync": True},
}


def with_prefetch(depth: int) -> None:
    """Make every GpuDecodedBatches decode ``depth`` batches ahead (this process only)."""
    init = jpeg.GpuDecodedBatches.__dict__.get("_original_init") or jpeg.GpuDecodedBatches.__init__
    jpeg.GpuDecodedBatches._original_init = init  # type: ignore[attr-defined]

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **{**kwargs, "prefetch": depth})

    jpeg.GpuDecodedBatches.__init__ = patched  # type: ignore[method-assign]


def with_sync(wait: bool) -> None:
    """Make the decoding thread wait for each batch's kernels (as the diagnostic thread does), or not."""
    decode = jpeg.GpuDecodedBatches.__dict__.get("_original_decode") or jpeg.GpuDecodedBatches._decode
    jpeg.GpuDecodedBatches._original_decode = decode  # type: ignore[attr-defined]

    def patched(self: Any, encoded: Any, labels: Any) -> Any:
        out = decode(self, encoded, labels)
        if wait and self.device.type == "cuda":
            import torch

            torch.cuda.current_stream(self.device).synchronize()
        return out

    jpeg.GpuDecodedBatches._decode = patched  # type: ignore[method-assign]


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
    for repeat in range(args.repeats):
        rates["synthetic"].append(bench.run(bench.config(dataset="synthetic", gpu_resident=True, test_steps=steps))["img_s"])
        for name, variant in VARIANTS.items():
            options = dict(variant)
            with_prefetch(options.pop("prefetch", jpeg.PREFETCH_BATCHES))
            with_sync(options.pop("sync", False))
            row = bench.run(bench.config(**{**loader, **options}, test_steps=steps), "torchvision")
            rates[name].append(row["img_s"])
            print(f"[{repeat + 1}/{args.repeats}] {name:<45} {row['img_s']:8.0f} img/s", flush=True)
        args.out.write_text(json.dumps({"rates": rates, "timed_windows": TIMED_WINDOWS}, indent=1))
    synthetic = statistics.fmean(rates["synthetic"])
    for name, values in rates.items():
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{name:<45} {statistics.fmean(values):8.0f} ± {std:5.0f} img/s  "
              f"x{statistics.fmean(values) / synthetic:.2f}", flush=True)


if __name__ == "__main__":
    main()
