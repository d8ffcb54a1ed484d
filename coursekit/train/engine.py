"""The training engine every lab calls: ``train(cfg) -> summary``, ``python -m coursekit.train``, and
``TrainingJob(cfg)``, the submitit job that requeues itself as a resume on a Slurm timeout.

Order of work: check the configuration (a ``ConfigError`` before anything is done), join the process
group, choose the run folder, build data, model, precision, DDP, optimizer and schedule, resume from the
folder's checkpoint when asked, run the loop (``loop.py``), then write the summary record.
Exit codes of ``main``: 0 completed, 1 failed, 2 bad configuration, 3 NaN loss.
"""

from __future__ import annotations

import datetime
import gc
import math
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coursekit.metrics import GPU_SAMPLES_FILE, MetricsWriter, default_run_dir, step_figures
from coursekit.train.checkpoint import load_checkpoint
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig, parse_args
from coursekit.train.data import build_data, shutdown_workers
from coursekit.train.loop import Trainer
from coursekit.train.memory import estimate_memory
from coursekit.train.models import build_model
from coursekit.train.optim import build_optimizer
from coursekit.train.parallel import ParallelContext, build_context, mesh_sizes, strategy_module
from coursekit.train.parallel.process_group import (
    DistContext,
    broadcast_object,
    cleanup,
    init_distributed,
    reduce_values,
    unwrap_model,
)
from coursekit.train.parallel.summary import parallel_summary
from coursekit.train.precision import setup_precision
from coursekit.train.probes import check_loggable
from coursekit.train.profiling import GpuMonitor
from coursekit.train.report import Console, system_info
from coursekit.train.schedule import build_scheduler

try:
    from submitit.helpers import Checkpointable, DelayedSubmission
except ImportError:  # submitit is a coursekit dependency; without it (a bare GPU box) the engine still runs
    Checkpointable, DelayedSubmission = object, None

RUNS_FOLDER = "runs"
EXIT_CODES = {"completed": 0, "failed": 1, "config": 2, "nan": 3}
MIB = 2**20
DEFAULT_JOB_CHECKPOINT_EVERY = 100  # optimiser steps between checkpoints of a requeueable job (TrainingJob)
# Settings that may change between a run and its resume (they do not change the trajectory).
RESUME_MAY_CHANGE = ("out", "resume", "progress", "profile", "profile_steps", "log_every", "epochs", "steps",
                     "test_steps", "checkpoint_every", "workers", "pin_memory", "prefetch_factor",
                     "persistent_workers", "non_blocking", "device", "log_params", "grad_noise_batches",
                     "trust_ratio_every", "bucket_cap_mb", "sync_every_micro_batch", "save_weights", "stage_delay_ms")


class ConfigError(ValueError):
    """The configuration cannot run here; nothing was trained (exit code 2)."""


def resolve_run_dir(out: str | None) -> Path:
    """``out``, else the job's folder (``coursekit.metrics.default_run_dir``), else ``runs/<timestamp>``."""
    if out:
        return Path(out)
    return default_run_dir() or Path(RUNS_FOLDER) / datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # CPU and every CUDA device


