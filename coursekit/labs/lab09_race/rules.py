"""The race's rules: a fixed task (data, validation set, target), a free choice of the rest, printed and checked.

A participant may change what the labs taught — batch size, precision, channels_last, compile, loader
settings, optimizer and LR schedule, GPU count up to ``max_gpus`` — but not the data, the validation set, the target or the
evaluation cadence, and the model must be of the allowed family and within the parameter budget.
``Rules.problems(config, num_parameters)`` says, in words, every rule a configuration breaks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coursekit.labs.kit.datasets import TEST_IMAGES, validation_text
from coursekit.train.checks import static_problems
from coursekit.train.config import TrainConfig

DEFAULT_SEEDS = 3
# What defines the task: every entry must keep the base configuration's value of these.
FIXED_FIELDS = ("dataset", "data_dir", "num_samples", "val_fraction", "num_classes", "image_size", "data_seed",
                "target_acc", "eval_every", "timing_warmup", "test_steps", "confirm_fraction")
# What participants may tune (the labs' subjects); anything else must keep the baseline's value too.
FREE_FIELDS = ("model", "batch_size", "epochs", "steps", "lr", "momentum", "weight_decay", "optimizer", "lr_scaling",
               "base_batch", "warmup_epochs", "warmup_start_factor", "schedule", "step_every_epochs", "step_gamma",
               "label_smoothing", "trust_coefficient", "precision", "channels_last", "compile", "workers",
               "pin_memory", "prefetch_factor", "persistent_workers", "non_blocking", "drop_last", "gpu_decode",
               "accumulation_steps", "ghost_batch_size", "sync_batchnorm", "bucket_cap_mb",
               "sync_every_micro_batch", "gpu_resident", "seed", "device", "out", "progress", "log_every",
               "checkpoint_every", "resume", "profile", "profile_steps", "download")


@dataclass(frozen=True)
class Rules:
    """One race: the baseline configuration (which fixes the task), the allowed models and budgets."""

    name: str
    baseline: TrainConfig
    models: tuple[str, ...]
    max_parameters: int
    max_gpus: int = 1
    seeds: int = DEFAULT_SEEDS
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.baseline.target_acc is None:
            raise ValueError("baseline.target_acc is None: the race needs a target accuracy (e.g. 0.9)")
        if self.baseline.data_seed is None:
            raise ValueError("baseline.data_seed is None: fix it, so that every seed trains on the same data")
        if self.seeds < 2:
            raise ValueError(f"seeds={self.seeds}: a submission needs at least 2 seeds for a standard deviation")
        if self.baseline.model not in self.models:
            raise ValueError(f"baseline.model={self.baseline.model!r} is not among the allowed models {self.models}")

    @property
    def target_acc(self) -> float:
        return float(self.baseline.target_acc)

    def submission(self, config: TrainConfig, seeds: Sequence[int] | None = None) -> list[TrainConfig]:
        """The k runs of a submission: ``config`` with seeds 0..k-1 (or ``seeds``)."""
        chosen = list(range(self.seeds)) if seeds is None else list(seeds)
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"seeds={chosen} repeats a seed: every run of a submission needs its own")
        return [config.replace(seed=seed) for seed in chosen]

    def problems(self, config: dict[str, Any] | TrainConfig, num_parameters: int | None = None,
                 gpus: int | None = None) -> list[str]:
        """Every rule ``config`` breaks and, for a TrainConfig, everything the engine would refuse in it
        (the run would fail), in words (empty: it keeps them all and can run)."""
        values = config.to_dict() if isinstance(config, TrainConfig) else dict(config)
        base = self.baseline.to_dict()
        found = [f"{name} = {values.get(name)!r}, the race fixes it to {base[name]!r}"
                 for name in FIXED_FIELDS if values.get(name) != base[name]]
        found += [f"{name} = {values.get(name)!r} changed (the race allows changing only: the labs' settings)"
                  for name in base if name not in FIXED_FIELDS and name not in FREE_FIELDS
                  and values.get(name, base[name]) != base[name]]
        if values.get("model") not in self.models:
            found.append(f"model = {values.get('model')!r} is not allowed (allowed: {', '.join(self.models)})")
        if num_parameters is not None and num_parameters > self.max_parameters:
            found.append(f"{num_parameters:,} parameters, over the budget of {self.max_parameters:,}")
        if gpus is not None and gpus > self.max_gpus:
            found.append(f"{gpus} GPUs, over the limit of {self.max_gpus}")
        if isinstance(config, TrainConfig):
            found += [f"the engine refuses it: {problem}" for problem in static_problems(config)]
        return found

    def text(self) -> str:
        """The rules, as printed in the notebook."""
        b = self.baseline
        part = "stopping part of the validation set" if b.confirm_fraction else "full validation set"
        images = "training images" if b.dataset in TEST_IMAGES else "samples"
        task = (f"{b.dataset}" + (f" ({b.num_samples:,} {images}, {b.num_classes} classes, {b.image_size} px, "
                                  f"{validation_text(b)}, data seed {b.data_seed})" if b.num_samples else ""))
        lines = [f"Race {self.name!r}",
                 f"  task: reach {self.target_acc:.1%} validation accuracy on {task} as fast as possible",
                 f"  evaluation: the {part} every {b.eval_every} steps and at each epoch's end" if b.eval_every
                 else f"  evaluation: the {part} at each epoch's end",
                 *([f"  confirmation: {b.confirm_fraction:.0%} of the validation set is held out of those "
                    "evaluations and evaluated once at the stop; an entry whose held-out accuracy falls clearly "
                    "below the target (it stopped on a lucky evaluation) is marked"] if b.confirm_fraction else []),
                 "  timing: by the engine; an untimed warm-up of "
                 f"{b.timing_warmup} steps (compile, autotuning; one more at an epoch's last batch size) first; "
                 "evaluations are not timed",
                 f"  submission: {self.seeds} seeds; the entry is mean ± std of time-to-target and counts only "
                 "when every seed reaches the target" + (" and the held-out part confirms it" if b.confirm_fraction
                                                         else ""),
                 f"  models: {', '.join(self.models)}, at most {self.max_parameters:,} parameters, "
                 f"at most {self.max_gpus} GPU(s)",
                 f"  fixed: {', '.join(FIXED_FIELDS)}",
                 "  free: batch size, precision, channels_last, compile, loader settings, optimizer, LR and "
                 "schedule, epochs (the budget), GPU count up to the limit above",
                 "  verified: every run's config, validation-set hash and code hash (coursekit's own source); "
                 "entries that break a rule are marked and explained, never dropped"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])

    def __str__(self) -> str:
        return self.text()
