"""Train a small CNN on one device: the serial script that lab 06 makes data parallel (train_ddp.py).

    python train_serial.py --epochs 3 --batch-size 64 --out checkpoints/serial

The data are made here, from --seed alone (no download): 12x12 grey images of stripes at one of four
angles, with a random phase and noise; the task is to tell the angle. The same options give the same
weights. The model has no BatchNorm and no dropout, so that N processes of the DDP version at
--batch-size B can be compared with this script at --batch-size N*B, weight for weight.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

IMAGE_SIZE = 12
N_CLASSES = 4
STRIPE_FREQUENCY = 1.3  # radians per pixel
NOISE = 1.5  # standard deviation of the pixel noise; the stripes have amplitude 1
VALIDATION_SHARE = 4  # one validation image for every 4 training images
VALIDATION_BATCH = 256
MOMENTUM = 0.9
CHECKPOINT = "checkpoint.pt"


def make_datasets(size: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """`size` training images and `size // 4` validation images with their labels (0..3)."""
    g = torch.Generator().manual_seed(seed)
    n = size + size // VALIDATION_SHARE
    labels = torch.randint(N_CLASSES, (n,), generator=g)
    angle = (labels * math.pi / N_CLASSES)[:, None, None]
    phase = (torch.rand(n, generator=g) * 2 * math.pi)[:, None, None]
    coords = torch.arange(IMAGE_SIZE, dtype=torch.float32)
    y, x = torch.meshgrid(coords, coords, indexing="ij")
    stripes = torch.sin(STRIPE_FREQUENCY * (x * torch.cos(angle) + y * torch.sin(angle)) + phase)
    images = (stripes + NOISE * torch.randn(n, IMAGE_SIZE, IMAGE_SIZE, generator=g)).unsqueeze(1)
    return TensorDataset(images[:size], labels[:size]), TensorDataset(images[size:], labels[size:])


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(32, N_CLASSES))


class EpochShuffle(Sampler[int]):
    """A new order every epoch that depends on (seed, epoch) only: reproducible, and the very order
    torch's DistributedSampler deals out to its ranks, so the DDP version can be checked against us."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


def train_one_epoch(model, loader, optimizer, device) -> tuple[float, int]:
    """Sum of the batch losses and number of steps."""
    model.train()
    loss_sum, steps = 0.0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum, steps = loss_sum + loss.item(), steps + 1
    return loss_sum, steps


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[int, int]:
    """Correct predictions and number of images."""
    model.eval()
    correct = total = 0
    for images, labels in loader:
        predicted = model(images.to(device)).argmax(dim=1)
        correct += (predicted == labels.to(device)).sum().item()
        total += len(labels)
    return correct, total


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-size", type=int, default=2048, help="training images (validation: a quarter)")
    parser.add_argument("--out", default="checkpoints", help="folder of the checkpoint")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_set, val_set = make_datasets(args.data_size, args.seed)
    torch.manual_seed(args.seed)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM)
    sampler = EpochShuffle(len(train_set), args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    val_loader = DataLoader(val_set, batch_size=VALIDATION_BATCH)
    print(f"device {device}  batch {args.batch_size}  {len(train_set)} training / {len(val_set)} validation images")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        start = time.perf_counter()
        loss_sum, steps = train_one_epoch(model, train_loader, optimizer, device)
        images_per_s = len(train_set) / (time.perf_counter() - start)
        correct, total = evaluate(model, val_loader, device)
        print(f"epoch {epoch + 1}/{args.epochs}  train_loss {loss_sum / steps:.4f}  val_acc {correct / total:.4f}"
              f"  {images_per_s:.0f} img/s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"model": model.state_dict(), "epochs": args.epochs, "val_acc": correct / total}, out / CHECKPOINT)
    print(f"saved {out / CHECKPOINT}")


if __name__ == "__main__":
    main()
