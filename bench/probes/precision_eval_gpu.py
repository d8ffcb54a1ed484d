"""Why lab 04's bf16/fp16 runs validated far below fp32 on Fashion-MNIST (bench/REPORT-real-data.md).

One seed showed the same training loss for fp32, bf16 and fp16 (0.425 / 0.437 / 0.438) but validation
accuracy 0.854 / 0.392 / 0.302. This probe runs lab 04's gpu settings (ResNet-18, batch 256, 3 epochs,
constant LR 0.1) for each precision and several seeds, validating after every epoch in four ways:

- ``autocast``: what the engine does (eval mode, under the run's autocast);
- ``fp32``: eval mode without autocast (is it the low-precision forward?);
- ``recalibrated``: fresh BatchNorm running statistics from 50 training batches, then eval mode in fp32
  (is it the running statistics?);
- ``batch_stats``: train-mode BatchNorm on the validation batches (no running statistics at all).

::

    COURSEKIT_DATA_DIR=data python bench/probes/precision_eval_gpu.py --out /tmp/precision_eval.json
    python bench/probes/precision_eval_gpu.py --cpu-smoke --out /tmp/precision_eval_smoke.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from coursekit.train import loop  # noqa: E402
from coursekit.train.config import TrainConfig  # noqa: E402
from coursekit.train.engine import train  # noqa: E402

RECALIBRATION_BATCHES = 50
RECORDS: list[dict[str, Any]] = []
GPU = dict(model="resnet18", dataset="fashion-mnist", batch_size=256, epochs=3, lr=0.1, workers=8, pin_memory=True,
           persistent_workers=True, non_blocking=True, val_every_epochs=1, progress="off")
CPU_SMOKE = dict(model="resnet18", dataset="generated", num_samples=256, batch_size=64, epochs=1, lr=0.1, workers=0,
                 val_every_epochs=1, progress="off", device="cpu")  # the code path, not evidence


def _accuracy(model: torch.nn.Module, trainer: Any, autocast: bool, limit: int | None = None) -> float:
    correct = count = 0
    with torch.no_grad():
        for index, batch in enumerate(trainer.data.val_loader):
            if limit is not None and index >= limit:
                break
            inputs, targets = trainer._to_device(batch)
            context = trainer.precision.autocast() if autocast else torch.autocast(inputs.device.type, enabled=False)
            with context:
                output = model(inputs)
            correct += int((output.argmax(1) == targets).sum())
            count += len(targets)
    return correct / max(count, 1)


def _recalibrated(trainer: Any) -> torch.nn.Module:
    model = copy.deepcopy(trainer.model)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a plain average over the recalibration batches
    model.train()
    with torch.no_grad():
        for index, batch in enumerate(trainer.data.train_loader):
            if index >= RECALIBRATION_BATCHES:
                break
            inputs, _ = trainer._to_device(batch)
            with trainer.precision.autocast():
                model(inputs)
    return model.eval()


def evaluate_four_ways(self: Any) -> tuple[float | None, float | None]:
    loss, acc = ORIGINAL_EVALUATE(self)
    model = self.model
    model.eval()
    fp32 = _accuracy(model, self, autocast=False)
    model.train()
    batch_stats = _accuracy(model, self, autocast=False)  # train mode: BN uses each batch's statistics
    recalibrated = _accuracy(_recalibrated(self), self, autocast=False)
    model.train()
    RECORDS.append({"precision": self.cfg.precision, "seed": self.cfg.seed, "epoch": self.pos.epoch + 1,
                    "step": self.pos.step, "autocast": acc, "fp32": fp32, "recalibrated": recalibrated,
                    "batch_stats": batch_stats, "val_loss": loss})
    print(json.dumps(RECORDS[-1]), flush=True)
    return loss, acc


ORIGINAL_EVALUATE = loop.Trainer.evaluate
loop.Trainer.evaluate = evaluate_four_ways


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--precisions", default="fp32,bf16,fp16")
    parser.add_argument("--schedule", default="constant", help="the engine's --schedule (lab 04: constant)")
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    base = CPU_SMOKE if args.cpu_smoke else GPU
    data_dir = os.environ.get("COURSEKIT_DATA_DIR")
    runs = []
    for seed in range(args.seeds):
        for precision in args.precisions.split(","):
            started = time.monotonic()
            cfg = TrainConfig(**base, precision=precision, seed=seed, data_dir=data_dir, schedule=args.schedule,
                              out=f"/tmp/precision-eval/{precision}-{seed}")
            summary = train(cfg)
            runs.append({"precision": precision, "seed": seed, "train_loss": summary.get("train_loss"),
                         "val_acc": summary.get("val_acc"), "wall_s": round(time.monotonic() - started, 1)})
            print(json.dumps(runs[-1]), flush=True)
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
              "settings": {**base, "schedule": args.schedule}, "runs": runs, "evaluations": RECORDS}
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
