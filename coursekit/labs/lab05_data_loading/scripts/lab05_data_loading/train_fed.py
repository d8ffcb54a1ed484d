"""train_starving.py with a loader that keeps the step fed: workers, pinned memory, copies that do not block.

    python train_fed.py --steps 10                      # on the GPU if there is one, else on the CPU
    python train_fed.py --steps 10 --device cpu

Each image costs time before it is a tensor: the file is read (a wait, as on a shared file system) and
decoded, cropped and flipped on the CPU. Here the training process does all of that itself, between two
steps, and the step waits. Each step prints `step <i> wait <ms> step <ms>`: the time spent waiting for
the batch, and the whole step. At the end the times are written to --out (JSON) with the share of step
time spent waiting for data. Check it with ``labs.check_loader_script("lab05_data_loading/train_fed.py")``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGE_SHAPE = (3, 32, 32)
N_CLASSES = 10
STEPS_PER_EPOCH = 6  # the dataset holds this many batches: the runs cross epochs
CROP_PAD = 4  # random crop: pad by this many pixels, cut the original size back out
PIXEL_MEAN, PIXEL_STD = 0.5, 0.25
SEED_STRIDE = 100_003  # one generator per (seed, image): the same image at every epoch, another crop
# on a CPU there is nothing to pin, and reading files is mostly waiting (more workers than cores still
# help): torch says so, and goes on
warnings.filterwarnings("ignore", message=".*pin_memory.*")
warnings.filterwarnings("ignore", message=".*worker processes in total.*")


class SlowImages(Dataset):
    """Images that take time to read and decode, as JPEGs on a shared file system do."""

    def __init__(self, images: int, read_ms: float, seed: int) -> None:
        self.images, self.read_s, self.seed = images, read_ms / 1000, seed

    def __len__(self) -> int:
        return self.images

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.read_s)  # reading the file: the process waits for the disk or the network
        g = torch.Generator().manual_seed(self.seed * SEED_STRIDE + index)
        pixels = torch.randint(0, 256, IMAGE_SHAPE, dtype=torch.uint8, generator=g)  # "decoded"
        padded = nn.functional.pad(pixels.float().unsqueeze(0), (CROP_PAD,) * 4, mode="reflect")[0]
        top, left = torch.randint(0, 2 * CROP_PAD + 1, (2,)).tolist()
        image = padded[:, top:top + IMAGE_SHAPE[1], left:left + IMAGE_SHAPE[2]]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return (image / 255 - PIXEL_MEAN) / PIXEL_STD, index % N_CLASSES


def make_model(width: int) -> nn.Module:
    features = IMAGE_SHAPE[0] * IMAGE_SHAPE[1] * IMAGE_SHAPE[2]
    return nn.Sequential(nn.Flatten(), nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, N_CLASSES))


def pick_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no GPU visible here; use --device cpu or auto")
    return torch.device(name)


def sgd_step(model: nn.Module, lr: float) -> None:
    """One step of plain SGD: each weight moves against its gradient, which is then cleared."""
    with torch.no_grad():
        for weight in model.parameters():
            if weight.grad is not None:
                weight -= lr * weight.grad
                weight.grad = None


def make_loader(dataset: Dataset, batch_size: int) -> DataLoader:
    """The batches, read and decoded by worker processes while the steps run."""
    # TODO 1: let worker processes prepare the batches while the training process computes:
    #   - num_workers: 4 processes (each waits for its own files: together they read 4 batches at once);
    #   - pin_memory=True: batches in page-locked memory, which the GPU copies from asynchronously;
    #   - persistent_workers=True: keep the workers between epochs instead of starting them again;
    #   - prefetch_factor: batches each worker keeps ready (4).
    ### BEGIN SOLUTION
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=4, pin_memory=True,
                      persistent_workers=True, prefetch_factor=4)
    ### END SOLUTION


def to_device(images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch on the device; from pinned memory the process queues the copy and goes on without waiting."""
    # TODO 2: copy both tensors with non_blocking=True (from pinned memory the copy is asynchronous: the
    #   training process goes on to queue the forward pass).
    ### BEGIN SOLUTION
    return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    ### END SOLUTION


def write_times(out: str, device: torch.device, waits: list[float], steps: list[float]) -> None:
    """The per-step times, and the share of step time spent waiting for data: the median over the steps,
    the first one (which starts the loader) left out."""
    shares = [wait / step for wait, step in zip(waits[1:], steps[1:], strict=True)]
    share = statistics.median(shares) if shares else None
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": device.type, "wait_s": waits, "step_s": steps, "data_wait_share": share}))
    shown = "unknown" if share is None else f"{100 * share:.0f} %"
    print(f"waiting for data: {shown} of a step (median); times written to {path}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--read-ms", type=float, default=6.0, help="time to read one image's file")
    parser.add_argument("--width", type=int, default=1024, help="width of the hidden layers")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--out", default="loader_times.json", help="file of the per-step times (JSON)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    dataset = SlowImages(STEPS_PER_EPOCH * args.batch_size, args.read_ms, args.seed)
    loader = make_loader(dataset, args.batch_size)
    model = make_model(args.width).to(device)
    print(f"device {device}  batch {args.batch_size}  {len(loader)} steps per epoch", flush=True)
    waits: list[float] = []
    steps: list[float] = []
    last = time.perf_counter()
    while len(steps) < args.steps:  # as many epochs as the steps need
        batches = iter(loader)
        while len(steps) < args.steps:
            try:
                images, labels = next(batches)  # waiting for data
            except StopIteration:
                break
            ready = time.perf_counter()
            images, labels = to_device(images, labels, device)
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            sgd_step(model, args.lr)
            if device.type == "cuda":
                torch.cuda.synchronize()  # the step is over when the GPU is done
            now = time.perf_counter()
            waits.append(ready - last)
            steps.append(now - last)
            last = now
            print(f"step {len(steps)} wait {1000 * waits[-1]:.1f} ms step {1000 * steps[-1]:.1f} ms "
                  f"loss {loss.item():.4f}", flush=True)
    write_times(args.out, device, waits, steps)


if __name__ == "__main__":
    main()
