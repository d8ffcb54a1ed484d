"""Pick lab 07's gpu profile on a GPU: a few candidate designs, seed 0, the runs that decide the claims.

Each candidate changes the gpu settings of lab 07 (training images, epochs, small and large batch); the probe
runs, in this process and one after the other, the table's SGD / SGD + linear + warm-up / AdamW / LARS / LAMB
at both batches (equal epochs), SGD + linear + warm-up at equal steps, the warm-up demo, and (first candidate
only) the noise-scale run; it prints each run's validation accuracy, steps and wall time as it ends.

    CUDA_VISIBLE_DEVICES=0 python bench/probes/lab07_profile_gpu.py --budget-s 300
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from coursekit.labs import lab07_large_batch as lb
from coursekit.labs import lab_settings
from coursekit.labs.kit.datasets import cifar10_or_standin
from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.settings import Settings
from coursekit.train.engine import train

# name -> (training images, epochs, small batch, large batch, table methods at equal epochs)
CANDIDATES: dict[str, tuple[int, int, int, int]] = {
    "20k x 2 ep, 128 vs 512": (20_000, 2, 128, 512),
    "10k x 4 ep, 128 vs 512": (10_000, 4, 128, 512),
    "20k x 2 ep, 128 vs 1024": (20_000, 2, 128, 1024),
}


def candidate_settings(images: int, epochs: int, small: int, large: int) -> Settings:
    values: dict[str, Any] = dict(lab_settings("07", "gpu"))
    # CIFAR-10's first ``images``, or the stand-in of that size where CIFAR-10 is not staged (as the lab does)
    base, _ = cifar10_or_standin(values["base"].replace(dataset="cifar10", data_dir=data_dir(), num_samples=images,
                                                        epochs=epochs, val_every_epochs=epochs * large // small))
    values.update(base=base, small_batch=small, large_batch=large, ghost_batch=small)
    return Settings("07", "gpu", values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args()
    start = time.perf_counter()
    out = tempfile.mkdtemp(prefix="lab07-probe-")
    for index, (name, design) in enumerate(CANDIDATES.items()):
        s = candidate_settings(*design)
        keep = [r for r in lb.plan(s) if r.tags["seed"] == 0 and (
            (r.tags["experiment"] == "table" and r.tags["budget"] == "epochs")
            or (r.tags["experiment"] == "table" and r.tags["method"] == "sgd+linear+warmup")
            or r.tags["experiment"] == "warmup" or (r.tags["experiment"] == "noise" and index == 0))]
        print(f"== {name}: {len(keep)} runs", flush=True)
        for i, run in enumerate(keep):
            if time.perf_counter() - start > args.budget_s:
                print("budget spent", flush=True)
                return
            t0 = time.perf_counter()
            summary = train(run.config.replace(out=f"{out}/{index}-{i}"))
            tags = run.tags
            print(f"{tags['experiment']:>8} {tags['method']:>18} {tags['batch_size']:>5} {tags['budget']:>6} "
                  f"val_acc {summary.get('val_acc', float('nan')):.3f} steps {summary.get('steps')} "
                  f"loss {summary.get('train_loss', float('nan')):.3f} {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
