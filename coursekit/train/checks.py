"""What makes a training configuration impossible, found before any work: ``validate(cfg, ctx=None)``.

Without ``ctx`` the checks need no device (choices, ranges, model and dataset that go together, the
parallel layout's options); with a :class:`~coursekit.train.parallel.process_group.DistContext` they also
check the precision, ``torch.compile`` and the parallel layout on that device and world size. Each
``--parallel`` strategy owns its own rules (``coursekit.train.parallel.parallel_problems``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from coursekit.metrics import default_run_dir
from coursekit.train.config import CHOICES, TrainConfig
from coursekit.train.parallel import parallel_problems
from coursekit.train.precision import precision_problem

IMAGE_MODELS = ("resnet18", "resnet34", "resnet50", "wide_resnet", "airbench")
IMAGE_DATASETS = ("synthetic", "generated", "jpeg_folder", "cifar10", "fashion-mnist", "imagefolder")
DATA_DIR_DATASETS = ("jpeg_folder", "cifar10", "imagefolder")
OPTIONAL_DATA_DIR_DATASETS = ("fashion-mnist",)  # without --data-dir: Debian's copy (/usr/share/datasets)
JPEG_DATASETS = ("jpeg_folder", "imagefolder")
REGRESSION_MODELS = ("linear", "mlp")
AT_LEAST_ONE = ("batch_size", "epochs", "steps", "test_steps", "accumulation_steps", "checkpoint_every",
                "profile_steps", "log_every", "num_samples", "base_batch", "step_every_epochs", "image_size",
                "prefetch_factor", "ghost_batch_size", "seq_len", "vocab_size", "gpt_layers", "gpt_dim",
                "gpt_heads", "tp", "pp", "microbatches", "val_every_epochs")
AT_LEAST_ZERO = ("workers", "grad_noise_batches", "weight_decay", "warmup_epochs", "stage_delay_ms",
                 "trust_ratio_every", "holdout_samples", "noise_every")


def static_problems(cfg: TrainConfig) -> list[str]:
    """Every problem of ``cfg`` found without a device, in words (``validate`` raises them)."""
    problems = [f"{name}={getattr(cfg, name)!r} is not allowed; use one of {', '.join(allowed)}"
                for name, allowed in CHOICES.items() if getattr(cfg, name) not in allowed]
    problems += [f"{name}={getattr(cfg, name)} must be at least 1" for name in AT_LEAST_ONE
                 if getattr(cfg, name) is not None and getattr(cfg, name) < 1]
    problems += [f"{name}={getattr(cfg, name)} must not be negative" for name in AT_LEAST_ZERO
                 if getattr(cfg, name) < 0]
    if not cfg.lr > 0:
        problems.append(f"lr={cfg.lr} must be positive")
    if not cfg.bucket_cap_mb > 0:
        problems.append(f"bucket_cap_mb={cfg.bucket_cap_mb} must be a positive number of MiB (DDP's default: 25)")
    if not 0 <= cfg.momentum < 1:
        problems.append(f"momentum={cfg.momentum} must be in [0, 1)")
    if cfg.warmup_steps is not None and cfg.warmup_steps < 0:
        problems.append(f"warmup_steps={cfg.warmup_steps} must not be negative")
    problems += device_data_problems(cfg)
    if cfg.warmup_start_factor is not None and not 0 < cfg.warmup_start_factor <= 1:
        problems.append(f"warmup_start_factor={cfg.warmup_start_factor} must be in (0, 1]")
    if not cfg.trust_coefficient > 0:
        problems.append(f"trust_coefficient={cfg.trust_coefficient} must be positive (LARS's eta, e.g. 0.001)")
    if not 0 <= cfg.label_smoothing < 1:
        problems.append(f"label_smoothing={cfg.label_smoothing} must be in [0, 1)")
    if not 0 <= cfg.val_fraction < 1:
        problems.append(f"val_fraction={cfg.val_fraction} must be in [0, 1)")
    if not 0 < cfg.step_gamma <= 1:
        problems.append(f"step_gamma={cfg.step_gamma} must be in (0, 1]")
    if cfg.batch_size >= 1 and cfg.accumulation_steps >= 1 and cfg.batch_size % cfg.accumulation_steps:
        problems.append(f"accumulation_steps={cfg.accumulation_steps} does not divide batch_size={cfg.batch_size}: "
                        "the batch is split into that many equal micro-batches; pick a divisor")
    micro_batch = cfg.batch_size // max(cfg.accumulation_steps, 1)
    if cfg.ghost_batch_size and cfg.ghost_batch_size > micro_batch:
        problems.append(f"ghost_batch_size={cfg.ghost_batch_size} is larger than the micro-batch ({micro_batch}); "
                        "use a smaller virtual batch")
    if cfg.ghost_batch_size and cfg.sync_batchnorm:
        problems.append("ghost_batch_size and sync_batchnorm pull the batch-norm batch in opposite directions; "
                        "use one of them")
    if cfg.model == "pointnet" and cfg.dataset != "pointclouds":
        problems.append(f"model='pointnet' needs dataset='pointclouds' (got {cfg.dataset!r})")
    if (cfg.model == "gpt") != (cfg.dataset == "tokens"):
        problems.append(f"model='gpt' and dataset='tokens' go together (got model={cfg.model!r}, "
                        f"dataset={cfg.dataset!r}): use --model gpt --dataset tokens")
    if cfg.model == "gpt" and cfg.gpt_heads >= 1 and cfg.gpt_dim % cfg.gpt_heads:
        problems.append(f"gpt_heads={cfg.gpt_heads} does not divide gpt_dim={cfg.gpt_dim}: every head gets "
                        "gpt_dim / gpt_heads features; pick a divisor")
    if cfg.model in IMAGE_MODELS and cfg.dataset not in IMAGE_DATASETS:
        problems.append(f"model={cfg.model!r} needs an image dataset ({', '.join(IMAGE_DATASETS)}), "
                        f"not {cfg.dataset!r}")
    if cfg.dataset == "line" and cfg.model not in REGRESSION_MODELS:
        problems.append(f"dataset='line' is a regression: use model 'linear' or 'mlp', not {cfg.model!r}")
    if cfg.channels_last and cfg.model not in IMAGE_MODELS:
        problems.append(f"channels_last applies to convolutional models ({', '.join(IMAGE_MODELS)}), "
                        f"not {cfg.model!r}")
    if cfg.dataset in DATA_DIR_DATASETS and not cfg.data_dir:
        problems.append(f"dataset={cfg.dataset!r} needs --data-dir (the dataset folder)")
    elif cfg.dataset in DATA_DIR_DATASETS and not (cfg.download and cfg.dataset == "cifar10"):
        if not Path(cfg.data_dir).is_dir():
            problems.append(f"data_dir={cfg.data_dir!r} does not exist"
                            + (" (add --download on a node with internet)" if cfg.dataset == "cifar10" else ""))
    if cfg.dataset in OPTIONAL_DATA_DIR_DATASETS and cfg.data_dir and not Path(cfg.data_dir).expanduser().is_dir():
        problems.append(f"data_dir={cfg.data_dir!r} does not exist (leave --data-dir out to read Debian's "
                        f"/usr/share/datasets/{cfg.dataset})")
    if cfg.gpu_resident and cfg.dataset != "synthetic":
        problems.append(f"gpu_resident applies to dataset 'synthetic' only, not {cfg.dataset!r}")
    if cfg.gpu_decode and cfg.dataset not in JPEG_DATASETS:
        problems.append(f"gpu_decode decodes JPEG files: use it with dataset jpeg_folder or imagefolder, "
                        f"not {cfg.dataset!r}")
    if cfg.workers == 0 and (cfg.prefetch_factor is not None or cfg.persistent_workers):
        problems.append("prefetch_factor and persistent_workers need worker processes: set workers >= 1")
    if not problems:
        problems += parallel_problems(cfg)
    if cfg.target_acc is not None:
        problems += _target_problems(cfg)
    elif cfg.confirm_fraction:
        problems.append(f"confirm_fraction={cfg.confirm_fraction} confirms the accuracy at a --target-acc stop: "
                        "give --target-acc too, or drop it")
    if cfg.resume:
        if cfg.out is None and default_run_dir() is None:
            problems.append("resume needs the run folder: give --out (the folder of the run to continue)")
    return problems


def device_data_problems(cfg: TrainConfig) -> list[str]:
    """Problems of --device-data, --holdout-samples and --noise-every (coursekit/train/data/device.py, noise.py)."""
    from coursekit.train.data.device import DEVICE_DATASETS

    problems = []
    if cfg.device_data and cfg.dataset not in DEVICE_DATASETS:
        problems.append(f"device_data holds {', '.join(DEVICE_DATASETS)} on the device, not dataset={cfg.dataset!r}")
    if cfg.holdout_samples and not cfg.device_data:
        problems.append(f"holdout_samples={cfg.holdout_samples} needs --device-data (it splits the device-held set)")
    if cfg.noise_every and cfg.accumulation_steps < 2:
        problems.append(f"noise_every={cfg.noise_every} needs --accumulation-steps >= 2: the micro-batches of one "
                        "step are the small batches of the two-batch estimator")
    if cfg.noise_every and cfg.grad_noise_batches:
        problems.append("noise_every and grad_noise_batches are two noise probes; use one of them")
    if cfg.nesterov and (cfg.optimizer != "sgd" or cfg.momentum <= 0):
        problems.append(f"nesterov applies to optimizer 'sgd' with momentum > 0 (got optimizer={cfg.optimizer!r}, "
                        f"momentum={cfg.momentum})")
    if not 0 <= cfg.noise_ema < 1:
        problems.append(f"noise_ema={cfg.noise_ema} must be in [0, 1)")
    return problems


def _target_problems(cfg: TrainConfig) -> list[str]:
    """--target-acc needs an accuracy on a validation set."""
    problems = []
    if not 0 < cfg.target_acc <= 1:
        problems.append(f"target_acc={cfg.target_acc} must be an accuracy in (0, 1], e.g. 0.9")
    if cfg.test_steps is not None:
        problems.append("target_acc needs validation: drop --test-steps (it skips the validation set)")
    if cfg.dataset == "line" or cfg.model == "linear":
        problems.append(f"target_acc needs a classification task, not model={cfg.model!r} on dataset={cfg.dataset!r}")
    if cfg.eval_every is not None and cfg.eval_every < 1:
        problems.append(f"eval_every={cfg.eval_every} must be at least 1 (or left out: at each epoch's end)")
    if cfg.timing_warmup < 0:
        problems.append(f"timing_warmup={cfg.timing_warmup} must not be negative")
    if not 0 <= cfg.confirm_fraction < 1:
        problems.append(f"confirm_fraction={cfg.confirm_fraction} must be in [0, 1), e.g. 0.5 (half the validation "
                        "set confirms the accuracy at the stop)")
    elif cfg.confirm_fraction and (cfg.device_data or cfg.gpu_decode or cfg.gpu_resident):
        problems.append(f"confirm_fraction={cfg.confirm_fraction} splits a DataLoader's validation set; it does not "
                        "apply with --device-data, --gpu-decode or --gpu-resident: drop one of them")
    return problems


def _compile_problem(device_type: str) -> str | None:
    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "compile: torch.compile does not support this Python/platform; drop --compile"
    except ImportError:
        return "compile: torch.compile is not available in this torch; drop --compile"
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "compile on a GPU needs Triton (pip install triton); drop --compile"
    elif not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        return "compile on a CPU needs a C++ compiler (g++ or clang++) on PATH; drop --compile"
    return None


def validate(cfg: TrainConfig, ctx: Any = None) -> None:
    """Raise one ValueError listing every problem of ``cfg`` (and of ``cfg`` on ``ctx``'s device and world).

    ``ctx`` is a :class:`coursekit.train.parallel.process_group.DistContext`; without it only device-free
    checks run.
    """
    problems = static_problems(cfg)
    if ctx is not None and not problems:
        problem = precision_problem(cfg.precision, ctx.device)
        if problem:
            problems.append(problem)
        if cfg.compile and (problem := _compile_problem(ctx.device.type)):
            problems.append(problem)
        if cfg.sync_batchnorm and ctx.world_size > 1 and ctx.device.type != "cuda":
            problems.append("sync_batchnorm: torch's SyncBatchNorm runs on GPUs only; on CPUs drop --sync-batchnorm")
        if cfg.gpu_decode and ctx.device.type != "cuda":
            problems.append("gpu_decode decodes JPEGs with nvjpeg on a GPU; this run is on the CPU: drop --gpu-decode")
        problems += parallel_problems(cfg, ctx.world_size, ctx.device.type)
        if cfg.num_samples is not None:
            train_samples = int(cfg.num_samples * (1 - cfg.val_fraction))
            if train_samples < ctx.world_size:
                problems.append(f"num_samples={cfg.num_samples} leaves {train_samples} training samples for "
                                f"{ctx.world_size} processes: every process needs at least one")
    if problems:
        raise ValueError("invalid training configuration:\n  - " + "\n  - ".join(problems))
