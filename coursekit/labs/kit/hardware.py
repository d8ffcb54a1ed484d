"""The GPU a lab's jobs run on, asked of the job itself: name, memory, compute capability, what it supports.

The notebook's kernel often has no GPU (the jobs get them), and the cluster may mix H100s, A100s and
V100s: a lab never assumes one. ``gpu_info()`` runs inside a job (``submit_function(hardware.gpu_info)``
or as part of a lab's measurement) and returns what that GPU is; ``usable_precisions`` drops what it
cannot run (bf16 and tf32 need compute capability 8.0) with the reason; ``peak_tflops`` gives the
datasheet's dense tensor-core peak for the GPUs it knows, else None (and the lab says it cannot tell).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

GB = 1e9
GIB = 2**30
AMPERE = (8, 0)  # bf16 and tf32 tensor cores
NEEDS_AMPERE = ("bf16", "tf32")
# Dense (no sparsity) tensor-core peaks from NVIDIA's datasheets, TFLOP/s: (name fragment, bf16, fp16).
# The first fragment found in the device name wins, so the more specific names come first.
# the datasheets' dense peaks in TFLOP/s: fp32 on the CUDA cores, tf32 / bf16 / fp16 on the tensor cores
PEAK_DENSE_TFLOPS: tuple[tuple[str, dict[str, float | None]], ...] = (
    ("H200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0, "fp16": 989.0}),
    ("H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    ("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.0, "fp16": 835.0}),
    ("H100", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0, "fp16": 989.0}),  # SXM
    ("GH200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.0, "fp16": 989.0}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0, "fp16": 362.0}),
    ("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}),
    ("V100", {"fp32": 15.7, "tf32": None, "bf16": None, "fp16": 125.0}),  # no tf32, no bf16
)


def gpu_info(device: str = "auto") -> dict[str, Any]:
    """What the job's GPU is (run it in a job): name, memory, capability, bf16/tf32 support; on a machine
    without CUDA, ``{"device": "cpu", ...}`` with None for the GPU fields."""
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return {"device": "cpu", "name": None, "total_memory_gb": None, "capability": None,
                "bf16": None, "tf32": None}
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    capability = (props.major, props.minor)
    return {"device": "cuda", "name": props.name, "total_memory_gb": props.total_memory / GB,
            "capability": capability, "bf16": capability >= AMPERE, "tf32": capability >= AMPERE}


def describe(info: dict[str, Any] | None) -> str:
    if not info or info.get("name") is None:
        return "no GPU"
    major, minor = info["capability"]
    gib = info["total_memory_gb"] * GB / GIB  # the labs give memory in GiB (2^30 bytes)
    return f"{info['name']} ({gib:.1f} GiB, compute capability {major}.{minor})"


def usable_precisions(info: dict[str, Any] | None, wanted: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The precisions of ``wanted`` this GPU runs, and for each dropped one the reason. Without GPU
    information (a CPU job, or the probe failed) everything is kept: the jobs will say."""
    if not info or info.get("capability") is None:
        return list(wanted), {}
    kept, dropped = [], {}
    for precision in wanted:
        if precision in NEEDS_AMPERE and not info.get(precision):
            major, minor = info["capability"]
            dropped[precision] = (f"{info['name']} (compute capability {major}.{minor}) has no {precision} tensor "
                                  f"cores (they need 8.0, an A100 or newer): fp16 with its GradScaler is the "
                                  "mixed precision of this GPU")
        else:
            kept.append(precision)
    return kept, dropped


def peak_tflops(name: str | None, precision: str = "bf16") -> float | None:
    """The datasheet's dense peak of the GPU called ``name`` in ``precision`` (fp32 on the CUDA cores; tf32,
    bf16 or fp16 on the tensor cores); None when the GPU is unknown here or has no such units."""
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        raise ValueError(f"precision={precision!r}: use one of fp32, tf32, bf16, fp16")
    for fragment, peaks in PEAK_DENSE_TFLOPS if name else ():
        if fragment in name:
            return peaks[precision]
    return None


def memory_gb(info: dict[str, Any] | None, default: float | None = None) -> float | None:
    """The GPU's memory in GB, else ``default`` (None: unknown)."""
    if info and info.get("total_memory_gb"):
        return float(info["total_memory_gb"])
    return default
