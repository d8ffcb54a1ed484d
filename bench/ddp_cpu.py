"""DDP on CPU processes (gloo) through torchrun: correctness for 1, 2 and 4 processes, and a timing table.

Each world size K trains the same MLP with a per-process batch of B/K, so the global batch B is the same
for every K: DDP's averaged gradient equals the one-process gradient and the final weights must agree
within floating-point tolerance. The table (serial -> DDP, as in the JSC course) shows images/s,
speed-up and efficiency; on a 2-core machine it shows the overhead of more processes than cores, not
GPU scaling (that run waits for a multi-GPU machine: issue 5).

    python bench/ddp_cpu.py --out bench/results/ddp_cpu.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from robust import check_writable, save_text  # noqa: E402

from coursekit.metrics import read_metrics, steps, summary, throughput  # noqa: E402
from coursekit.train.checkpoint import load_checkpoint  # noqa: E402

WORLD_SIZES = (1, 2, 4)
GLOBAL_BATCH = 32
TRAIN_ARGS = ["--model", "mlp", "--dataset", "generated", "--num-samples", "640", "--image-size", "16",
              "--num-classes", "4", "--epochs", "2", "--lr", "0.05", "--checkpoint-every", "100000",
              "--log-every", "5", "--progress", "off", "--device", "cpu"]
WEIGHT_RTOL, WEIGHT_ATOL = 1e-4, 1e-6
RDZV_PORT = 29511


def run(world: int, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(world),
               "--master_port", str(RDZV_PORT + world), "-m", "coursekit.train", *TRAIN_ARGS,
               "--batch-size", str(GLOBAL_BATCH // world), "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, check=False, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:  # recorded, said in one line: the other world sizes are still measured
        tail = (done.stderr or done.stdout).strip().splitlines()
        print(f"bench/ddp_cpu.py: {world} process(es) failed (exit {done.returncode}): "
              f"{tail[-1] if tail else 'no output'}", file=sys.stderr, flush=True)
        return {"world_size": world, "per_process_batch": GLOBAL_BATCH // world, "failed": True,
                "exit_code": done.returncode, "error": "\n".join(tail[-20:])}
    records = read_metrics(out)
    rate, spread = throughput(steps(records), skip=1)  # images / wall time; first window: start-up
    return {"world_size": world, "per_process_batch": GLOBAL_BATCH // world,
            "img_s": {"mean": rate, "std": spread},
            "final_loss": steps(records)[-1]["loss"], "val_acc": summary(records)["val_acc"]}


def max_weight_difference(reference: Path, other: Path) -> float:
    ref, oth = load_checkpoint(reference)["model"], load_checkpoint(other)["model"]
    return max(float((ref[k] - oth[k]).abs().max()) for k in ref)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    check_writable(args.out)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for world in WORLD_SIZES:
            rows.append(run(world, Path(scratch) / f"w{world}"))
        base_row = rows[0] if not rows[0].get("failed") else None  # the weights of 1 process: the reference
        for row in rows:
            if row.get("failed") or base_row is None:
                row["weights_equal"] = False if row.get("failed") else None
                continue
            ref, other = Path(scratch) / "w1", Path(scratch) / f"w{row['world_size']}"
            ref_w, oth_w = load_checkpoint(ref)["model"], load_checkpoint(other)["model"]
            row["max_weight_diff_vs_1"] = max_weight_difference(ref, other)
            row["weights_equal"] = all(torch.allclose(oth_w[k], v, rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL)
                                       for k, v in ref_w.items())
    base = base_row["img_s"]["mean"] if base_row else None
    for row in rows:
        if base and not row.get("failed"):
            row["speedup"] = row["img_s"]["mean"] / base
            row["efficiency"] = row["speedup"] / row["world_size"]
    result = {"cpus": os.cpu_count(), "torch": torch.__version__, "backend": "gloo", "global_batch": GLOBAL_BATCH,
              "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "command": "python bench/ddp_cpu.py " + " ".join(sys.argv[1:]), "rows": rows}
    written = save_text(args.out, json.dumps(result, indent=2) + "\n")  # first: the table below cannot lose it
    print(f"{'processes':>9} {'batch/proc':>10} {'img/s':>16} {'speed-up':>8} {'efficiency':>10} {'weights = 1 proc':>17}")
    for row in rows:
        if row.get("failed") or "speedup" not in row:
            print(f"{row['world_size']:>9} {row['per_process_batch']:>10} "
                  + ("failed: " + (row.get("error") or "no output").splitlines()[-1][:100] if row.get("failed") else
                     "n/a (the 1-process run, the reference, failed)"))
            continue
        print(f"{row['world_size']:>9} {row['per_process_batch']:>10} "
              f"{row['img_s']['mean']:>9.0f} ± {row['img_s']['std']:<5.0f} {row['speedup']:>8.2f} "
              f"{row['efficiency']:>10.2f} {str(row['weights_equal']):>8} (max |Δw| {row['max_weight_diff_vs_1']:.1e})")
    return 0 if all(row["weights_equal"] for row in rows) and written == args.out else 1


if __name__ == "__main__":
    raise SystemExit(main())
