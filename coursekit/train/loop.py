"""The training loop: micro-batches and optimiser steps, metric windows, validation, checkpoints.

The hot path does no host synchronisation: losses and correct counts accumulate in device tensors and
are read (and all-reduced across ranks) only when a step record is due (every ``log_every`` steps) and
at the end of an epoch. A non-finite loss is noticed there and stops the run.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from coursekit.metrics import MetricsWriter
from coursekit.train.checkpoint import (
    SHARDED_MARK,
    hyperparameters,
    load_sharded,
    loader_generators,
    remaining_batches,
    rng_state,
    save_checkpoint,
    save_sharded,
    set_rng_state,
)
from coursekit.train.noise import TwoBatchNoise
from coursekit.train.parallel import SHARDED_STRATEGIES
from coursekit.train.parallel.measure import gradient_bytes
from coursekit.train.parallel.process_group import DistContext, no_sync, reduce_values, unwrap_model
from coursekit.train.probes import layer_norms, noise_scale, parameter_values
from coursekit.train.profiling import GpuMonitor, StepTimer, TraceRecorder
from coursekit.train.report import Console
from coursekit.train.target import TargetRun

CHECKPOINT_FORMAT = 1
MIB = 2**20
NAN_ADVICE = "lower --lr, add --warmup-epochs, or use bf16 instead of fp16"


@dataclass
class Position:
    """Where the run is: optimiser steps done, epoch in progress (0-based), loader batches of it consumed."""

    step: int = 0
    epoch: int = 0
    batch: int = 0


def classification_loss(output: torch.Tensor, target: torch.Tensor, reduction: str = "mean",
                        label_smoothing: float = 0.0) -> torch.Tensor:
    if output.dim() == 3:  # token logits (batch, length, vocab): a sample's loss is the mean over its tokens
        per_token = F.cross_entropy(output.float().flatten(0, 1), target.flatten(), reduction="none")
        per_sample = per_token.view(target.shape).mean(1)
        return {"mean": per_sample.mean, "sum": per_sample.sum}.get(reduction, lambda: per_sample)()
    return F.cross_entropy(output.float(), target, reduction=reduction, label_smoothing=label_smoothing)


def correct_count(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Correct predictions; for token logits each sample counts the share of its tokens predicted right."""
    hits = (output.argmax(-1) == target).float()
    return hits.reshape(len(target), -1).mean(1).sum()