def _check_resume(cfg: TrainConfig, state: dict[str, Any], world_size: int) -> None:
    saved = state["config"]
    changed = [f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in cfg.to_dict().items()
               if k not in RESUME_MAY_CHANGE and saved.get(k) != v]
    if state.get("world_size") != world_size:
        changed.append(f"world size: {state.get('world_size')} -> {world_size}")
    if changed:
        raise ConfigError("resume: the checkpoint was written by a different run; change back "
                          + "; ".join(changed) + " (or use another --out)")


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Run one training and return its summary (the last metrics record)."""
    try:
        validate(cfg)
        ctx = init_distributed(cfg.device)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    try:
        try:
            validate(cfg, ctx)
        except ValueError as error:
            raise ConfigError(str(error)) from error
        return _run(cfg, ctx)
    finally:
        if ctx.owns_group:
            gc.collect()  # free DDP's reducer (in reference cycles) and its gloo work before the group goes
            cleanup()


def _run(cfg: TrainConfig, ctx: DistContext) -> dict[str, Any]:
    run_dir = Path(str(broadcast_object(str(resolve_run_dir(cfg.out)), ctx)))
    state = load_checkpoint(run_dir, map_location=ctx.device) if cfg.resume else None
    if state is not None:
        _check_resume(cfg, state, ctx.world_size)
    started = time.perf_counter()
    pctx = build_context(ctx, mesh_sizes(cfg, ctx.world_size))  # the mesh; which rank holds the run's values
    writer = MetricsWriter(run_dir, enabled=pctx.holds_value)
    if pctx.holds_value:
        print(f"coursekit.train: metrics -> {writer.path}", flush=True)
    writer.write("start", config=cfg.to_dict(), world_size=ctx.world_size, device=str(ctx.device),
                 launcher=ctx.launcher, run_dir=str(run_dir),
                 resumed_from_step=state["position"]["step"] if state else None)
    console: Console | None = None
    monitor = GpuMonitor(ctx.device)
    try:
        parts = _build(cfg, ctx, pctx)
        console = Console(pctx.holds_value, cfg.progress, parts["total_steps"])
        trainer = Trainer(cfg=cfg, ctx=ctx, writer=writer, console=console, run_dir=run_dir, **parts["trainer"])
        if state is not None:
            trainer.load_state_dict(state)
            writer.write("event", event="resumed", step=trainer.pos.step, epoch=trainer.pos.epoch + 1)
        console.print(_start_line(cfg, ctx, parts))
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        if pctx.holds_value:  # its GPU's samples, for a notebook following the run (metrics.GPU_SAMPLES_FILE)
            monitor.samples_path = run_dir / GPU_SAMPLES_FILE
        monitor.start()
        trainer.gpu_monitor = monitor  # energy and utilisation in the step records where NVML is present
        with warnings.catch_warnings():  # fp16's skipped first steps make torch warn about the LR scheduler order
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            status = trainer.run()
        # persistent workers stop here, not at interpreter exit (5 s per worker there: data.shutdown_workers)
        trainer.loader_phases["shutdown_s"] = shutdown_workers(trainer.data.train_loader, trainer.data.val_loader)
        if cfg.checkpoint_every and status == "completed":
            trainer.save()
        summary = _summary(cfg, ctx, trainer, status, parts, monitor, time.perf_counter() - started, run_dir)
    except SystemExit as error:  # asked to stop (Slurm time limit, preemption): a requeued job resumes
        monitor.summary()
        writer.write("event", event="stopped", message=f"process exit ({error.code}) during the run; a resumed "
                     "run continues from the last checkpoint")
        writer.close()
        raise
    except BaseException as error:
        monitor.summary()  # stops the sampling thread
        kind = "bad configuration: " if isinstance(error, ConfigError) else ""
        writer.write("summary", status="failed", error=f"{kind}{type(error).__name__}: {error}", config=cfg.to_dict(),
                     world_size=ctx.world_size, total_time_s=time.perf_counter() - started, run_dir=str(run_dir),
                     **system_info(ctx.device))
        writer.close()
        raise
    finally:
        if console is not None:
            console.close()
    writer.write("summary", **summary)
    writer.close()
    console.print(_end_line(summary))
    return summary


def _estimate(model: torch.nn.Module, cfg: TrainConfig, micro_batch: int, input_shape: tuple[int, ...]
              ) -> dict[str, Any]:
    """The memory calculator's estimate for this run (informative: an error is recorded, never raised)."""
    try:
        return estimate_memory(model, cfg.optimizer, cfg.precision, micro_batch, input_shape,
                               momentum=cfg.momentum).as_dict()
    except Exception as error:  # noqa: BLE001 - the estimate is informative; never stop a run for it
        return {"error": f"{type(error).__name__}: {error}"}


