"""A plain fp32 training loop: a small MLP on generated data, one device. train_amp.py adds mixed precision.

    python train_fp32.py --steps 50                 # on the GPU if there is one, else on the CPU
    python train_fp32.py --steps 50 --device cpu

Each step prints `step <i> loss <x> scale <s>` (the scale is 1: fp32 needs no loss scaling). At the end the
model, the optimizer and the weights' dtypes are saved with torch.save in --out. --poison-step K makes the
loss of step K infinite on purpose, as an overflow would: see what it does to the weights.
Check your train_amp.py against this script with ``labs.check_amp_script("lab04_mixed_precision/train_amp.py")``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import nn

N_FEATURES = 32
N_CLASSES = 4
NOISE = 2.0  # standard deviation of the features around their class centre
BATCHES = 8  # the generated data holds this many batches; the steps cycle through them
MOMENTUM = 0.9
WARMUP_STEPS = 3  # left out of the time per step (first calls allocate memory and pick kernels)
CHECKPOINT = "final.pt"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def make_data(n: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` points around one random centre per class, and their labels (0..3)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(N_CLASSES, N_FEATURES, generator=g)
    labels = torch.randint(N_CLASSES, (n,), generator=g)
    features = centres[labels] + NOISE * torch.randn(n, N_FEATURES, generator=g)
    return features.to(device), labels.to(device)


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(N_FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, N_CLASSES))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no GPU visible here; use --device cpu or auto")
    return torch.device(name)


def poison(loss: torch.Tensor, step: int, poison_step: int) -> torch.Tensor:
    """The loss, made infinite at `poison_step` (an overflow on purpose: its gradients are inf or NaN)."""
    return loss * math.inf if step == poison_step else loss


def save(out: str, model: nn.Module, optimizer: torch.optim.Optimizer, **extra: object) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "param_dtypes": dtypes, **extra},
               folder / CHECKPOINT)
    print(f"saved {folder / CHECKPOINT} (weights in {', '.join(dtypes)})", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024, help="width of the hidden layers")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float16", help="low precision (train_amp.py)")
    parser.add_argument("--poison-step", type=int, default=0, help="make this step's loss infinite (0: none)")
    parser.add_argument("--out", default="checkpoints", help="folder of the final checkpoint")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = pick_device(args.device)
    features, labels = make_data(BATCHES * args.batch_size, args.seed, device)
    torch.manual_seed(args.seed)
    model = make_model(args.width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM)
    print(f"device {device}  float32  batch {args.batch_size}  width {args.width}", flush=True)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        if step == WARMUP_STEPS + 1:
            start = time.perf_counter()
        batch = slice((step % BATCHES) * args.batch_size, (step % BATCHES + 1) * args.batch_size)
        logits = model(features[batch])
        loss = nn.functional.cross_entropy(logits, labels[batch])
        loss = poison(loss, step, args.poison_step)  # an overflow on purpose, with --poison-step only
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} scale 1", flush=True)
    timed = args.steps - WARMUP_STEPS
    if timed > 0:
        print(f"{1000 * (time.perf_counter() - start) / timed:.2f} ms per step", flush=True)
    save(args.out, model, optimizer)


if __name__ == "__main__":
    main()
