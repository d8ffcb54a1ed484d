"""``coursekit demo``: the main job, end to end, on the embedded default (no Slurm needed).

Submits a real PyTorch training job (the engine, ``python -m coursekit.train``) through coursekit's job
API, follows it to the end with its progress, reads its log and metrics back, and writes a plot.
"""

from __future__ import annotations

import argparse
import sys
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
# --data fashion-mnist: the same job on all 60,000 real training images (~10 s on two CPU cores), validated on the
# 10,000 test images
FASHION_CONFIG = DEMO_CONFIG.replace(dataset="fashion-mnist", num_samples=None, log_every=100)
DEMO_DATA = {"generated": DEMO_CONFIG, "fashion-mnist": FASHION_CONFIG}


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


def data_config(data: str, data_dir: str | None = None) -> TrainConfig:
    """The demo's job on ``data`` ("generated" or "fashion-mnist", read from ``data_dir`` or Debian's folder);
    a ValueError that names --data or --data-dir when the data is not there, before anything is submitted."""
    if data not in DEMO_DATA:
        raise ValueError(f"--data {data}: choose one of {', '.join(DEMO_DATA)}")
    if data == "generated":
        if data_dir is not None:
            raise ValueError("--data-dir is for --data fashion-mnist: the generated images are made by the job")
        return DEMO_CONFIG
    from coursekit.train.data import fashion_mnist

    try:
        folder = fashion_mnist.data_folder(data_dir)
    except ValueError as error:
        raise ValueError(f"--data fashion-mnist: {error}") from None
    return FASHION_CONFIG.replace(data_dir=str(folder))


def data_words(config: TrainConfig) -> str:
    """What the accuracy was measured on, and so what it is evidence of."""
    if config.dataset == "generated":
        return (f"on {config.num_samples:,} generated images: a stand-in made to be learnable, so this accuracy says "
                "the job ran end to end, not how good a model is (`coursekit demo --data fashion-mnist` trains on "
                "real images)")
    return f"on Fashion-MNIST's test images (real data, {config.data_dir})"


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
    print(f"  final validation accuracy {last_epoch['val_acc']:.1%} (chance: {1 / config.num_classes:.0%}) "
          f"{data_words(config)}")
    print(f"  {speed['images_per_s'] or 0:,.0f} img/s (windows spread ± {speed['images_per_s_std'] or 0:,.0f}) "
          f"on {final.get('device_name', '?')}")
    print(f"  plot: {figure}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coursekit demo", description=__doc__.splitlines()[0])
    parser.add_argument("--site", default=DEMO_SITE, help=f"site profile (default {DEMO_SITE}: no Slurm needed)")
    parser.add_argument("--output", default=DEMO_OUTPUT, help="folder for the plot")
    add_data_arguments(parser)
    args = parser.parse_args(argv)
    return run_demo_on(args.site, args.output, args.data, args.data_dir)


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """--data and --data-dir, for ``coursekit demo`` and ``python -m coursekit.demo``."""
    parser.add_argument("--data", default="generated", choices=list(DEMO_DATA),
                        help="generated (default: made by the job, a smoke test) or fashion-mnist (real images: "
                             "Debian's dataset-fashion-mnist, or --data-dir)")
    parser.add_argument("--data-dir", default=None, help="with --data fashion-mnist: the folder holding its files")


def run_demo_on(site: str, output: str, data: str, data_dir: str | None) -> int:
    """The demo on ``data``; exit code 2 with the reason when the data is not there (nothing is submitted)."""
    try:
        config = data_config(data, data_dir)
    except ValueError as error:
        print(f"coursekit demo: {error}", file=sys.stderr)
        return 2
    return run_demo(site, output, config)


if __name__ == "__main__":
    raise SystemExit(main())