def _build(cfg: TrainConfig, ctx: DistContext, pctx: ParallelContext) -> dict[str, Any]:
    """Mesh, data, model, precision, parallel strategy, optimizer and schedule; bad input is a ConfigError.
    The ``--parallel`` strategy (coursekit/train/parallel/<module>.py) spreads the model (``apply``), and may
    build the data (``build_data``: a pipeline's) and the optimizer (``wrap_optimizer``: ZeRO-1's) its way."""
    seed_everything(cfg.seed)
    strategy = strategy_module(cfg.parallel)
    try:
        data_started = time.perf_counter()
        # each data-parallel rank reads its own shard
        data = getattr(strategy, "build_data", build_data)(cfg, pctx.data_shard())
        data_build_s = time.perf_counter() - data_started
        model = build_model(cfg, data.num_classes, data.input_shape)
        if cfg.log_params:
            check_loggable(model)
        precision = setup_precision(cfg.precision, ctx.device)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    micro_batch = cfg.batch_size // cfg.accumulation_steps
    if cfg.dataset == "tokens":  # the estimate runs the model on float images; a copy of a large GPT costs minutes
        estimate: dict[str, Any] | None = {"error": "not estimated for token models (see memory.sharded_memory)"}
    else:
        estimate = _estimate(model, cfg, micro_batch, data.input_shape)
    model = model.to(ctx.device)
    if ctx.device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick its fastest kernels
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    try:
        wrapped = strategy.apply(model, pctx, cfg)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    global_batch = cfg.batch_size * pctx.dp_size
    optimizer = build_optimizer(unwrap_model(wrapped), cfg, global_batch)
    wrap_optimizer = getattr(strategy, "wrap_optimizer", None)
    if wrap_optimizer is not None:  # ZeRO-1: the optimizer state sharded over the data-parallel ranks
        optimizer = wrap_optimizer(optimizer, pctx)
    steps_per_epoch = len(data.train_loader)
    total_steps = cfg.test_steps or cfg.steps or cfg.epochs * steps_per_epoch
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch, total_steps)
    run_model = torch.compile(wrapped) if cfg.compile else wrapped
    return {"trainer": {"run_model": run_model, "optimizer": optimizer, "scheduler": scheduler,
                        "precision": precision, "data": data, "total_steps": total_steps, "pctx": pctx,
                        "epochs": math.ceil(total_steps / steps_per_epoch)},
            "total_steps": total_steps, "steps_per_epoch": steps_per_epoch, "global_batch": global_batch,
            "data_build_s": data_build_s,
            "mesh": dict(pctx.sizes),
            "memory_estimate": estimate, "num_parameters": sum(p.numel() for p in model.parameters()),
            "sync_batchnorm_layers": sum(isinstance(m, torch.nn.SyncBatchNorm) for m in wrapped.modules())}


def _start_line(cfg: TrainConfig, ctx: DistContext, parts: dict[str, Any]) -> str:
    accumulation = f" in {cfg.accumulation_steps} micro-batches" if cfg.accumulation_steps > 1 else ""
    return (f"coursekit.train: {cfg.model} ({parts['num_parameters']:,} parameters) on {cfg.dataset}, "
            f"{ctx.world_size} process(es) on {ctx.device}, {cfg.precision}, batch {cfg.batch_size} x "
            f"{parts['mesh'].get('dp', ctx.world_size)} = {parts['global_batch']}{accumulation}, {parts['total_steps']} steps "
            f"({parts['steps_per_epoch']} per epoch)")


def _summary(cfg: TrainConfig, ctx: DistContext, trainer: Trainer, status: str, parts: dict[str, Any],
             monitor: GpuMonitor, total_time_s: float, run_dir: Path) -> dict[str, Any]:
    figures = step_figures(trainer.throughputs)  # the one definition of throughput and data share (metrics.py)
    rate, rate_std = figures["images_per_s"], figures["images_per_s_std"]
    rate_gpu = step_figures(trainer.throughputs, "images_per_s")["images_per_s"]
    last = trainer.last_epoch_record
    summary: dict[str, Any] = {
        "status": status, "config": cfg.to_dict(), "run_dir": str(run_dir), "world_size": ctx.world_size,
        "launcher": ctx.launcher, "device": str(ctx.device), **system_info(ctx.device),
        "total_time_s": total_time_s, "steps": trainer.pos.step, "epochs_completed": trainer.pos.epoch,
        "global_batch": parts["global_batch"], "images_per_epoch": _images_per_epoch(trainer, parts),
        "mesh": parts["mesh"], "num_parameters": parts["num_parameters"],
        "sync_batchnorm_layers": parts["sync_batchnorm_layers"],
        "images_per_s": rate, "images_per_s_std": rate_std, "images_per_s_per_gpu": rate_gpu,
        "data_fraction": figures["data_fraction"], "measured_steps": figures["measured_steps"],
        "train_loss": last.get("train_loss"), "train_acc": last.get("train_acc"),
        "val_loss": last.get("val_loss"), "val_acc": last.get("val_acc"),
        "memory_estimate": parts["memory_estimate"],
        "memory_estimate_total_mb": parts["memory_estimate"].get("total_bytes", 0) / MIB or None}
    summary["loader_phases"] = {"build_s": parts["data_build_s"], **trainer.loader_phases}
    decoder = getattr(trainer.data.train_loader, "decoder_name", None)  # --gpu-decode: which JPEG decoder ran
    if decoder:
        summary["jpeg_decoder"] = decoder
    summary["parallel"] = parallel_summary(cfg, parts["trainer"]["pctx"], trainer, summary,  # a collective
                                           strategy_module(cfg.parallel))
    if trainer.nan_message:
        summary["message"] = trainer.nan_message
    if trainer.target is not None:  # --target-acc: time to target, seed, hashes, GPUs (train/target.py)
        summary.update(trainer.target.summary(ctx.world_size))
    if ctx.device.type == "cuda":
        peaks = reduce_values([torch.cuda.max_memory_allocated(ctx.device), torch.cuda.max_memory_reserved(ctx.device)],
                              ctx, op="max")
        summary.update(mem_allocated_peak_mb=peaks[0] / MIB, mem_reserved_peak_mb=peaks[1] / MIB)
    if trainer.precision.scaler is not None:
        summary.update(loss_scale=trainer.precision.loss_scale(), skipped_steps=trainer.precision.skipped_steps())
    if trainer.trace is not None:
        summary["profile_dir"] = str(trainer.trace.folder)
        summary["profile_summary"] = str(trainer.trace.summary_path)
    gpu = monitor.summary()
    if gpu:
        summary["gpu"] = gpu
    return summary


