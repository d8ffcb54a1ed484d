"""GPU memory calculator: ``estimate_memory(model, optimizer, precision, batch_size, input_shape)``.

Bytes per trainable parameter, by convention (``convention=``):

``"hipergator"`` (the rule of thumb of the UF HiPerGator workshop, "fp32 + Adam = 24 B
per parameter"): weights 4 + gradients 4 + optimizer state (sgd and lars: momentum 4; adamw and
lamb: m and v, 8) + a master copy 8 (fp32 weights 4 + fp32 gradients 4, the copies that
mixed-precision training keeps; counted for every precision, so the figure is an upper bound that
does not depend on the precision). fp32 + Adam: 4 + 4 + (8 + 8) = 24 B; SGD: 20 B.

``"pytorch"`` (default: what ``torch.amp`` actually allocates; nobody keeps fp32 master copies of fp32
weights, so the 24 B rule overcounts fp32 training by half): fp32 weights 4 (they are the master copy:
autocast never changes the parameters' dtype) + fp32 gradients 4 + optimizer state (4 or 8) and,
for fp16/bf16, the 2-byte weight copies autocast casts and caches during the forward (under
``master_copy_bytes``). fp32 + Adam: 16 B; bf16 + Adam: 18 B.

Buffers (BatchNorm running statistics) count with their own size. Activations: the tensors autograd
saves for backward in one training-mode forward of ``ESTIMATE_BATCH`` samples on the CPU, scaled
linearly to ``batch_size``, with 2 bytes per element for fp16/bf16 (an approximation: some autocast
ops keep fp32).

What else a GPU's allocator hands out at the peak (``torch.cuda.max_memory_allocated``), each a named term:

- ``input_bytes``: the fp32 input batches held on the device beyond the one the forward saves
  (``input_batches``: 2 for the engine's ``--gpu-resident`` pool; under fp16/bf16 the forward saves a
  half-precision copy, so every fp32 batch counts);
- ``transient_bytes``: the backward's temporaries: the gradient of the widest activation, alive next to
  the saved activations (one largest saved tensor per sample);
- ``workspace_bytes`` (``cudnn_benchmark=True``, as the engine runs on a GPU, convolutions on fp32 tensors:
  fp32 and TF32 alike): cuDNN's autotuner, during the first steps, tries every algorithm for the tensors'
  type, among them FFT-based ones whose workspaces reach gigabytes; the workspace it allocates while
  trying them lands in the run's peak. TF32 changes the math mode, not the tensors' type, and gets the
  same term (lab 04's ladder on an H200: fp32 and tf32 both peak at 27.3 GiB at batch 256). ``CUDNN_FP32_AUTOTUNE_*`` are fitted to ResNet-50 fp32 on an
  H100 and an H200 (cuDNN 9.19: batch 32-512, 4.2 GiB + 6.8 % of the activations; the same batch-256
  step peaks 5.8 GiB lower in a process whose algorithms were already chosen). Take it as an order of
  magnitude on other GPUs and models; bf16 with channels_last needs little (the engine's benchmark: within 5 %
  of the estimate without the term).
- ``optimizer_temporary_bytes``: foreach optimizers' temporary copies (weight decay added to the
  gradients, Adam's denominator) during ``step()``, when the activations are already freed: the peak
  takes the larger of the two phases.

Not in the estimate, because ``max_memory_allocated`` does not see them either: the CUDA context and
cuDNN/cuBLAS handles (about 0.5-1 GB per process, visible in ``nvidia-smi``), memory the caching
allocator reserved but does not use (``max_memory_reserved`` - ``max_memory_allocated``: rounding and
fragmentation), NCCL buffers and other processes on the GPU.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn

FP32_BYTES = 4
HALF_BYTES = 2
OPTIMIZER_STATE_BYTES = {"sgd": 4, "lars": 4, "adamw": 8, "lamb": 8}  # per trainable parameter
HIPERGATOR_MASTER_COPY_BYTES = 8  # fp32 master weights + fp32 master gradients
HALF_PRECISIONS = ("fp16", "bf16")
CONVENTIONS = ("hipergator", "pytorch")
ESTIMATE_BATCH = 2  # >1 so that BatchNorm1d works in training mode
MIB = 2**20
GIB = 2**30
# foreach optimizers' temporaries during step(), per trainable parameter (one fp32 copy for SGD's weight
# decay or LARS's trust ratio, two for Adam-like updates)
OPTIMIZER_TEMPORARY_BYTES = {"sgd": 4, "lars": 4, "adamw": 8, "lamb": 8}
TRANSIENT_LARGEST_TENSORS = 1  # backward: one gradient of the widest activation next to the saved ones
CUDNN_FP32_AUTOTUNE_FIXED_BYTES = int(4.2 * GIB)  # fitted, see the module docstring
CUDNN_FP32_AUTOTUNE_ACTIVATION_SHARE = 0.068
AUTOTUNE_PRECISIONS = ("fp32", "tf32")  # fp32 tensors (TF32 is a math mode): the autotuner tries FFT algorithms


@dataclass
class MemoryEstimate:
    optimizer: str
    precision: str
    batch_size: int
    convention: str
    num_parameters: int
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    master_copy_bytes: int
    buffers_bytes: int
    activations_bytes: int
    input_bytes: int = 0
    transient_bytes: int = 0
    workspace_bytes: int = 0
    optimizer_temporary_bytes: int = 0

    @property
    def static_bytes(self) -> int:
        """What stays allocated between steps: weights, gradients, state, copies, buffers."""
        return (self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes
                + self.master_copy_bytes + self.buffers_bytes)

    @property
    def steady_bytes(self) -> int:
        """The peak of a step once cuDNN has chosen its algorithms (no autotuning workspace)."""
        forward_backward = self.activations_bytes + self.input_bytes + self.transient_bytes
        return self.static_bytes + max(forward_backward, self.optimizer_temporary_bytes)

    @property
    def total_bytes(self) -> int:
        """The estimated peak of a run: ``max_memory_allocated`` over every step, the first included."""
        forward_backward = self.activations_bytes + self.input_bytes + self.transient_bytes + self.workspace_bytes
        return self.static_bytes + max(forward_backward, self.optimizer_temporary_bytes)

    @property
    def per_sample_bytes(self) -> float:
        """What one more sample of the batch adds (activations, inputs, temporaries, workspace share)."""
        fixed = CUDNN_FP32_AUTOTUNE_FIXED_BYTES if self.workspace_bytes else 0
        grows = self.activations_bytes + self.input_bytes + self.transient_bytes + self.workspace_bytes - fixed
        return grows / self.batch_size

    @property
    def fixed_bytes(self) -> float:
        """What does not grow with the batch: ``total_bytes = fixed_bytes + batch_size * per_sample_bytes``
        (while the forward and backward, not the optimizer step, set the peak)."""
        return self.total_bytes - self.batch_size * self.per_sample_bytes

    @property
    def bytes_per_parameter(self) -> float:
        """Weights + gradients + state + master copies, per parameter (the "24 B" figure)."""
        static = self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes + self.master_copy_bytes
        return static / max(self.num_parameters, 1)

    def at_batch(self, batch_size: int) -> MemoryEstimate:
        """The same estimate for another batch size (the batch-proportional terms scaled, no new probe)."""
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        ratio = batch_size / self.batch_size
        fixed = CUDNN_FP32_AUTOTUNE_FIXED_BYTES if self.workspace_bytes else 0
        return replace(self, batch_size=batch_size, activations_bytes=int(self.activations_bytes * ratio),
                       input_bytes=int(self.input_bytes * ratio), transient_bytes=int(self.transient_bytes * ratio),
                       workspace_bytes=int(fixed + (self.workspace_bytes - fixed) * ratio) if fixed else 0)

    def as_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "total_bytes": self.total_bytes, "steady_bytes": self.steady_bytes,
                "bytes_per_parameter": self.bytes_per_parameter}

    def __str__(self) -> str:
        rows = [("parameters", self.parameters_bytes), ("gradients", self.gradients_bytes),
                ("optimizer state", self.optimizer_state_bytes), ("master copy", self.master_copy_bytes),
                ("buffers", self.buffers_bytes), (f"activations (batch {self.batch_size})", self.activations_bytes),
                ("input batches", self.input_bytes), ("backward temporaries", self.transient_bytes),
                ("cuDNN autotuning workspace", self.workspace_bytes),
                ("optimizer temporaries (step)", self.optimizer_temporary_bytes)]
        head = (f"Memory estimate: {self.num_parameters:,} parameters, {self.optimizer}, {self.precision}, "
                f"{self.convention} convention ({self.bytes_per_parameter:.0f} B/parameter)")
        lines = [head] + [f"  {name:<30}{value / MIB:>12,.1f} MiB" for name, value in rows]
        lines.append(f"  {'total (peak)':<30}{self.total_bytes / MIB:>12,.1f} MiB")
        return "\n".join(lines)


def saved_activations(model: nn.Module, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """Bytes (fp32) per sample of the tensors autograd saves for backward, and of the largest of them,
    measured on a CPU copy of the model."""
    probe = copy.deepcopy(model).to("cpu", torch.float32).train()
    param_storages = {p.untyped_storage().data_ptr() for p in probe.parameters()}
    param_storages |= {b.untyped_storage().data_ptr() for b in probe.buffers()}
    seen: set[int] = set()
    total, largest = 0, 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total, largest
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in param_storages and key not in seen:
            seen.add(key)
            total += storage.nbytes()
            largest = max(largest, storage.nbytes())
        return tensor

    sample = torch.randn(ESTIMATE_BATCH, *input_shape)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        probe(sample)
    return total // ESTIMATE_BATCH, largest // ESTIMATE_BATCH


def activation_bytes_per_sample(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Bytes (fp32) of the tensors autograd saves for backward, per sample, measured on a CPU copy."""
    return saved_activations(model, input_shape)[0]


