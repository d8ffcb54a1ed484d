"""Time to a target accuracy (``--target-acc``, lab 09's race), measured by the engine, not by the participant.

- an untimed warm-up (``--timing-warmup`` steps on random data, and one more at the size of an epoch's
  last, smaller batch where a DataLoader makes one: compilation, cuDNN autotuning), after which the model,
  optimizer, schedule, scaler and random state are put back as they were;
- a clock that runs during training only: it stops for every evaluation on the validation set (its stopping
  part with ``--confirm-fraction``; every ``--eval-every`` steps, else at each epoch's end) and the run stops
  when the target is reached;
- ``--confirm-fraction f``: a share ``f`` of the validation set is never read by those evaluations; it is
  evaluated once at the stop (``confirm_acc``). The first evaluation over the target may owe it to luck (the
  winner's curse of many noisy evaluations); the held-out part, unread until then, shows the accuracy the
  model really has;
- the fingerprints that make a result verifiable: a hash of the configuration (seed and output options
  left out, so the seeds of one submission share it), a hash of the coursekit source that ran, a hash of
  the validation set, the versions and the GPUs.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import torch

# options that do not change what is trained (or that differ between the seeds of one submission)
CONFIG_HASH_IGNORES = ("seed", "out", "progress", "resume", "checkpoint_every", "log_every", "profile",
                       "profile_steps", "download", "device")
HASH_CHARS = 16
FINGERPRINT_CHUNK = 500  # samples read at once when a validation set is hashed
# The stopping evaluations read the same validation batches dozens of times (every --eval-every steps): after
# the first pass they are kept on the device, where they fit in this many bytes, instead of being loaded again
# (the loader's workers start for every pass: ~0.26 s of a 5,000-image pass on an H200, lab 09's baseline).
VAL_CACHE_MAX_BYTES = 1 << 30
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # coursekit/


def config_hash(config: dict[str, Any]) -> str:
    """Short sha256 of the options that shape the run (CONFIG_HASH_IGNORES left out)."""
    kept = {k: v for k, v in sorted(config.items()) if k not in CONFIG_HASH_IGNORES}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:HASH_CHARS]


def code_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """Short sha256 of the coursekit package's source (every ``*.py`` but the tests, by relative path)."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        if path.name.startswith("test_") or "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:HASH_CHARS]


def val_fingerprint(loader: Any) -> dict[str, Any]:
    """The validation set's size and a hash of its samples in index order (what every entry must share)."""
    dataset = getattr(loader, "dataset", None)
    digest = hashlib.sha256()
    if isinstance(dataset, torch.utils.data.TensorDataset):
        for tensor in dataset.tensors:
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        count = len(dataset)
    elif dataset is not None and hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"):
        count = len(dataset)
        many = getattr(dataset, "__getitems__", None)  # a batch of samples at once (Subset, Fashion-MNIST)
        for start in range(0, count, FINGERPRINT_CHUNK):
            indices = range(start, min(start + FINGERPRINT_CHUNK, count))
            for sample in (many(list(indices)) if many is not None else (dataset[i] for i in indices)):
                for part in sample[:2]:
                    digest.update(torch.as_tensor(part).cpu().contiguous().numpy().tobytes())
    else:  # an iterable of batches (generated on the device): hash what it yields
        count = 0
        for batch in loader:
            count += len(batch[0])
            for part in batch[:2]:
                digest.update(part.detach().cpu().contiguous().numpy().tobytes())
    return {"val_samples": count, "val_hash": digest.hexdigest()[:HASH_CHARS]}


