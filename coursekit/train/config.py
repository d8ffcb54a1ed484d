"""The training engine's configuration: one dataclass, the same names on the command line.

``python -m coursekit.train --model resnet18 --batch-size 128 --precision bf16`` and
``TrainConfig(model="resnet18", batch_size=128, precision="bf16")`` mean the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

MODELS = ("linear", "mlp", "mlp_bn", "resnet18", "resnet34", "resnet50", "wide_resnet", "pointnet", "gpt")
DATASETS = ("synthetic", "generated", "line", "jpeg_folder", "cifar10", "imagefolder", "pointclouds", "tokens")
OPTIMIZERS = ("sgd", "adamw", "lars", "lamb")
LR_SCALINGS = ("none", "linear", "sqrt")
SCHEDULES = ("constant", "step", "cosine", "onecycle")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS_MODES = ("auto", "on", "off")
# one module each in coursekit/train/parallel/ (zero1/zero2/zero3 in zero.py and fsdp.py, fsdp_tp in fsdp.py)
PARALLEL_STRATEGIES = ("ddp", "naive", "pipeline", "tensor", "zero1", "zero2", "zero3", "fsdp_tp")
PIPELINE_SCHEDULES = ("gpipe", "1f1b")

CHOICES: dict[str, tuple[str, ...]] = {
    "model": MODELS,
    "dataset": DATASETS,
    "optimizer": OPTIMIZERS,
    "lr_scaling": LR_SCALINGS,
    "schedule": SCHEDULES,
    "precision": PRECISIONS,
    "device": DEVICES,
    "progress": PROGRESS_MODES,
    "parallel": PARALLEL_STRATEGIES,
    "pipeline_schedule": PIPELINE_SCHEDULES,
}


@dataclass
class TrainConfig:
    """Every option of a training run (field docs are the ``--help`` texts)."""

    # model and data
    model: str = field(default="mlp", metadata={"help": f"one of {', '.join(MODELS)}"})
    dataset: str = field(default="generated", metadata={"help": f"one of {', '.join(DATASETS)}"})
    data_dir: str | None = field(default=None, metadata={"help": "dataset folder (cifar10, imagefolder, jpeg_folder)"})
    download: bool = field(default=False, metadata={"help": "download CIFAR-10 into data_dir (login node only)"})
    gpu_resident: bool = field(default=False, metadata={"help": "keep synthetic data on the GPU"})
    num_samples: int | None = field(default=None, metadata={"help": "size of a generated dataset; cifar10: the first N training images"})
    val_fraction: float = field(default=0.2, metadata={"help": "share of a generated dataset kept for validation"})
    num_classes: int = field(default=10, metadata={"help": "classes of a generated dataset"})
    image_size: int = field(default=32, metadata={"help": "image side in pixels"})
    seq_len: int = field(default=32, metadata={"help": "tokens: sequence length (inputs) of the token task and gpt"})
    vocab_size: int = field(default=32, metadata={"help": "tokens: vocabulary size of the token task and gpt"})
    gpt_layers: int = field(default=4, metadata={"help": "gpt: transformer blocks"})
    gpt_dim: int = field(default=64, metadata={"help": "gpt: model width (embedding size)"})
    gpt_heads: int = field(default=4, metadata={"help": "gpt: attention heads (divide gpt_dim)"})
    # run length
    batch_size: int = field(default=64, metadata={"help": "batch size per GPU (per process)"})
    epochs: int = field(default=1, metadata={"help": "epochs to run"})
    steps: int | None = field(default=None, metadata={"help": "optimiser steps to run (overrides epochs)"})
    test_steps: int | None = field(default=None, metadata={"help": "short test mode: N steps, no validation"})
    val_every_epochs: int = field(default=1, metadata={
        "help": "validate at every N-th epoch's end, and always after the last (a sweep of short runs: N = epochs)"})
    # optimisation
    lr: float = field(default=0.1, metadata={"help": "base learning rate (before scaling)"})
    momentum: float = field(default=0.9, metadata={"help": "momentum (sgd, lars) or beta1 (adamw, lamb)"})
    weight_decay: float = field(default=5e-4, metadata={"help": "weight decay"})
    optimizer: str = field(default="sgd", metadata={"help": f"one of {', '.join(OPTIMIZERS)}"})
    lr_scaling: str = field(default="none", metadata={"help": "scale lr with global batch: none, linear, sqrt"})
    base_batch: int = field(default=256, metadata={"help": "global batch at which lr is the base lr"})
    warmup_epochs: float = field(default=0.0, metadata={"help": "linear warmup length in epochs"})
    warmup_start_factor: float | None = field(default=None, metadata={
        "help": "warmup starts at lr * this factor (default: base lr / scaled lr, or 1 / warmup steps)"})
    trust_coefficient: float = field(default=0.001, metadata={"help": "LARS trust coefficient eta"})
    label_smoothing: float = field(default=0.0, metadata={"help": "label smoothing of the training loss"})
    schedule: str = field(default="constant", metadata={"help": f"one of {', '.join(SCHEDULES)}"})
    step_every_epochs: int = field(default=30, metadata={"help": "step schedule: decay period in epochs"})
    step_gamma: float = field(default=0.1, metadata={"help": "step schedule: decay factor"})
    # speed
    precision: str = field(default="fp32", metadata={"help": f"one of {', '.join(PRECISIONS)}"})
    channels_last: bool = field(default=False, metadata={"help": "NHWC memory format"})
    compile: bool = field(default=False, metadata={"help": "torch.compile the model"})
    # data loading
    workers: int = field(default=0, metadata={"help": "DataLoader worker processes"})
    pin_memory: bool = field(default=False, metadata={"help": "page-locked host batches"})
    prefetch_factor: int | None = field(default=None, metadata={"help": "batches prefetched per worker"})
    persistent_workers: bool = field(default=False, metadata={"help": "keep workers between epochs"})
    non_blocking: bool = field(default=False, metadata={"help": "asynchronous host-to-GPU copies"})
    drop_last: bool = field(default=False, metadata={"help": "drop the last incomplete batch"})
    gpu_decode: bool = field(default=False, metadata={"help": "decode JPEGs on the GPU (nvjpeg)"})
    # memory savers and batch norm
    accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimiser step"})
    activation_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    ghost_batch_size: int | None = field(default=None, metadata={"help": "ghost batch norm: virtual batch size"})
    sync_batchnorm: bool = field(default=False, metadata={"help": "SyncBatchNorm across processes"})
    # parallelism (several processes)
    parallel: str = field(default="ddp", metadata={
        "help": "how the model is spread over the processes: ddp (data parallel; one process: the model as is), "
                "zero1, zero2, zero3 (sharded data parallel), tensor, fsdp_tp (2-D), pipeline, naive (one process); "
                "see coursekit/train/parallel/__init__.py"})
    bucket_cap_mb: float = field(default=25.0, metadata={
        "help": "ddp: gradient bucket size in MiB (small: all-reduce starts early, more messages)"})
    sync_every_micro_batch: bool = field(default=False, metadata={
        "help": "ddp: all-reduce after every micro-batch of an accumulation (default: the last only, no_sync)"})
    tp: int | None = field(default=None, metadata={
        "help": "tensor-parallel size (default: every process for tensor, 2 for fsdp_tp, else 1)"})
    pp: int | None = field(default=None, metadata={
        "help": "pipeline stages (default: every process for pipeline, the visible GPUs or 2 for naive, else 1)"})
    pipeline_schedule: str = field(default="gpipe", metadata={"help": "pipeline: gpipe or 1f1b"})
    microbatches: int = field(default=1, metadata={"help": "pipeline: micro-batches per batch (divide batch_size)"})
    stage_delay_ms: float = field(default=0.0, metadata={
        "help": "pipeline/naive: CPU emulation of stage compute, forward sleeps X ms and backward 2X per stage"})
    save_weights: str | None = field(default=None, metadata={
        "help": "write the full (gathered) model state dict to this file at the end (torch.save)"})
    # reproducibility, output, instrumentation
    seed: int = field(default=0, metadata={"help": "random seed"})
    data_seed: int | None = field(default=None, metadata={
        "help": "seed of a generated dataset and of a val split (default: --seed); fix it to vary only the training"})
    # time to a target accuracy (lab 09's race; coursekit/train/target.py)
    target_acc: float | None = field(default=None, metadata={
        "help": "stop when the full validation set reaches this accuracy; the summary gets time_to_target_s"})
    eval_every: int | None = field(default=None, metadata={
        "help": "--target-acc: evaluate every N steps (default: at each epoch's end); evaluations are not timed"})
    timing_warmup: int = field(default=3, metadata={
        "help": "--target-acc: untimed warm-up steps on random data (compile, cuDNN autotuning), then state reset"})
    device: str = field(default="auto", metadata={"help": "auto, cpu or cuda"})
    out: str | None = field(default=None, metadata={"help": "output folder (metrics, checkpoints, traces)"})
    checkpoint_every: int | None = field(default=None, metadata={"help": "save a checkpoint every N steps"})
    resume: bool = field(default=False, metadata={"help": "resume from the output folder's checkpoint"})
    profile: bool = field(default=False, metadata={"help": "write a torch.profiler trace (TensorBoard)"})
    profile_steps: int = field(default=5, metadata={"help": "active steps of the profiler trace"})
    log_every: int = field(default=1, metadata={"help": "write a step record every N steps"})
    log_params: bool = field(default=False, metadata={"help": "put the parameters in step records (tiny models)"})
    grad_noise_batches: int = field(default=0, metadata={
        "help": "measure mini-batch gradient variance and the noise scale B_simple over N batches"})
    trust_ratio_every: int = field(default=0, metadata={
        "help": "put per-layer weight and gradient norms (trust ratios) in a step record every N steps"})
    progress: str = field(default="auto", metadata={"help": "progress bar: auto, on, off"})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def to_args(self) -> list[str]:
        """The command-line arguments that rebuild this config (only fields that differ from defaults)."""
        defaults = TrainConfig()
        args: list[str] = []
        for f in dataclasses.fields(self):
            value, default = getattr(self, f.name), getattr(defaults, f.name)
            if value == default:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + f.name.replace("_", "-"))
            elif value is None:
                continue
            else:
                args += [flag, str(value)]
        return args


def _base_type(annotation: Any) -> type:
    text = str(annotation)
    for name, typ in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if text.startswith(name):
            return typ
    if get_origin(annotation) is not None:
        return next(a for a in get_args(annotation) if a is not type(None))
    return str


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m coursekit.train", description="coursekit's training engine")
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        typ = _base_type(f.type)
        help_text = f.metadata.get("help", "")
        if typ is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, type=typ, default=f.default, help=help_text,
                                choices=CHOICES.get(f.name))
    return parser


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    namespace = build_parser().parse_args(argv)
    return TrainConfig(**vars(namespace))


# ----------------------------------------------------------------------------- validation

IMAGE_MODELS = ("resnet18", "resnet34", "resnet50", "wide_resnet")
IMAGE_DATASETS = ("synthetic", "generated", "jpeg_folder", "cifar10", "imagefolder")
DATA_DIR_DATASETS = ("jpeg_folder", "cifar10", "imagefolder")
JPEG_DATASETS = ("jpeg_folder", "imagefolder")
REGRESSION_MODELS = ("linear", "mlp")
AT_LEAST_ONE = ("batch_size", "epochs", "steps", "test_steps", "accumulation_steps", "checkpoint_every",
                "profile_steps", "log_every", "num_samples", "base_batch", "step_every_epochs", "image_size",
                "prefetch_factor", "ghost_batch_size", "seq_len", "vocab_size", "gpt_layers", "gpt_dim",
                "gpt_heads", "tp", "pp", "microbatches", "val_every_epochs")
AT_LEAST_ZERO = ("workers", "grad_noise_batches", "weight_decay", "warmup_epochs", "stage_delay_ms",
                 "trust_ratio_every")


def _static_problems(cfg: TrainConfig) -> list[str]:
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
        from pathlib import Path

        if not Path(cfg.data_dir).is_dir():
            problems.append(f"data_dir={cfg.data_dir!r} does not exist"
                            + (" (add --download on a node with internet)" if cfg.dataset == "cifar10" else ""))
    if cfg.gpu_resident and cfg.dataset != "synthetic":
        problems.append(f"gpu_resident applies to dataset 'synthetic' only, not {cfg.dataset!r}")
    if cfg.gpu_decode and cfg.dataset not in JPEG_DATASETS:
        problems.append(f"gpu_decode decodes JPEG files: use it with dataset jpeg_folder or imagefolder, "
                        f"not {cfg.dataset!r}")
    if cfg.workers == 0 and (cfg.prefetch_factor is not None or cfg.persistent_workers):
        problems.append("prefetch_factor and persistent_workers need worker processes: set workers >= 1")
    if not problems:
        from coursekit.train.parallel.context import parallel_problems

        problems += parallel_problems(cfg)
    if cfg.target_acc is not None:
        problems += _target_problems(cfg)
    if cfg.resume:
        from coursekit.metrics import default_run_dir

        if cfg.out is None and default_run_dir() is None:
            problems.append("resume needs the run folder: give --out (the folder of the run to continue)")
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
    return problems


def _compile_problem(device_type: str) -> str | None:
    import shutil

    import torch

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

    ``ctx`` is a :class:`coursekit.distributed.DistContext`; without it only device-free checks run.
    """
    problems = _static_problems(cfg)
    if ctx is not None and not problems:
        from coursekit.train.precision import precision_problem

        problem = precision_problem(cfg.precision, ctx.device)
        if problem:
            problems.append(problem)
        if cfg.compile and (problem := _compile_problem(ctx.device.type)):
            problems.append(problem)
        if cfg.sync_batchnorm and ctx.world_size > 1 and ctx.device.type != "cuda":
            problems.append("sync_batchnorm: torch's SyncBatchNorm runs on GPUs only; on CPUs drop --sync-batchnorm")
        if cfg.gpu_decode and ctx.device.type != "cuda":
            problems.append("gpu_decode decodes JPEGs with nvjpeg on a GPU; this run is on the CPU: drop --gpu-decode")
        from coursekit.train.parallel.context import parallel_problems

        problems += parallel_problems(cfg, ctx.world_size, ctx.device.type)
        if cfg.num_samples is not None:
            train_samples = int(cfg.num_samples * (1 - cfg.val_fraction))
            if train_samples < ctx.world_size:
                problems.append(f"num_samples={cfg.num_samples} leaves {train_samples} training samples for "
                                f"{ctx.world_size} processes: every process needs at least one")
    if problems:
        raise ValueError("invalid training configuration:\n  - " + "\n  - ".join(problems))
