"""The whole data set on the device, augmented there: ``--device-data`` (lab 07; airbench's input pipeline).

Training and validation images are held on ``ctx.device`` as ``uint8`` (Fashion-MNIST: 60,000 + 10,000
images, 70 MB; CIFAR-10 180 MB), training images already reflect-padded by ``PAD``. A batch is a gather of
random ``side x side`` windows (random crop = translate by up to ``PAD`` pixels), mirrored at random, then
normalised: a few tensor operations on the device, no DataLoader, no worker, no host copy, so a small batch
is never loader-bound. The order and the augmentation of an epoch are drawn on the CPU from ``(seed, epoch)``
(``set_epoch``), so a run is the same on a CPU and a GPU and resumes mid-epoch exactly.

``--holdout-samples N`` makes the last ``N`` training images the validation set (a held-out split, for a
target accuracy that is not tuned on the test set); ``--num-samples`` takes the first training images.
``generated`` (the stand-in) is kept as float: it has no pixels to quantise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from coursekit.train.data import fashion_mnist

DEVICE_DATASETS = ("fashion-mnist", "cifar10", "generated")
PAD = 2  # reflect padding of the random crop (airbench's translate by up to 2 pixels)
FLIP_PROBABILITY = 0.5
EPOCH_SEED_STRIDE = 1_000_003  # (seed, epoch) -> one CPU generator seed
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
VAL_BATCH_MIN = 1000  # validation batches: at least this many images (BN in eval mode: the size changes nothing)


class DeviceImages:
    """A loader-like iterable over images held on ``device``: ``len()`` batches an epoch, ``set_epoch(e)``.

    ``images``: ``(n, c, h, w)``, ``uint8`` (normalised with ``mean``/``std`` per channel after the crop) or
    float (used as is); ``train``: shuffled, random crop (reflect padding ``PAD``) and flip. ``channels``:
    channels of the output (a grey image is repeated). This rank takes every ``world_size``-th sample of the
    epoch's order."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, *, train: bool,
                 mean: tuple[float, ...] = (0.0,), std: tuple[float, ...] = (1.0,), channels: int | None = None,
                 seed: int = 0, rank: int = 0, world_size: int = 1, drop_last: bool = False,
                 channels_last: bool = False) -> None:
        if images.dim() != 4 or len(images) != len(labels):
            raise ValueError(f"images must be (n, c, h, w) with one label each, got {tuple(images.shape)} and "
                             f"{len(labels)} labels")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        self.side = images.shape[-1]
        self.train, self.batch_size, self.seed, self.drop_last = train, batch_size, seed, drop_last
        self.rank, self.world_size, self.channels_last = rank, world_size, channels_last
        self.channels = channels or images.shape[1]
        self.quantised = images.dtype == torch.uint8
        if train:  # pad once: a batch is then one gather of windows
            padded = F.pad(images.float(), (PAD,) * 4, mode="reflect")
            images = padded.round().to(torch.uint8) if self.quantised else padded
        self.images, self.labels = images, labels.long()
        shape = (1, -1, 1, 1)
        self.mean = torch.tensor(mean, device=images.device).view(shape)
        self.scale = 1 / (torch.tensor(std, device=images.device) * (255 if self.quantised else 1)).view(shape)
        self.epoch = 0
        self.dataset = TensorDataset(self.images, self.labels)  # what target.val_fingerprint hashes

    def __len__(self) -> int:
        per_rank = len(self.labels) // self.world_size
        return per_rank // self.batch_size if self.drop_last else math.ceil(per_rank / self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _draws(self) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """This epoch's order and, in training, each sample's window corner and flip (drawn on the CPU)."""
        n = len(self.labels)
        if not self.train:
            return torch.arange(n), None, None
        g = torch.Generator().manual_seed(self.seed * EPOCH_SEED_STRIDE + self.epoch)
        order = torch.randperm(n, generator=g)
        corners = torch.randint(0, 2 * PAD + 1, (n, 2), generator=g)
        flips = torch.rand(n, generator=g) < FLIP_PROBABILITY
        return order, corners, flips

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # the epoch's draws go to the device once: a small host-to-device copy per step (pageable memory) would
        # make the host wait for the GPU every step, and launch-bound small batches would lose their overlap
        device = self.images.device
        order, corners, flips = (None if d is None else d.to(device) for d in self._draws())
        per_rank = len(order) // self.world_size
        order = order[self.rank::self.world_size][:per_rank]
        for i in range(len(self)):
            index = order[i * self.batch_size:(i + 1) * self.batch_size]
            if corners is not None and flips is not None:
                yield self._augmented(index, corners[index], flips[index])
            else:
                yield self._finish(self.images[index]), self.labels[index]

    def _augmented(self, index: torch.Tensor, corners: torch.Tensor, flips: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        steps = torch.arange(self.side, device=index.device)
        rows = corners[:, :1] + steps  # (b, side)
        columns = corners[:, 1:] + torch.where(flips[:, None], steps.flip(0), steps)
        # (b, side, side, c): the windows, channels last
        windows = self.images[index[:, None, None], :, rows[:, :, None], columns[:, None, :]]
        return self._finish(windows.permute(0, 3, 1, 2)), self.labels[index]

    def _finish(self, pixels: torch.Tensor) -> torch.Tensor:
        x = (pixels.float() - self.mean * (255 if self.quantised else 1)) * self.scale
        if x.shape[1] != self.channels:
            x = x.expand(-1, self.channels, -1, -1)
        layout = torch.channels_last if self.channels_last else torch.contiguous_format
        return x.contiguous(memory_format=layout)


def _resize(images: torch.Tensor, size: int) -> torch.Tensor:
    if images.shape[-1] == size:
        return images
    resized = F.interpolate(images.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return resized.round().clamp(0, 255).to(torch.uint8) if images.dtype == torch.uint8 else resized


def _fashion_arrays(cfg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple, tuple, int]:
    arrays = fashion_mnist.load_arrays(fashion_mnist.data_folder(cfg.data_dir))
    return (arrays["train-images-idx3-ubyte"][:, None], arrays["train-labels-idx1-ubyte"],
            arrays["t10k-images-idx3-ubyte"][:, None], arrays["t10k-labels-idx1-ubyte"],
            (fashion_mnist.MEAN,), (fashion_mnist.STD,), fashion_mnist.NUM_CLASSES)


def _cifar10_arrays(cfg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, tuple, tuple, int]:
    from torchvision import datasets

    train = datasets.CIFAR10(str(cfg.data_dir), train=True, download=False)
    test = datasets.CIFAR10(str(cfg.data_dir), train=False, download=False)
    return (train.data.transpose(0, 3, 1, 2), np.asarray(train.targets), test.data.transpose(0, 3, 1, 2),
            np.asarray(test.targets), CIFAR10_MEAN, CIFAR10_STD, len(train.classes))


def _split(cfg: Any, n_train: int) -> tuple[slice, slice | None]:
    """The training images used (the first ``num_samples``) and the held-out ones (the last ``holdout_samples``)."""
    holdout = cfg.holdout_samples or 0
    used = cfg.num_samples if cfg.num_samples is not None else n_train - holdout
    if used + holdout > n_train:
        raise ValueError(f"num_samples={used} + holdout_samples={holdout} is more than the {n_train:,} training "
                         "images: lower one of them")
    return slice(0, used), (slice(n_train - holdout, n_train) if holdout else None)


def build_device_data(cfg: Any, ctx: Any, generated: tuple[torch.Tensor, torch.Tensor] | None = None
                      ) -> tuple[DeviceImages, DeviceImages | None, int, tuple[int, int, int]]:
    """Train and validation loaders on ``ctx.device`` for ``cfg`` (see the module docstring), the number of
    classes and the sample shape; ``generated``: the images and labels of ``--dataset generated``."""
    if cfg.dataset not in DEVICE_DATASETS:
        raise ValueError(f"device_data holds {', '.join(DEVICE_DATASETS)}, not dataset={cfg.dataset!r}")
    if cfg.dataset == "generated":
        if generated is None:
            raise ValueError("dataset='generated' on the device needs its images (build_data makes them)")
        images, labels = generated
        n = len(labels)
        n_val = int(n * cfg.val_fraction) if not cfg.holdout_samples else 0
        train_x, train_y = images[:n - n_val].numpy(), labels[:n - n_val].numpy()
        val_x, val_y = images[n - n_val:].numpy(), labels[n - n_val:].numpy()
        mean, std, num_classes = (0.0,), (1.0,), cfg.num_classes
        train_cut = slice(0, len(train_y) - (cfg.holdout_samples or 0))
        hold = slice(len(train_y) - cfg.holdout_samples, len(train_y)) if cfg.holdout_samples else None
        if train_cut.stop < 1:
            raise ValueError(f"holdout_samples={cfg.holdout_samples} leaves no training images of {len(train_y)}")
    else:
        loader = _fashion_arrays if cfg.dataset == "fashion-mnist" else _cifar10_arrays
        train_x, train_y, val_x, val_y, mean, std, num_classes = loader(cfg)
        train_cut, hold = _split(cfg, len(train_y))
    if hold is not None:
        val_x, val_y = train_x[hold], train_y[hold]
    device = ctx.device

    border = fashion_mnist.BORDER if cfg.dataset == "fashion-mnist" else 0  # zero-pad 28 -> 32, as the loader does

    def tensor(array: np.ndarray) -> torch.Tensor:
        images = F.pad(torch.from_numpy(np.ascontiguousarray(array)), (border,) * 4)
        return _resize(images, cfg.image_size).to(device)

    common = {"mean": mean, "std": std, "channels": 3 if cfg.dataset != "generated" else None,
              "rank": ctx.rank, "world_size": ctx.world_size, "channels_last": cfg.channels_last}
    train = DeviceImages(tensor(train_x[train_cut]), torch.from_numpy(np.asarray(train_y[train_cut])).to(device),
                         cfg.batch_size, train=True, seed=cfg.seed, drop_last=cfg.drop_last, **common)
    val = None
    if len(val_y) and cfg.test_steps is None:
        val = DeviceImages(tensor(val_x), torch.from_numpy(np.asarray(val_y)).to(device),
                           max(cfg.batch_size, VAL_BATCH_MIN), train=False, **common)  # few launches per evaluation
    return train, val, num_classes, (train.channels, cfg.image_size, cfg.image_size)