def regression_loss(output: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    return F.mse_loss(output.float().reshape(target.shape), target.float(), reduction=reduction)


class Trainer:
    """Runs the epochs of one configured run; ``run()`` returns "completed" or "nan"."""

    def __init__(self, *, cfg: Any, ctx: DistContext, run_model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: Any, precision: Any, data: Any, writer: MetricsWriter, console: Console,
                 run_dir: Any, total_steps: int, epochs: int, pctx: Any = None) -> None:
        self.cfg, self.ctx, self.run_model, self.model = cfg, ctx, run_model, unwrap_model(run_model)
        self.optimizer, self.scheduler, self.precision, self.data = optimizer, scheduler, precision, data
        self.writer, self.console, self.run_dir = writer, console, run_dir
        self.total_steps, self.epochs = total_steps, epochs
        self.device = ctx.device
        # --parallel: tp copies of the loss and earlier pipeline stages (no loss) do not count samples
        self.counts_samples = pctx is None or pctx.counts_samples
        self.pipeline_step = getattr(run_model, "pipeline_step", None)  # parallel/pipeline.py: the schedule
        self.sync_gradients = getattr(run_model, "sync_gradients", None)  # tensor/pipeline with dp > 1
        self.grad_bytes: int | None = None  # local gradient bytes of the last step (the summary's parallel block)
        self.sharded = pctx is not None and pctx.mesh is not None and cfg.parallel in SHARDED_STRATEGIES
        self.classification = data.task == "classification"
        self.loss_fn = classification_loss if self.classification else regression_loss
        smoothing = getattr(cfg, "label_smoothing", 0.0)
        self.train_loss_fn = partial(classification_loss, label_smoothing=smoothing) \
            if self.classification and smoothing else self.loss_fn  # validation and probes: the plain loss
        self.trust_ratios: list[dict[str, Any]] | None = None  # --trust-ratio-every: for the next step record
        self.noise = TwoBatchNoise(self.model, cfg.noise_every, cfg.noise_ema) \
            if getattr(cfg, "noise_every", 0) else None  # --noise-every: B_simple from the micro-batches
        self.timer = StepTimer(self.device)
        self.generators = loader_generators(data.train_loader)
        self.trace = TraceRecorder(run_dir, cfg.profile_steps, self.device.type == "cuda") \
            if cfg.profile and ctx.is_main else None
        self.pos = Position()
        self.epoch_rng: dict[str, Any] | None = None
        self.resume_state: dict[str, Any] | None = None
        self.throughputs: list[dict[str, Any]] = []  # step records' timing: metrics.step_figures
        self.gpu_monitor: GpuMonitor | None = None  # the engine's NVML sampler: energy and utilisation per record
        self._energy_mark: float | None = None  # this GPU's joules when the step window began
        self.last_epoch_record: dict[str, Any] = {}
        self.nan_message: str | None = None
        # where a loader's time goes beside the steps (summary's loader_phases; lab 05, bench/loader_overhead_gpu.py)
        self.loader_phases: dict[str, Any] = {"first_batch_s": [], "validation_s": 0.0}
        self.target = TargetRun(cfg, self.device, len(data.train_loader)) if cfg.target_acc is not None else None
        self.lr = optimizer.param_groups[0]["lr"]
        self._zeros = lambda: torch.zeros((), dtype=torch.float64, device=self.device)
        self._reset_epoch()
        self._reset_window()

    # ------------------------------------------------------------------ accumulators

    def _reset_window(self) -> None:
        self.window_loss, self.window_samples = self._zeros(), 0
        self.timer.begin_window()
        # the window's joules count from here, as its time does: not the evaluation between two epochs
        self._energy_mark = self.gpu_monitor.energy_j() if self.gpu_monitor is not None else None

    def _reset_epoch(self) -> None:
        self.epoch_loss, self.epoch_correct, self.epoch_samples = self._zeros(), self._zeros(), 0

    def _accumulators(self) -> dict[str, float]:
        return {"window_loss": float(self.window_loss), "window_samples": self.window_samples,
                "epoch_loss": float(self.epoch_loss), "epoch_correct": float(self.epoch_correct),
                "epoch_samples": self.epoch_samples}

    def _restore_accumulators(self, saved: dict[str, float]) -> None:
        self.window_loss.fill_(saved["window_loss"])
        self.epoch_loss.fill_(saved["epoch_loss"])
        self.epoch_correct.fill_(saved["epoch_correct"])
        self.window_samples, self.epoch_samples = int(saved["window_samples"]), int(saved["epoch_samples"])

    # ------------------------------------------------------------------ the loop

    def run(self) -> str:
        self.console.advance(0, start=self.pos.step)
        if self.target is not None:  # untimed warm-up, then the clock starts
            self.target.begin(self)
        try:
            while self.pos.epoch < self.epochs and self.pos.step < self.total_steps:
                if not self._epoch():
                    return "nan"
        finally:
            if self.trace is not None:
                self.trace.stop()
        return "completed"

    def _start_epoch(self) -> Any:
        """Seed the epoch's data order and return its batch iterator (resuming mid-epoch when asked)."""
        loader, sampler = self.data.train_loader, getattr(self.data, "train_sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.pos.epoch)
        self._reset_window()
        resume, self.resume_state = self.resume_state, None
        if resume is not None and self.pos.batch > 0:
            self.epoch_rng = resume["epoch_rng"]
            set_rng_state(self.epoch_rng, self.generators)
            iterator = remaining_batches(loader, self.pos.batch)
            set_rng_state(resume["rng"], self.generators)
            self._restore_accumulators(resume["accumulators"])
            return iterator
        if resume is not None:
            set_rng_state(resume["rng"], self.generators)
        self.pos.batch = 0
        self._reset_epoch()
        self.epoch_rng = rng_state(self.generators)
        return iter(loader)

    def _epoch(self) -> bool:
        started = time.perf_counter()
        iterator = self._start_epoch()
        samples_before = self.epoch_samples  # > 0 when this epoch was resumed from a checkpoint
        while self.pos.step < self.total_steps:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if self.epoch_samples == samples_before:  # the epoch's first batch: worker start or resume included
                self.loader_phases["first_batch_s"].append(time.perf_counter() - started)
            inputs, targets = self._to_device(batch)
            self.timer.batch_ready()
            self._train_step(inputs, targets)
            self.timer.step_done()
            self.pos.step += 1
            self.pos.batch += 1
            counted = len(inputs) if self.counts_samples else 0
            self.window_samples += counted
            self.epoch_samples += counted
            if self.trace is not None:
                self.trace.step()
            self.console.advance()
            if self.pos.step % self.cfg.log_every == 0 and not self._log_step():
                return False
            if self.cfg.checkpoint_every and self.pos.step % self.cfg.checkpoint_every == 0:
                self.save()
            if self.target is not None and self.target.due(self.pos.step):
                self.target.validate(self)  # outside the clock; reaching the target ends the loop
        del iterator
        finished = self.pos.batch >= len(self.data.train_loader)  # else the step budget ended it early
        ok = self._end_epoch(time.perf_counter() - started, self.epoch_samples - samples_before)
        if finished:
            self.pos.epoch, self.pos.batch = self.pos.epoch + 1, 0
        return ok

    def _to_device(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = batch[0], batch[1]
        non_blocking = self.cfg.non_blocking
        if self.cfg.channels_last and inputs.dim() == 4:
            inputs = inputs.to(self.device, non_blocking=non_blocking, memory_format=torch.channels_last)
        else:
            inputs = inputs.to(self.device, non_blocking=non_blocking)
        return inputs, targets.to(self.device, non_blocking=non_blocking)

    def _train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """One optimiser step over ``accumulation_steps`` micro-batches (DDP syncs only on the last, unless
        ``sync_every_micro_batch``: then every micro-batch's backward all-reduces, as without ``no_sync``)."""
        parts = self.cfg.accumulation_steps
        if parts == 1:
            pieces = [(inputs, targets)]
        else:
            pieces = [(x, y) for x, y in zip(inputs.tensor_split(parts), targets.tensor_split(parts), strict=True)
                      if len(x)]
        total = len(inputs)
        noise = self.noise if self.noise is not None and self.noise.due(self.pos.step) and len(pieces) > 1 \
            and self.pipeline_step is None else None
        for index, (x, y) in enumerate(pieces):
            skip_sync = index < len(pieces) - 1 and not self.cfg.sync_every_micro_batch
            with no_sync(self.run_model, skip_sync=skip_sync):
                if self.pipeline_step is not None:  # the schedule runs forward and backward of every stage
                    with self.precision.autocast():
                        loss, output = self.pipeline_step(x, y, self.train_loss_fn, len(x) / total)
                else:
                    with self.precision.autocast():
                        output = self.run_model(x)
                    loss = self.train_loss_fn(output, y)
                    self.precision.backward(loss if len(pieces) == 1 else loss * (len(x) / total))
                    if noise is not None:
                        noise.micro_batch_done(len(x) / total)
            if loss is None or not self.counts_samples:
                continue
            batch_loss = loss.detach().double() * len(x)
            self.window_loss += batch_loss
            self.epoch_loss += batch_loss
            if self.classification:
                self.epoch_correct += correct_count(output.detach(), y)
        every = getattr(self.cfg, "trust_ratio_every", 0)
        if every and (self.pos.step + 1) % every == 0:  # this step's gradients, before the optimizer uses them
            scale = self.precision.loss_scale() if self.precision.scaler is not None else None
            self.trust_ratios = layer_norms(self.model, float(scale) if scale else 1.0)
        if noise is not None:
            scale = self.precision.loss_scale() if self.precision.scaler is not None else None
            noise.step_done(total, float(scale) if scale else 1.0)
        if self.sync_gradients is not None:
            self.sync_gradients()
        if self.pos.step + 1 >= self.total_steps:
            self.grad_bytes = gradient_bytes(self.model)
        self.precision.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        self.lr = self.optimizer.param_groups[0]["lr"]  # the LR this step used
        self.scheduler.step()

    # ------------------------------------------------------------------ records

    def _log_step(self) -> bool:
        times = self.timer.end_window()
        local_rate = self.window_samples / times.wall_s if times.wall_s > 0 else 0.0
        window_energy = self._window_energy_j()
        loss_sum, samples, global_rate, energy = reduce_values(
            [self.window_loss, self.window_samples, local_rate, window_energy], self.ctx)
        loss = loss_sum / max(samples, 1)
        steps = max(times.steps, 1)
        record: dict[str, Any] = {
            "step": self.pos.step, "epoch": self.pos.epoch + 1, "loss": loss, "lr": self.lr,
            "images_per_s": local_rate, "images_per_s_global": global_rate,
            "data_time_s": times.data_s / steps, "compute_time_s": times.compute_s / steps,
            "window_steps": times.steps, "window_time_s": times.wall_s}
        if not math.isfinite(loss):
            return self._stop_on_nan(loss)
        if times.cpu_s:  # on a CPU: images per second of processor time, the rate neighbours' work leaves alone
            record["images_per_cpu_s"] = self.window_samples / times.cpu_s
        if math.isfinite(energy):  # NaN where any GPU has no energy counter (and on CPUs)
            record.update(window_energy_j=energy, window_images=int(samples))
        util = self.gpu_monitor.latest_util_pct() if self.gpu_monitor is not None else None
        if util is not None:
            record["gpu_util_pct"] = util
        if self.precision.scaler is not None:
            record.update(loss_scale=self.precision.loss_scale(), skipped_steps=self.precision.skipped_steps())
        if self.device.type == "cuda":
            record.update(mem_allocated_peak_mb=torch.cuda.max_memory_allocated(self.device) / MIB,
                          mem_reserved_peak_mb=torch.cuda.max_memory_reserved(self.device) / MIB)
        if self.cfg.log_params:
            record["params"] = parameter_values(self.model)
        if self.cfg.grad_noise_batches:  # grad_noise_var, grad_sq, trace_sigma, b_simple
            record.update(noise_scale(  # in the step's shape, layout and (bf16) precision: see noise_scale
                self.model, self._train_dataset(), self.loss_fn, self.cfg.batch_size, self.cfg.grad_noise_batches,
                self.device, seed=self.cfg.seed + self.pos.step, to_device=self._to_device, chunk=self.cfg.batch_size,
                autocast=self.precision.autocast if self.precision.scaler is None else contextlib.nullcontext))
        if self.noise is not None:
            record.update(self.noise.record())
        if self.trust_ratios is not None:
            record["trust_ratios"], self.trust_ratios = self.trust_ratios, None
        self.writer.write("step", **record)
        self.throughputs.append({key: record[key] for key in (  # what metrics.step_figures reads
            "step", "window_steps", "window_time_s", "images_per_s", "images_per_s_global", "data_time_s",
            "compute_time_s")})
        self.console.postfix(loss=loss)
        self._reset_window()
        return True

    def _window_energy_j(self) -> float:
        """Joules this GPU used in this step window (all GPUs' sum once reduced); NaN when unknown."""
        now = self.gpu_monitor.energy_j() if self.gpu_monitor is not None else None
        if now is None:
            return math.nan
        return now - (self._energy_mark if self._energy_mark is not None else 0.0)

    def _train_dataset(self) -> Any:
        loader = self.data.train_loader
        return getattr(loader, "dataset", None) or getattr(getattr(loader, "loader", None), "dataset", None)

    def _stop_on_nan(self, loss: float) -> bool:
        self.nan_message = (f"loss is {loss} at step {self.pos.step} (epoch {self.pos.epoch + 1}, lr {self.lr:.4g}): "
                            f"training diverged and stops; {NAN_ADVICE}")
        self.writer.write("event", event="nan_loss", step=self.pos.step, epoch=self.pos.epoch + 1, loss=loss,
                          lr=self.lr, message=self.nan_message)
        if self.ctx.is_main:
            print(f"coursekit.train: {self.nan_message}", file=sys.stderr, flush=True)
        return False

    def _end_epoch(self, seconds: float, samples_this_run: int) -> bool:
        loss_sum, correct, samples, session_samples = reduce_values(
            [self.epoch_loss, self.epoch_correct, self.epoch_samples, samples_this_run], self.ctx)
        train_loss = loss_sum / max(samples, 1)
        if not math.isfinite(train_loss):
            return self._stop_on_nan(train_loss)
        val_started = time.perf_counter()
        val_loss, val_acc = (None, None) if self.cfg.test_steps or not self._validates_now() else (
            self.target.validate(self) if self.target is not None else self.evaluate())
        self.loader_phases["validation_s"] += time.perf_counter() - val_started
        record = {"epoch": self.pos.epoch + 1, "step": self.pos.step, "train_loss": train_loss,
                  "train_acc": correct / max(samples, 1) if self.classification else None,
                  "val_loss": val_loss, "val_acc": val_acc,
                  "images_per_s": session_samples / self.ctx.world_size / seconds if seconds > 0 else None,
                  "images_per_s_global": session_samples / seconds if seconds > 0 else None,
                  "epoch_time_s": seconds}
        self.writer.write("epoch", **record)
        self.console.epoch_line(record, self.epochs)
        self.last_epoch_record = record
        return True

    def _validates_now(self) -> bool:
        """At the end of this epoch: every ``val_every_epochs``-th epoch, the last one, and with a target."""
        number = self.pos.epoch + 1
        last = number >= self.epochs or self.pos.step >= self.total_steps
        return self.target is not None or last or number % self.cfg.val_every_epochs == 0

    @torch.no_grad()
    def evaluate(self, loader: Any | None = None) -> tuple[float | None, float | None]:
        """Validation loss and accuracy over the whole validation set (or ``loader``'s), summed over ranks."""
        loader = loader if loader is not None else getattr(self.data, "val_loader", None)
        if loader is None:
            return None, None
        self.run_model.eval()
        loss_sum, correct, count = self._zeros(), self._zeros(), 0
        try:
            for batch in loader:
                inputs, targets = self._to_device(batch)
                with self.precision.autocast():
                    output = self.run_model(inputs)
                loss_sum += self.loss_fn(output, targets, reduction="sum").double()
                if self.classification:
                    correct += correct_count(output, targets)
                count += len(inputs)
        finally:
            self.run_model.train()
        loss_sum_all, correct_all, count_all = reduce_values([loss_sum, correct, count], self.ctx)
        if count_all == 0:
            return None, None
        return loss_sum_all / count_all, (correct_all / count_all if self.classification else None)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {"format": CHECKPOINT_FORMAT, "config": self.cfg.to_dict(), "world_size": self.ctx.world_size,
                "position": asdict(self.pos), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "precision": self.precision.state_dict(), "rng": rng_state(self.generators),
                "epoch_rng": self.epoch_rng, "accumulators": self._accumulators()}

    def save(self) -> None:
        """Rank 0 writes the checkpoint (every rank holds the same weights under DDP); sharded parameters:
        every rank writes its shards (``checkpoint.save_sharded``), rank 0 the rest."""
        if self.sharded:
            save_sharded(self.run_dir, self.model, self.optimizer)
        if self.ctx.is_main:
            state = self.state_dict()
            if self.sharded:
                state.update(model=SHARDED_MARK, optimizer={SHARDED_MARK: hyperparameters(self.optimizer)})
            save_checkpoint(self.run_dir, state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(state["model"], str) and state["model"] == SHARDED_MARK:
            load_sharded(self.run_dir, self.model, self.optimizer, state["optimizer"][SHARDED_MARK])
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state["precision"])
        self.pos = Position(**state["position"])
        self.lr = self.optimizer.param_groups[0]["lr"]
        self.resume_state = state