def has_convolutions(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())


def estimate_memory(model: nn.Module, optimizer: str, precision: str, batch_size: int,
                    input_shape: tuple[int, ...], *, convention: str = "pytorch",
                    momentum: float = 0.9, input_batches: int = 1, cudnn_benchmark: bool = False) -> MemoryEstimate:
    """Estimate the training memory of ``model`` (see the module docstring for the conventions and terms).

    ``input_batches``: fp32 input batches on the device at once (2 with ``--gpu-resident``);
    ``cudnn_benchmark``: cuDNN autotunes its algorithms (the engine does on a GPU)."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer={optimizer!r} is unknown; choose one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    if convention not in CONVENTIONS:
        raise ValueError(f"convention={convention!r} is unknown; choose one of {', '.join(CONVENTIONS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if input_batches < 1:
        raise ValueError(f"input_batches={input_batches} must be >= 1 (the batch the forward reads)")
    half = precision in HALF_PRECISIONS
    n_all = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    state = OPTIMIZER_STATE_BYTES[optimizer]
    if optimizer == "sgd" and momentum == 0:
        state = 0
    if convention == "hipergator":
        master = HIPERGATOR_MASTER_COPY_BYTES * n_train
    else:
        master = HALF_BYTES * n_all if half else 0
    activation_scale = HALF_BYTES / FP32_BYTES if half else 1.0
    per_sample, largest = saved_activations(model, tuple(input_shape))
    activations = int(per_sample * batch_size * activation_scale)
    sample_bytes = FP32_BYTES * math.prod(input_shape)
    # fp32: the forward saves one of the input batches itself; fp16/bf16: it saves a half copy (in activations)
    extra_batches = input_batches if half else input_batches - 1
    workspace = 0
    if cudnn_benchmark and precision in AUTOTUNE_PRECISIONS and has_convolutions(model):
        workspace = CUDNN_FP32_AUTOTUNE_FIXED_BYTES + int(CUDNN_FP32_AUTOTUNE_ACTIVATION_SHARE * activations)
    return MemoryEstimate(
        optimizer=optimizer, precision=precision, batch_size=batch_size, convention=convention,
        num_parameters=n_all,
        parameters_bytes=FP32_BYTES * n_all,
        gradients_bytes=FP32_BYTES * n_train,
        optimizer_state_bytes=state * n_train,
        master_copy_bytes=master,
        buffers_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        activations_bytes=activations,
        input_bytes=extra_batches * sample_bytes * batch_size,
        transient_bytes=int(TRANSIENT_LARGEST_TENSORS * largest * batch_size * activation_scale),
        workspace_bytes=workspace,
        optimizer_temporary_bytes=OPTIMIZER_TEMPORARY_BYTES[optimizer] * n_train,
    )


# --- sharding: training state per GPU under DDP, ZeRO-1/2/3, tensor and pipeline parallelism -----------
#
# The Ultra-Scale Playbook's formulas (Hugging Face, 2025), for Ψ parameters on N GPUs. Mixed precision
# (bf16/fp16): 2 B of half weights, 2 B of half gradients and k = 12 B of optimizer state per parameter
# for Adam (fp32 master weights 4 + m 4 + v 4); SGD with momentum: k = 4 + 4 (master + momentum). fp32:
# weights 4, gradients 4, k = the optimizer's own state (Adam 8, SGD momentum 4, plain SGD 0).
#   DP     w + g + k            ZeRO-1  w + g + k/N        (optimizer state sharded)
#   ZeRO-2 w + (g + k)/N        ZeRO-3  (w + g + k)/N      (gradients, then weights sharded too)
#   TP, PP (w + g + k)/N: each GPU holds 1/N of the layers' weights (TP: of every matrix; PP: of the
#          layers) - exactly for a model whose every parameter is split; norms and embeddings that a TP
#          plan replicates, or a first/last stage's embeddings, make a real model's share a little larger.
# Activations are not in these figures: they depend on the batch, and only PP and TP shrink them.

SHARDING_STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "tp", "pp")
# the names the labs' tables and the literature use, lower-cased without spaces, "-" or "_" -> the engine's
STRATEGY_ALIASES = {"dp": "ddp", "data parallel": "ddp", "fsdp": "zero3", "zero3/fsdp": "zero3",
                    "fsdp/zero3": "zero3", "zero3(fsdp)": "zero3", "tensor": "tp", "pipeline": "pp"}
TABLE_NAMES = {"ddp": "DP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "tp": "TP", "pp": "PP"}
MASTER_WEIGHT_BYTES = 4  # the fp32 copy mixed-precision training keeps in the optimizer


@dataclass(frozen=True)
class ShardedMemory:
    """Bytes per GPU of the training state (weights, gradients, optimizer state) under one strategy."""

    strategy: str
    n: int
    num_parameters: int
    optimizer: str
    precision: str
    parameters_bytes: float
    gradients_bytes: float
    optimizer_state_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes

    @property
    def bytes_per_parameter(self) -> float:
        """Per parameter of the whole model (Ψ): 16 for mixed-precision Adam under DDP, 16/N under ZeRO-3."""
        return self.total_bytes / max(self.num_parameters, 1)

    def as_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "total_bytes": self.total_bytes, "bytes_per_parameter": self.bytes_per_parameter}


def per_parameter_bytes(optimizer: str, precision: str, momentum: float = 0.9) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state k) in bytes per parameter, the playbook's convention."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer={optimizer!r} is unknown; choose one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    state = 0 if optimizer == "sgd" and momentum == 0 else OPTIMIZER_STATE_BYTES[optimizer]
    if precision in HALF_PRECISIONS:
        return HALF_BYTES, HALF_BYTES, state + MASTER_WEIGHT_BYTES
    return FP32_BYTES, FP32_BYTES, state


def sharding_strategy(strategy: str) -> str:
    """The engine's name (``SHARDING_STRATEGIES``) of a strategy written as the engine ("zero3") or a table
    ("ZeRO-3", "DP", "FSDP") writes it; a ValueError naming ``strategy`` for anything else."""
    if not isinstance(strategy, str):
        raise ValueError(f"strategy={strategy!r} must be a name such as 'DP' or 'ZeRO-3'")
    key = " ".join(strategy.lower().replace("-", "").replace("_", "").split())
    key = STRATEGY_ALIASES.get(key, STRATEGY_ALIASES.get(key.replace(" ", ""), key.replace(" ", "")))
    if key not in SHARDING_STRATEGIES:
        known = ", ".join(f"{TABLE_NAMES[name]} ({name!r})" for name in SHARDING_STRATEGIES)
        raise ValueError(f"strategy={strategy!r} is unknown; choose one of {known}")
    return key


def sharded_memory(num_parameters: int, strategy: str, n: int = 1, optimizer: str = "adamw",
                   precision: str = "bf16", momentum: float = 0.9) -> ShardedMemory:
    """Training-state bytes per GPU for ``strategy`` (one of ``SHARDING_STRATEGIES``, or its table name such as
    "ZeRO-3": :func:`sharding_strategy`) over ``n`` GPUs."""
    strategy = sharding_strategy(strategy)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a number of GPUs >= 1")
    if num_parameters < 0:
        raise ValueError(f"num_parameters={num_parameters} must be >= 0")
    w, g, k = per_parameter_bytes(optimizer, precision, momentum)
    shard_w = strategy in ("zero3", "tp", "pp")
    shard_g = strategy in ("zero2", "zero3", "tp", "pp")
    shard_k = strategy != "ddp"
    psi = num_parameters
    return ShardedMemory(strategy=strategy, n=n, num_parameters=psi, optimizer=optimizer, precision=precision,
                         parameters_bytes=w * psi / (n if shard_w else 1),
                         gradients_bytes=g * psi / (n if shard_g else 1),
                         optimizer_state_bytes=k * psi / (n if shard_k else 1))


def sharding_table(num_parameters: int, n: int, optimizer: str = "adamw", precision: str = "bf16",
                   strategies: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3")) -> list[dict[str, float | int | str]]:
    """One row per strategy: GB per GPU of weights, gradients, optimizer state and their total."""
    rows = []
    for strategy in strategies:
        m = sharded_memory(num_parameters, strategy, n, optimizer, precision)
        rows.append({"strategy": strategy, "n_gpu": n, "weights_gb": m.parameters_bytes / 1e9,
                     "gradients_gb": m.gradients_bytes / 1e9, "optimizer_gb": m.optimizer_state_bytes / 1e9,
                     "total_gb": m.total_bytes / 1e9, "bytes_per_parameter": m.bytes_per_parameter})
    return rows


def smallest_n_that_fits(num_parameters: int, strategy: str, gpu_bytes: float, optimizer: str = "adamw",
                         precision: str = "bf16", headroom: float = 0.0, max_n: int = 4096) -> int | None:
    """The fewest GPUs (1, 2, 4, 8 ...) on which the training state of a model fits, or None.

    - ``num_parameters``: the model's parameters Ψ, e.g. ``70_000_000_000`` or ``70e9``;
    - ``strategy``: how the state is spread: "DP", "ZeRO-1", "ZeRO-2", "ZeRO-3" (or "FSDP"), "TP", "PP" as in
      the lab's table, or the engine's names "ddp", "zero1", "zero2", "zero3", "tp", "pp";
    - ``gpu_bytes``: the memory of one GPU in bytes, e.g. ``80e9`` for an 80 GB GPU;
    - ``optimizer``: "adamw", "sgd", "lamb" or "lars" (its state per parameter); ``precision``: "bf16", "fp16" or
      "fp32" (mixed precision keeps an fp32 master copy: 16 bytes per parameter for AdamW);
    - ``headroom``: the share of each GPU kept free for activations and the CUDA context (0.2 = a fifth);
    - ``max_n``: the most GPUs tried; None when even that many do not hold the state (DP never shards).
    """
    strategy = sharding_strategy(strategy)
    if isinstance(num_parameters, float) and num_parameters.is_integer():
        num_parameters = int(num_parameters)  # 70e9, as a participant types 70 billion
    if isinstance(num_parameters, bool) or not isinstance(num_parameters, int) or num_parameters < 1:
        raise ValueError(f"num_parameters={num_parameters!r} must be a whole number of parameters >= 1, "
                         "e.g. 70e9 or 70_000_000_000")
    if not isinstance(gpu_bytes, (int, float)) or isinstance(gpu_bytes, bool) or not gpu_bytes > 0:
        raise ValueError(f"gpu_bytes={gpu_bytes!r} must be one GPU's memory in bytes, e.g. 80e9")
    if not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
        raise ValueError(f"headroom={headroom!r} must be a share of the GPU in [0, 1), e.g. 0.2")
    if isinstance(max_n, bool) or not isinstance(max_n, int) or max_n < 1:
        raise ValueError(f"max_n={max_n!r} must be a number of GPUs >= 1")
    n = 1
    while n <= max_n:
        if sharded_memory(num_parameters, strategy, n, optimizer, precision).total_bytes <= gpu_bytes * (1 - headroom):
            return n
        n *= 2
    return None
