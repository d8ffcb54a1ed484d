"""CPU figures of the CI configurations: the engine's throughput on the small profiles the labs use in CI.

    python bench/ci_cpu.py --out bench/results/cpu_ci.json

Each configuration runs in test mode (no validation) for ``--repeats`` timed windows of ``--steps``
steps after one warm-up window; images/s are mean ± std over the windows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from robust import check_writable, save_text  # noqa: E402

from coursekit.metrics import read_metrics, steps, throughput  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402
from coursekit.train.engine import train  # noqa: E402

TIMED_STEPS = 10
REPEATS = 3
CI_CONFIGS: dict[str, TrainConfig] = {
    "mlp generated 32px b64 fp32": TrainConfig(model="mlp", dataset="generated", batch_size=64),
    "mlp generated 32px b64 bf16": TrainConfig(model="mlp", dataset="generated", batch_size=64, precision="bf16"),
    "resnet18 generated 32px b64 fp32": TrainConfig(model="resnet18", dataset="generated", batch_size=64),
    "resnet18 generated 32px b64 bf16+cl": TrainConfig(model="resnet18", dataset="generated", batch_size=64,
                                                        precision="bf16", channels_last=True),
    "wide_resnet generated 32px b64 fp32": TrainConfig(model="wide_resnet", dataset="generated", batch_size=64),
    "linear line b16": TrainConfig(model="linear", dataset="line", batch_size=16, lr=0.01),
    "pointnet pointclouds b32": TrainConfig(model="pointnet", dataset="pointclouds", batch_size=32),
}


def measure(config: TrainConfig, repeats: int, timed_steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        total = (1 + repeats) * timed_steps
        train(config.replace(out=out, test_steps=total, log_every=timed_steps, progress="off", device="cpu"))
        records = steps(read_metrics(out))
    rate, spread = throughput(records, skip=1)  # images / wall time (coursekit/metrics.py); first window warm-up
    return {"mean": rate, "std": spread, "n": len(records) - 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--steps", type=int, default=TIMED_STEPS)
    args = parser.parse_args(argv)
    check_writable(args.out)
    rows: list[dict[str, Any]] = []
    result = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/ci_cpu.py " + " ".join(sys.argv[1:]), "results": rows}
    written = args.out
    for label, config in CI_CONFIGS.items():
        rate = measure(config, args.repeats, args.steps)
        rows.append({"config": label, "args": config.to_args(), "img_s": rate})
        result["date"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        written = save_text(args.out, json.dumps(result, indent=2) + "\n")  # each row before its line
        print(f"{label:<40} {rate['mean']:9.0f} ± {rate['std']:6.0f} samples/s", flush=True)
    return 0 if written == args.out else 1


if __name__ == "__main__":
    raise SystemExit(main())
