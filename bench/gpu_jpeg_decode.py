"""JPEG decoding on the GPU against synthetic data, in one process: torchvision's nvjpeg vs nvImageCodec's
hardware JPEG engines, both decoding in the loader's background thread (overlapping the training step).

ResNet-50 bf16 + channels_last, batch 256, the engine (``--gpu-decode``); the decoder is chosen with
``$COURSEKIT_JPEG_DECODER`` (``coursekit/train/jpeg.py``). Target: JPEG / synthetic >= 0.9. On the GPU
machine, with the nvImageCodec wheel carried along (``pip download nvidia-nvimgcodec-cu13`` here)::

    pip install nvidia_nvimgcodec_cu13-*.whl
    python bench/gpu_jpeg_decode.py --jpeg-dir /tmp/jpegs --out bench/results/gpu_jpeg_decode.json

Written without a GPU at hand: not yet run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coursekit.metrics import read_metrics, steps  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402

BATCH = 256
CLASSES, IMAGES_PER_CLASS = 32, 400  # 12,800 training JPEGs of 500 x 375
WORKERS = 16
WINDOW_STEPS = 20
WARMUP_WINDOWS = 1
WINDOWS = 3


def config(**changes: Any) -> TrainConfig:
    base = TrainConfig(model="resnet50", image_size=224, num_classes=CLASSES, batch_size=BATCH, precision="bf16",
                       channels_last=True, device="cuda", progress="off", log_every=WINDOW_STEPS,
                       test_steps=(WARMUP_WINDOWS + WINDOWS) * WINDOW_STEPS)
    return base.replace(**changes)


def run(cfg: TrainConfig, decoder: str | None = None) -> dict[str, Any]:
    """Images/s over the timed windows of one engine run (the first window is warm-up)."""
    import torch

    from coursekit.train.engine import train

    if decoder:
        os.environ["COURSEKIT_JPEG_DECODER"] = decoder
    try:
        with tempfile.TemporaryDirectory() as out:
            summary = train(cfg.replace(out=out))
            rates = [r["images_per_s_global"] for r in steps(read_metrics(out))[WARMUP_WINDOWS:]]
    finally:
        os.environ.pop("COURSEKIT_JPEG_DECODER", None)
        torch.cuda.empty_cache()
    return {"status": summary["status"], "img_s": statistics.fmean(rates),
            "img_s_std": statistics.stdev(rates) if len(rates) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jpeg-dir", type=Path, help="a JPEG tree (written there when empty)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    from coursekit.train.jpeg import write_synthetic_jpeg_tree

    root = args.jpeg_dir or Path(tempfile.mkdtemp(prefix="coursekit-jpeg-"))
    if not (root / "train").is_dir():
        write_synthetic_jpeg_tree(root, CLASSES, IMAGES_PER_CLASS, workers=os.cpu_count() or 1)
    jpeg = dict(dataset="jpeg_folder", data_dir=str(root), gpu_decode=True, workers=WORKERS, pin_memory=True,
                non_blocking=True, persistent_workers=True)
    rows = {"synthetic": run(config(dataset="synthetic", gpu_resident=True)),
            "torchvision nvjpeg": run(config(**jpeg), "torchvision")}
    try:
        rows["nvimgcodec hardware"] = run(config(**jpeg), "nvimgcodec")
    except Exception as error:  # noqa: BLE001 - the package or the hardware decoder may be absent: say so
        rows["nvimgcodec hardware"] = {"status": "not run", "error": f"{type(error).__name__}: {error}"}
    synthetic = rows["synthetic"]["img_s"]
    for name, row in rows.items():
        if row.get("img_s"):
            row["ratio_to_synthetic"] = row["img_s"] / synthetic
        print(f"{name:<22} {row.get('img_s', 0):8.0f} img/s  x{row.get('ratio_to_synthetic', 0):.2f}  "
              f"{row.get('error', '')}", flush=True)
    result = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/gpu_jpeg_decode.py " + " ".join(sys.argv[1:]), "batch": BATCH,
              "jpeg_tree": {"classes": CLASSES, "images_per_class": IMAGES_PER_CLASS}, "workers": WORKERS,
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
