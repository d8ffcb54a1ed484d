"""The training engine's configuration: one dataclass, the same names on the command line.

``python -m coursekit.train --model resnet18 --batch-size 128 --precision bf16`` and
``TrainConfig(model="resnet18", batch_size=128, precision="bf16")`` mean the same run. This module imports
neither torch nor the rest of the engine (the labs and the CLI build configurations on a login node); what
makes a configuration impossible is ``coursekit.train.checks``.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, get_args, get_origin

MODELS = ("linear", "mlp", "mlp_bn", "resnet18", "resnet34", "resnet50", "wide_resnet", "airbench", "pointnet",
          "gpt")
DATASETS = ("synthetic", "generated", "line", "jpeg_folder", "cifar10", "fashion-mnist", "imagefolder", "pointclouds",
            "tokens")
OPTIMIZERS = ("sgd", "adamw", "lars", "lamb")
LR_SCALINGS = ("none", "linear", "sqrt")
SCHEDULES = ("constant", "step", "cosine", "onecycle", "linear")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS_MODES = ("auto", "on", "off")
# the names of the strategy modules of coursekit/train/parallel/ (their STRATEGIES; a test keeps them equal)
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
    data_dir: str | None = field(default=None, metadata={
        "help": "dataset folder (cifar10, imagefolder, jpeg_folder; fashion-mnist: default Debian's "
                "/usr/share/datasets/fashion-mnist)"})
    download: bool = field(default=False, metadata={"help": "download CIFAR-10 into data_dir (login node only)"})
    gpu_resident: bool = field(default=False, metadata={"help": "keep synthetic data on the GPU"})
    device_data: bool = field(default=False, metadata={
        "help": "fashion-mnist, cifar10, generated: hold the whole data set on the device (uint8), augment there "
                "(reflect-pad 2 + random crop, flip), no DataLoader (coursekit/train/data/device.py)"})
    holdout_samples: int = field(default=0, metadata={
        "help": "--device-data: the last N training images are the validation set (a held-out split; the test "
                "set is not used)"})
    num_samples: int | None = field(default=None, metadata={"help": "size of a generated dataset; cifar10, fashion-mnist: the first N training images"})
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
    nesterov: bool = field(default=False, metadata={"help": "sgd: Nesterov momentum"})
    weight_decay: float = field(default=5e-4, metadata={"help": "weight decay"})
    optimizer: str = field(default="sgd", metadata={"help": f"one of {', '.join(OPTIMIZERS)}"})
    lr_scaling: str = field(default="none", metadata={"help": "scale lr with global batch: none, linear, sqrt"})
    base_batch: int = field(default=256, metadata={"help": "global batch at which lr is the base lr"})
    warmup_epochs: float = field(default=0.0, metadata={"help": "linear warmup length in epochs"})
    warmup_steps: int | None = field(default=None, metadata={
        "help": "linear warmup length in optimiser steps (overrides --warmup-epochs)"})
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
        "help": "pipeline/naive: CPU emulation of stage compute, forward sleeps X ms and backward 2X per stage and batch (X/m per micro-batch)"})
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
    confirm_fraction: float = field(default=0.0, metadata={
        "help": "--target-acc: this share of the validation set (spread evenly over it) is left out of the stopping "
                "evaluations and evaluated once at the stop: a target reached on evaluation noise shows there"})
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
    noise_every: int = field(default=0, metadata={
        "help": "two-batch noise scale B_simple in train mode every N steps (needs --accumulation-steps >= 2: the "
                "micro-batch gradients give |g_small|^2, the step's |g_big|^2; coursekit/train/noise.py)"})
    noise_ema: float = field(default=0.95, metadata={"help": "--noise-every: decay of the moving averages"})
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