def _images_per_epoch(trainer: Trainer, parts: dict[str, Any]) -> int:
    """The training set's size (what one epoch costs in energy: labs 02, 04, 06); else steps x global batch."""
    try:
        return len(trainer._train_dataset())
    except (TypeError, NotImplementedError):  # no dataset with a length behind the loader
        return parts["global_batch"] * parts["steps_per_epoch"]


def _end_line(summary: dict[str, Any]) -> str:
    rate = summary.get("images_per_s")
    rate_text = (f"{rate:,.0f} img/s over the {summary.get('measured_steps')} steps after warm-up "
                 f"(windows spread ± {summary['images_per_s_std']:,.0f})" if rate else "- img/s")
    return (f"coursekit.train: {summary['status']} after {summary['steps']} steps in {summary['total_time_s']:.1f} s, "
            f"{rate_text}, summary in {summary['run_dir']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m coursekit.train [options]``; returns the exit code (see the module docstring)."""
    cfg = parse_args(argv)
    try:
        summary = train(cfg)
    except ConfigError as error:
        print(f"coursekit.train: error: {error}", file=sys.stderr)
        return EXIT_CODES["config"]
    except KeyboardInterrupt:
        print("coursekit.train: interrupted", file=sys.stderr)
        return EXIT_CODES["failed"]
    return EXIT_CODES.get(summary["status"], EXIT_CODES["failed"])


# ----------------------------------------------------------------------------- submitit requeue


class TrainingJob(Checkpointable):
    """A training run as a submitit callable; on a Slurm timeout/preemption it requeues as a resume.

    ``executor.submit(TrainingJob(cfg))``: the job trains with periodic checkpoints in its run folder.
    When Slurm signals the end of the time limit, submitit calls :meth:`checkpoint`, which returns the
    same job set to ``resume`` from that folder; the requeued job continues from the last checkpoint.
    """

    def __init__(self, cfg: Any) -> None:
        if cfg.checkpoint_every is None:
            cfg = cfg.replace(checkpoint_every=DEFAULT_JOB_CHECKPOINT_EVERY)
        self.cfg = cfg
        self.run_dir: str | None = cfg.out

    def __call__(self) -> dict[str, Any]:
        if self.run_dir is None:
            self.run_dir = str(resolve_run_dir(self.cfg.out))
        return train(self.cfg.replace(out=self.run_dir))

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """The DelayedSubmission submitit requeues: this run, resuming from its folder."""
        if DelayedSubmission is None:
            raise RuntimeError("TrainingJob.checkpoint needs submitit (pip install submitit)")
        resumed = TrainingJob(self.cfg.replace(out=self.run_dir, resume=True))
        resumed.run_dir = self.run_dir
        return DelayedSubmission(resumed)