def _owned(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor to keep: a copy of one in a loader worker's shared memory (each such tensor holds a file
    descriptor open while it lives: hundreds of kept batches would reach a cluster's open-file limit)."""
    return tensor.clone() if tensor.is_shared() else tensor


class TargetRun:
    """The clock, the evaluations and the verdict of one ``--target-acc`` run (driven by the Trainer)."""

    def __init__(self, cfg: Any, device: torch.device, steps_per_epoch: int) -> None:
        self.cfg, self.device, self.steps_per_epoch = cfg, device, steps_per_epoch
        self.elapsed_s, self._since = 0.0, None
        self.evaluations: list[dict[str, Any]] = []
        self.reached_at: dict[str, Any] | None = None
        self.fingerprint: dict[str, Any] = {}
        self.confirmation: dict[str, Any] = {}  # --confirm-fraction: the held-out accuracy at the stop
        self.cached_batches: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # see VAL_CACHE_MAX_BYTES

    # ------------------------------------------------------------------ the clock
    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._sync()
        self._since = time.perf_counter()

    def pause(self) -> None:
        self._sync()
        if self._since is not None:
            self.elapsed_s += time.perf_counter() - self._since
        self._since = None

    # ------------------------------------------------------------------ driven by the Trainer
    def begin(self, trainer: Any) -> None:
        """Untimed warm-up, the validation fingerprint, then the clock starts."""
        if self.cfg.timing_warmup:
            self._warm_up(trainer, self.cfg.timing_warmup)
        if trainer.ctx.is_main and trainer.data.val_loader is not None:
            self.fingerprint = val_fingerprint(trainer.data.val_loader)
        self.start()

    def due(self, step: int) -> bool:
        return bool(self.cfg.eval_every) and step % self.cfg.eval_every == 0

    def validate(self, trainer: Any) -> tuple[float | None, float | None]:
        """Evaluate outside the clock (once per step); when the target is reached the run stops."""
        step = trainer.pos.step
        if self.evaluations and self.evaluations[-1]["step"] == step:
            last = self.evaluations[-1]
            return last["val_loss"], last["val_acc"]
        self.pause()
        val_loss, val_acc = trainer.evaluate(self._stopping_batches(trainer))
        record = {"step": step, "train_time_s": self.elapsed_s, "val_loss": val_loss, "val_acc": val_acc}
        self.evaluations.append(record)
        trainer.writer.write("event", event="evaluation", **record)
        if val_acc is not None and val_acc >= self.cfg.target_acc and self.reached_at is None:
            self.reached_at = record
            trainer.writer.write("event", event="target_reached", target_acc=self.cfg.target_acc, **record)
            self._confirm(trainer)
            trainer.total_steps = step  # the loop ends here
        else:
            self.start()
        return val_loss, val_acc

    def _stopping_batches(self, trainer: Any) -> Any:
        """The stopping part of the validation set, batch by batch on the device: read through its loader the
        first time (and kept when it fits in ``VAL_CACHE_MAX_BYTES``), from the device after that. The batches
        and their order are the loader's (validation batches are neither shuffled nor augmented)."""
        if self.cached_batches is not None:
            return self.cached_batches
        loader = getattr(trainer.data, "val_loader", None)
        return None if loader is None else self._read_and_keep(trainer, loader)

    def _read_and_keep(self, trainer: Any, loader: Any) -> Any:
        kept: list[tuple[torch.Tensor, torch.Tensor]] | None = []
        size = 0
        for batch in loader:
            inputs, targets = trainer._to_device(batch)
            size += inputs.nbytes + targets.nbytes
            if kept is not None and size <= VAL_CACHE_MAX_BYTES:
                kept.append((_owned(inputs), _owned(targets)))
            else:
                kept = None  # too large to keep: every pass reads the loader
            yield inputs, targets
        self.cached_batches = kept

    def _confirm(self, trainer: Any) -> None:
        """The held-out part of the validation set (``--confirm-fraction``), never read for stopping, evaluated
        once at the stop: the accuracy the model really has there, free of the luck of the stopping evaluations."""
        loader = getattr(trainer.data, "confirm_loader", None)
        if loader is None:
            return
        _, confirm_acc = trainer.evaluate(loader)
        self.confirmation = {"confirm_acc": confirm_acc}
        if trainer.ctx.is_main:
            fingerprint = val_fingerprint(loader)
            self.confirmation.update(confirm_samples=fingerprint["val_samples"], confirm_hash=fingerprint["val_hash"])
        trainer.writer.write("event", event="target_confirmed", **self.confirmation)

    def summary(self, world_size: int) -> dict[str, Any]:
        reached = self.reached_at
        return {"target_acc": self.cfg.target_acc, "target_reached": reached is not None,
                "time_to_target_s": reached["train_time_s"] if reached else None,
                "steps_to_target": reached["step"] if reached else None,
                "epochs_to_target": reached["step"] / self.steps_per_epoch if reached else None,
                "val_acc_at_target": reached["val_acc"] if reached else None,
                "train_time_s": self.elapsed_s, "evaluations": len(self.evaluations),
                "seed": self.cfg.seed, "config_hash": config_hash(self.cfg.to_dict()), "code_hash": code_hash(),
                "gpu_count": world_size if self.device.type == "cuda" else 0,
                "gpu_name": torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None,
                **self.fingerprint, **self.confirmation}

    def _last_batch_size(self, trainer: Any) -> int:
        """The size of each epoch's last training batch where it is smaller than the others (no ``drop_last``),
        else 0; 0 too where the batches do not come from a DataLoader's sampler (``--device-data``)."""
        sampler = getattr(trainer.data.train_loader, "sampler", None)
        if self.cfg.drop_last or sampler is None or not hasattr(sampler, "__len__"):
            return 0
        return len(sampler) % self.cfg.batch_size

    def _warm_up(self, trainer: Any, steps: int) -> None:
        """``steps`` training steps (and one more at the size of an epoch's last batch where it is smaller) and
        one evaluation forward on random data, then everything put back."""
        saved = copy.deepcopy({"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
                               "scheduler": trainer.scheduler.state_dict(),
                               "precision": trainer.precision.state_dict()})
        cpu_rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        shape = (self.cfg.batch_size, *trainer.data.input_shape)
        inputs = torch.randn(shape, device=self.device)
        if self.cfg.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        targets = torch.randint(0, trainer.data.num_classes, (self.cfg.batch_size,), device=self.device)
        for _ in range(steps):
            trainer._train_step(inputs, targets)
        last = self._last_batch_size(trainer)
        if last:  # an epoch's last, smaller batch: a new shape to autotune (and, under compile, to compile) for
            trainer._train_step(inputs[:last], targets[:last])
        trainer.run_model.eval()
        with torch.no_grad(), trainer.precision.autocast():
            trainer.run_model(inputs)
        trainer.run_model.train()
        trainer.model.load_state_dict(saved["model"])
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.scheduler.load_state_dict(saved["scheduler"])
        trainer.precision.load_state_dict(saved["precision"])
        trainer.lr = trainer.optimizer.param_groups[0]["lr"]
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, self.device)
        trainer._reset_epoch()
        trainer._reset_window()
        self._sync()
