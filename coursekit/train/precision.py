"""Numeric precision of a run: fp32, tf32 (CUDA matmuls/convs on tensor cores), fp16 (autocast + GradScaler)
or bf16 (autocast).

``Precision`` hides the differences from the loop: ``with prec.autocast(): loss = ...``, then
``prec.backward(loss)`` and ``prec.step(optimizer)``. fp16's skipped steps are counted on the device
(no host sync per step); ``loss_scale()`` and ``skipped_steps()`` read them when a record is written.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TF32_MIN_CAPABILITY = (8, 0)  # Ampere


def set_tf32(enabled: bool) -> None:
    """TF32 on (tf32) or off (honest fp32) for CUDA matmuls and cuDNN convolutions."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def precision_problem(name: str, device: torch.device) -> str | None:
    """Why ``name`` cannot run on ``device`` (a sentence naming what to change), or None when it can."""
    if name not in ("fp32", "tf32", "fp16", "bf16"):
        return f"precision={name!r} is unknown: use fp32, tf32, fp16 or bf16"
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if name == "tf32" and capability < TF32_MIN_CAPABILITY:
            return f"precision='tf32' needs an Ampere or newer GPU (this one is sm_{capability[0]}{capability[1]}): use fp32 or fp16"
        if name == "bf16" and not torch.cuda.is_bf16_supported():
            return "precision='bf16' is not supported by this GPU: use fp16 (with its GradScaler) or fp32"
        return None
    if name == "tf32":
        return "precision='tf32' is a CUDA tensor-core mode and does nothing on a CPU: use fp32 or bf16 on a CPU"
    if name in AUTOCAST_DTYPES:
        try:
            with torch.autocast(device.type, dtype=AUTOCAST_DTYPES[name]):
                probe = torch.mm(torch.ones(2, 2, device=device), torch.ones(2, 2, device=device))
            if probe.dtype != AUTOCAST_DTYPES[name]:
                raise RuntimeError(f"autocast gave {probe.dtype}")
            if name == "fp16":
                torch.amp.GradScaler(device.type)
        except (RuntimeError, TypeError, ValueError) as error:
            return f"precision={name!r} is not supported on {device.type} by this torch ({error}): use fp32 or bf16"
    return None


@dataclass
class Precision:
    """Autocast, loss scaling and step-skipping bookkeeping for one precision on one device."""

    name: str
    device: torch.device
    autocast_dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None
    _skipped: torch.Tensor | None = field(default=None, repr=False)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true scale (before clipping or measuring them)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step(), through the scaler for fp16 (which skips steps with inf/NaN gradients)."""
        if self.scaler is None:
            optimizer.step()
            return
        self.scaler.step(optimizer)
        before = self._scale_tensor()
        before = before.clone() if before is not None else None
        self.scaler.update()
        after = self._scale_tensor()
        if before is not None and after is not None:  # the scale shrinks exactly when the step was skipped
            if self._skipped is None:
                self._skipped = torch.zeros((), dtype=torch.int64, device=after.device)
            self._skipped += (after < before).to(torch.int64)

    def _scale_tensor(self) -> torch.Tensor | None:
        return getattr(self.scaler, "_scale", None)  # the scaler's device tensor: read without a sync

    def loss_scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def skipped_steps(self) -> int | None:
        if self.scaler is None:
            return None
        return int(self._skipped.item()) if self._skipped is not None else 0

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "skipped": self.skipped_steps()}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
            self._skipped = torch.tensor(int(state.get("skipped") or 0), device=self.device)


def setup_precision(name: str, device: torch.device) -> Precision:
    """Configure TF32 flags and build the autocast/scaler pair; ValueError when impossible here."""
    problem = precision_problem(name, device)
    if problem:
        raise ValueError(problem)
    if device.type == "cuda":
        set_tf32(name == "tf32")
    scaler = torch.amp.GradScaler(device.type) if name == "fp16" else None
    return Precision(name, device, AUTOCAST_DTYPES.get(name), scaler)
