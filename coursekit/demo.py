"""``coursekit demo``: the main job, end to end, on the embedded default (no Slurm needed).

Submits a real PyTorch training job (the engine, ``python -m coursekit.train``) through coursekit's job
API, follows it to the end with its progress, reads its log and metrics back, and writes a plot.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from coursekit.metrics import epochs, step_figures, steps, summary
from coursekit.train.config import TrainConfig

DEMO_NAME = "demo"
DEMO_SITE = "local"
DEMO_OUTPUT = "demo-output"
DEMO_TIME_MAX = "00:15:00"
POLL_S = 1.0
LOG_LINES = 5
DEMO_CONFIG = TrainConfig(model="mlp", dataset="generated", num_samples=3000, epochs=4, batch_size=64, lr=0.05,
                          schedule="cosine", warmup_epochs=0.5, seed=0, log_every=10)


def _progress_line(job: Any, total_steps: int | None) -> str:
    records = job.metrics()
    last_step = steps(records)[-1] if steps(records) else None
    done = last_step["step"] if last_step else 0
    share = f"{done}/{total_steps} steps" if total_steps else f"{done} steps"
    loss = f"  loss {last_step['loss']:.3f}" if last_step else ""
    return f"  {job.state:<10} {share}{loss}"


def plot_run(records: list[dict[str, Any]], path: Path) -> Path:
    """Training loss per logged step and validation accuracy per epoch, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step_records, epoch_records = steps(records), epochs(records)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot([r["step"] for r in step_records], [r["loss"] for r in step_records], marker=".")
    left.set(xlabel="step", ylabel="training loss", title="loss")
    right.plot([r["epoch"] for r in epoch_records], [r["val_acc"] for r in epoch_records], marker="o", label="val")
    right.plot([r["epoch"] for r in epoch_records], [r["train_acc"] for r in epoch_records], marker="o", label="train")
    right.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1))
    right.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def run_demo(site: str = DEMO_SITE, output: str = DEMO_OUTPUT, config: TrainConfig = DEMO_CONFIG) -> int:
    """Submit, follow, read back, plot. Returns 0 when the job completed and its metrics are whole."""
    from coursekit.jobs.submit import submit_jobs

    command = " ".join(["-m", "coursekit.train", *config.to_args(), "--progress", "off"])
    print(f"coursekit demo: submitting `python -u {command}` (site {site})")
    (job,) = submit_jobs(command, n_gpu=1, name=DEMO_NAME, site=site, time_max=DEMO_TIME_MAX)
    print(f"  job {job.job_id}, folder {job.folder}")
    started, last = time.monotonic(), ""
    while not job.done():
        line = _progress_line(job, None)
        if line != last:
            print(line, flush=True)
            last = line
        time.sleep(POLL_S)
    state = job.wait()
    print(f"  {state} after {time.monotonic() - started:.1f} s")
    print(f"--- last {LOG_LINES} lines of {job.stdout}")
    print(job.tail(LOG_LINES))
    records = job.metrics()
    final = summary(records)
    if state != "COMPLETED" or final is None or final.get("status") != "completed":
        print(f"--- the job did not complete; stderr ({job.stderr}):\n{job.tail(20, stream='err')}")
        return 1
    figure = plot_run(records, Path(output) / "demo.png")
    last_epoch = epochs(records)[-1]
    print(f"--- metrics: {len(steps(records))} step and {len(epochs(records))} epoch records in {job.run_dir}")
    speed = step_figures(steps(records))  # images / wall time after warm-up (coursekit/metrics.py)
    print(f"  final validation accuracy {last_epoch['val_acc']:.1%} (chance: {1 / config.num_classes:.0%}), "
          f"{speed['images_per_s'] or 0:,.0f} img/s (windows spread ± {speed['images_per_s_std'] or 0:,.0f}) "
          f"on {final.get('device_name', '?')}")
    print(f"  plot: {figure}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coursekit demo", description=__doc__.splitlines()[0])
    parser.add_argument("--site", default=DEMO_SITE, help=f"site profile (default {DEMO_SITE}: no Slurm needed)")
    parser.add_argument("--output", default=DEMO_OUTPUT, help="folder for the plot")
    args = parser.parse_args(argv)
    return run_demo(args.site, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
