"""GPU memory calculator: ``estimate_memory(model, optimizer, precision, batch_size, input_shape)``.

Bytes per trainable parameter, by convention (``convention=``):

``"hipergator"`` (default; the rule of thumb of the UF HiPerGator workshop, "fp32 + Adam = 24 B
per parameter"): weights 4 + gradients 4 + optimizer state (sgd and lars: momentum 4; adamw and
lamb: m and v, 8) + a master copy 8 (fp32 weights 4 + fp32 gradients 4, the copies that
mixed-precision training keeps; counted for every precision, so the figure is an upper bound that
does not depend on the precision). fp32 + Adam: 4 + 4 + (8 + 8) = 24 B; SGD: 20 B.

``"pytorch"`` (what ``torch.amp`` actually allocates): fp32 weights 4 (they are the master copy:
autocast never changes the parameters' dtype) + fp32 gradients 4 + optimizer state (4 or 8) and,
for fp16/bf16, the 2-byte weight copies autocast casts and caches during the forward (under
``master_copy_bytes``). fp32 + Adam: 16 B; bf16 + Adam: 18 B.

Buffers (BatchNorm running statistics) count with their own size. Activations: the tensors autograd
saves for backward in one training-mode forward of ``ESTIMATE_BATCH`` samples on the CPU, scaled
linearly to ``batch_size``, with 2 bytes per element for fp16/bf16 (an approximation: some autocast
ops keep fp32). Temporary buffers of the backward pass and the allocator's caching are not counted,
so the measured peak is usually somewhat above weights + gradients + state + activations.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

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

    @property
    def total_bytes(self) -> int:
        return (self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes
                + self.master_copy_bytes + self.buffers_bytes + self.activations_bytes)

    @property
    def bytes_per_parameter(self) -> float:
        """Weights + gradients + state + master copies, per parameter (the "24 B" figure)."""
        static = self.parameters_bytes + self.gradients_bytes + self.optimizer_state_bytes + self.master_copy_bytes
        return static / max(self.num_parameters, 1)

    def as_dict(self) -> dict[str, float | int | str]:
        return {**asdict(self), "total_bytes": self.total_bytes, "bytes_per_parameter": self.bytes_per_parameter}

    def __str__(self) -> str:
        rows = [("parameters", self.parameters_bytes), ("gradients", self.gradients_bytes),
                ("optimizer state", self.optimizer_state_bytes), ("master copy", self.master_copy_bytes),
                ("buffers", self.buffers_bytes), (f"activations (batch {self.batch_size})", self.activations_bytes)]
        head = (f"Memory estimate: {self.num_parameters:,} parameters, {self.optimizer}, {self.precision}, "
                f"{self.convention} convention ({self.bytes_per_parameter:.0f} B/parameter)")
        lines = [head] + [f"  {name:<26}{value / MIB:>12,.1f} MiB" for name, value in rows]
        lines.append(f"  {'total':<26}{self.total_bytes / MIB:>12,.1f} MiB")
        return "\n".join(lines)


def activation_bytes_per_sample(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Bytes (fp32) of the tensors autograd saves for backward, per sample, measured on a CPU copy."""
    probe = copy.deepcopy(model).to("cpu", torch.float32).train()
    param_storages = {p.untyped_storage().data_ptr() for p in probe.parameters()}
    param_storages |= {b.untyped_storage().data_ptr() for b in probe.buffers()}
    seen: set[int] = set()
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in param_storages and key not in seen:
            seen.add(key)
            total += storage.nbytes()
        return tensor

    sample = torch.randn(ESTIMATE_BATCH, *input_shape)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        probe(sample)
    return total // ESTIMATE_BATCH


def estimate_memory(model: nn.Module, optimizer: str, precision: str, batch_size: int,
                    input_shape: tuple[int, ...], *, convention: str = "hipergator",
                    momentum: float = 0.9) -> MemoryEstimate:
    """Estimate the training memory of ``model`` (see the module docstring for the conventions)."""
    if optimizer not in OPTIMIZER_STATE_BYTES:
        raise ValueError(f"optimizer={optimizer!r} is unknown; choose one of {', '.join(OPTIMIZER_STATE_BYTES)}")
    if convention not in CONVENTIONS:
        raise ValueError(f"convention={convention!r} is unknown; choose one of {', '.join(CONVENTIONS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
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
    per_sample = activation_bytes_per_sample(model, tuple(input_shape))
    return MemoryEstimate(
        optimizer=optimizer, precision=precision, batch_size=batch_size, convention=convention,
        num_parameters=n_all,
        parameters_bytes=FP32_BYTES * n_all,
        gradients_bytes=FP32_BYTES * n_train,
        optimizer_state_bytes=state * n_train,
        master_copy_bytes=master,
        buffers_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        activations_bytes=int(per_sample * batch_size * activation_scale),
    )
