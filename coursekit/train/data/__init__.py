"""Datasets and loaders of the engine: ``build_data(cfg, ctx) -> DataBundle``.

``ctx`` is the run's ``DistContext`` (only ``rank``, ``world_size`` and ``device`` are used).

- ``synthetic``: random images (a small pool, repeated), for throughput; ``--gpu-resident`` keeps a
  pool of batches on ``ctx.device`` and yields them with no DataLoader at all;
- ``generated``: a learnable image set made from ``cfg.seed`` (class prototypes, random shifts, noise),
  split into train/val by ``cfg.val_fraction``;
- ``line``: regression, ``num_samples`` (100) points on y = 10 x + 2 + noise (NVIDIA DLI lab 1);
  validation is a separate draw of ``val_fraction * num_samples`` points;
- ``jpeg_folder`` / ``imagefolder``: an ImageFolder at ``data_dir`` (``train/`` + ``val/`` inside, or
  the classes directly), decoded by PIL in the workers or, with ``--gpu-decode``, by nvjpeg;
- ``cifar10``: torchvision's CIFAR-10 under ``data_dir`` (downloaded only with ``--download``);
- ``fashion-mnist``: Fashion-MNIST's IDX files from ``data_dir`` (or Debian's ``/usr/share/datasets/fashion-mnist``),
  made CIFAR-10-shaped, with CIFAR-10's augmentation on tensors (``fashion_mnist.py``): real images, no download;
- ``pointclouds``: generated tree point clouds with species classes (``pointclouds.py``);
- ``--device-data`` (fashion-mnist, cifar10, generated): the whole set held on the device as uint8 and
  augmented there, no DataLoader (``device.py``);
- ``tokens``: ``num_samples`` (2048) token sequences of ``seq_len`` over ``vocab_size`` tokens whose next
  token follows a hidden seeded rule (``make_tokens``): a language-model task the ``gpt`` learns in a
  few dozen steps; targets are the next tokens (``(seq_len,)`` per sample).

Sampling: every map-style train set uses a ``DistributedSampler`` seeded by ``cfg.seed``, also with a
single process, so that the order of samples depends on the seed and epoch only: a run on ``k``
processes sees the same global batches as one process with a ``k`` times larger batch. The engine
must call ``bundle.train_sampler.set_epoch(epoch)`` (when it is not ``None``) every epoch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset, TensorDataset

from coursekit.train.config import DATASETS
from coursekit.train.data import fashion_mnist, jpeg
from coursekit.train.data.pointclouds import DEFAULT_CLOUDS, POINTS_PER_CLOUD, make_point_clouds

SYNTHETIC_STEPS_PER_EPOCH = 100  # default synthetic length: this many global batches
SYNTHETIC_POOL = 64  # distinct synthetic images (host memory stays small at 224 px)
GPU_RESIDENT_POOL_BATCHES = 2
GENERATED_SAMPLES = 5000
GENERATED_CHANNELS = 3
GENERATED_GRID = 8  # prototypes are random GRID x GRID patterns upsampled to the image size
GENERATED_MAX_SHIFT = 1 / 4  # random circular shifts up to this share of the image side
GENERATED_NOISE_STD = 3.0  # noise std relative to the (unit-variance) prototype
GENERATED_MAX_BYTES = 4 * 2**30  # the set is held in memory (float32) by every process
LINE_POINTS = 100
LINE_SLOPE, LINE_INTERCEPT, LINE_NOISE_STD = 10.0, 2.0, 1.0
TOKENS_SAMPLES = 2048  # sequences of the token task
TOKENS_NOISE = 0.1  # share of next tokens drawn at random instead of by the hidden rule (the loss floor)
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_CLASSES = 10
CIFAR10_SIZE = 32
CIFAR10_PADDING = 4
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


class RankInfo(Protocol):
    rank: int
    world_size: int
    device: torch.device


@dataclass
class DataBundle:
    train_loader: Any  # a DataLoader or a loader-like iterable with __len__
    val_loader: Any | None  # None in test mode (cfg.test_steps)
    num_classes: int  # output size of the model (1 for regression)
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    task: str  # "classification" | "regression"
    train_sampler: DistributedSampler | None
    steps_per_epoch: int
    confirm_loader: Any | None = None  # --confirm-fraction: the validation samples the stopping evaluations leave out


def confirm_split(length: int, fraction: float) -> tuple[list[int], list[int]]:
    """The validation indices the stopping evaluations read and those held out to confirm (``fraction`` of
    them, spread evenly over the set so that both halves hold every part of it)."""
    held = [i for i in range(length) if math.floor((i + 1) * fraction) > math.floor(i * fraction)]
    chosen = set(held)
    return [i for i in range(length) if i not in chosen], held


class SyntheticImages(Dataset):
    """``length`` random images drawn from a pool of ``SYNTHETIC_POOL``, with random labels."""

    def __init__(self, length: int, shape: tuple[int, ...], num_classes: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.length = length
        self.pool = torch.randn(min(length, SYNTHETIC_POOL), *shape, generator=g)
        self.labels = torch.randint(0, num_classes, (length,), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool[index % len(self.pool)], self.labels[index]


class DeviceBatches:
    """A loader-free iterable: ``num_batches`` batches cut from a pool already on ``device``."""

    def __init__(self, num_batches: int, batch_size: int, shape: tuple[int, ...], num_classes: int,
                 device: torch.device, seed: int, channels_last: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        pool = batch_size * min(num_batches, GPU_RESIDENT_POOL_BATCHES)
        layout = torch.channels_last if channels_last else torch.contiguous_format
        self.images = torch.randn(pool, *shape, generator=g).to(device, memory_format=layout)
        self.labels = torch.randint(0, num_classes, (pool,), generator=g).to(device)
        self.num_batches, self.batch_size = num_batches, batch_size

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        slots = len(self.images) // self.batch_size
        for i in range(self.num_batches):
            start = (i % slots) * self.batch_size
            yield self.images[start:start + self.batch_size], self.labels[start:start + self.batch_size]


def make_generated_images(num_samples: int, num_classes: int, image_size: int, seed: int
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """A learnable image set: per class a smooth random prototype; each sample is its class prototype,
    circularly shifted by up to ``GENERATED_MAX_SHIFT`` of the side, plus Gaussian noise; unit variance."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randn(num_classes, GENERATED_CHANNELS, GENERATED_GRID, GENERATED_GRID, generator=g)
    protos = F.interpolate(coarse, size=(image_size, image_size), mode="bicubic", align_corners=False)
    protos = (protos - protos.mean((1, 2, 3), keepdim=True)) / protos.std((1, 2, 3), keepdim=True)
    labels = (torch.arange(num_samples) % num_classes)[torch.randperm(num_samples, generator=g)]
    max_shift = int(image_size * GENERATED_MAX_SHIFT)
    shifts = torch.randint(-max_shift, max_shift + 1, (num_samples, 2), generator=g)
    pixels = torch.arange(image_size)
    rows = ((pixels[None, :] - shifts[:, :1]) % image_size)[:, None, :, None]
    cols = ((pixels[None, :] - shifts[:, 1:]) % image_size)[:, None, None, :]
    channels = torch.arange(GENERATED_CHANNELS)[None, :, None, None]
    images = protos[labels[:, None, None, None], channels, rows, cols]
    images += GENERATED_NOISE_STD * torch.randn(images.shape, generator=g)
    return images / math.sqrt(1 + GENERATED_NOISE_STD**2), labels


def make_line(num_points: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``num_points`` pairs ``(x, y)``, x uniform in [0, 1), y = 10 x + 2 + N(0, 1); shapes (n, 1)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(num_points, 1, generator=g)
    return x, LINE_SLOPE * x + LINE_INTERCEPT + LINE_NOISE_STD * torch.randn(num_points, 1, generator=g)


def validate_loader_options(cfg: Any) -> None:
    """Loader options that only make sense with worker processes, checked before any work."""
    if cfg.workers < 0:
        raise ValueError(f"workers={cfg.workers} must be >= 0")
    if cfg.workers == 0 and cfg.prefetch_factor is not None:
        raise ValueError("prefetch_factor needs worker processes: add --workers N (N > 0) or drop --prefetch-factor")
    if cfg.workers == 0 and cfg.persistent_workers:
        raise ValueError("persistent_workers needs worker processes: add --workers N (N > 0) "
                         "or use --no-persistent-workers")


def loader_workers(requested: int, samples: int, batch_size: int) -> int:
    """Worker processes worth starting: each worker prepares whole batches, so a pass of ``n`` batches keeps
    at most ``n`` of them busy; the others would only start, prefetch nothing and be shut down."""
    return min(requested, max(1, math.ceil(samples / batch_size))) if requested > 0 else 0


def make_loader(dataset: Dataset, cfg: Any, ctx: RankInfo, train: bool, collate_fn: Any = None,
                endless: bool = False) -> tuple[DataLoader, DistributedSampler | None]:
    """A DataLoader with the config's loader options; train: sharded + shuffled by a DistributedSampler.
    ``endless`` (train): its batches run on from one epoch into the next (``jpeg.EndlessEpochs``)."""
    sampler = None
    if train or ctx.world_size > 1:
        sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=train,
                                     seed=cfg.seed)
    workers = loader_workers(cfg.workers, len(sampler) if sampler is not None else len(dataset), cfg.batch_size)
    extra: dict[str, Any] = {}
    if workers > 0:
        # validation is one short pass per epoch: its workers start for it and stop after it, instead of
        # idling (and holding their prefetched batches) beside the training workers for the whole run
        extra["persistent_workers"] = cfg.persistent_workers and train
        if cfg.prefetch_factor is not None:
            extra["prefetch_factor"] = cfg.prefetch_factor
        if getattr(cfg, "gpu_decode", False):
            # nvjpeg runs on the GPU in this process while its workers read files: a worker forked from it
            # inherits its CUDA state and aborts ("CUDA error: initialization error", lab 05 on an H200 after
            # six earlier runs in the same process); spawned workers start clean
            extra["multiprocessing_context"] = "spawn"
    if endless and sampler is not None:
        extra["batch_sampler"] = jpeg.EndlessEpochs(sampler, cfg.batch_size, cfg.drop_last and train)
    else:
        extra.update(batch_size=cfg.batch_size, sampler=sampler, drop_last=cfg.drop_last and train)
    loader = DataLoader(dataset, num_workers=workers, pin_memory=cfg.pin_memory, collate_fn=collate_fn,
                        generator=torch.Generator().manual_seed(cfg.seed + ctx.rank), **extra)
    return loader, sampler


def shutdown_workers(*loaders: Any) -> float:
    """Stop the loaders' worker processes now; returns the seconds it took.

    Persistent workers otherwise live until the interpreter exits, and there torch (2.11 and older: its
    atexit hook for ``persistent_workers`` + ``pin_memory``) joins each worker, not yet told to stop, with a
    5 s timeout: lab 05's 16 + 16 pinned persistent workers cost 160 s at exit (pytorch/pytorch#81794).
    Stopped here, each worker gets its end-of-work message and exits at once. ``GpuDecodedBatches``: its
    DataLoader."""
    started = time.perf_counter()
    for loader in loaders:
        if hasattr(loader, "close"):  # a GpuDecodedBatches: its decoding thread first, then the workers it reads from
            loader.close()
        inner = getattr(loader, "loader", loader)
        iterator = getattr(inner, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
            inner._iterator = None
    return time.perf_counter() - started


def _bundle(train_set: Dataset, val_set: Dataset | None, cfg: Any, ctx: RankInfo, num_classes: int,
            input_shape: tuple[int, ...], task: str = "classification") -> DataBundle:
    train_loader, sampler = make_loader(train_set, cfg, ctx, train=True)
    val_loader = confirm_loader = None
    if val_set is not None and len(val_set) > 0 and cfg.test_steps is None:
        fraction = getattr(cfg, "confirm_fraction", 0.0)
        if fraction and getattr(cfg, "target_acc", None) is not None:
            stopping, held = confirm_split(len(val_set), fraction)
            if not stopping or not held:
                raise ValueError(f"confirm_fraction={fraction} of {len(val_set)} validation samples leaves one part "
                                 "empty: use a fraction nearer 0.5 or a larger validation set")
            confirm_loader, _ = make_loader(Subset(val_set, held), cfg, ctx, train=False)
            val_set = Subset(val_set, stopping)
        val_loader, _ = make_loader(val_set, cfg, ctx, train=False)
    if len(train_loader) == 0:
        raise ValueError(f"the {cfg.dataset} train set ({len(train_set)} samples over {ctx.world_size} processes) "
                         f"gives no full batch of batch_size={cfg.batch_size}; lower --batch-size or drop --drop-last")
    return DataBundle(train_loader, val_loader, num_classes, tuple(input_shape), task, sampler, len(train_loader),
                      confirm_loader)


def _split(images: torch.Tensor, labels: torch.Tensor, val_fraction: float) -> tuple[TensorDataset, TensorDataset]:
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction={val_fraction} must be in [0, 1)")
    n_val = int(len(images) * val_fraction)
    n_train = len(images) - n_val
    return TensorDataset(images[:n_train], labels[:n_train]), TensorDataset(images[n_train:], labels[n_train:])


def _synthetic(cfg: Any, ctx: RankInfo) -> DataBundle:
    shape = (3, cfg.image_size, cfg.image_size)
    length = cfg.num_samples or SYNTHETIC_STEPS_PER_EPOCH * cfg.batch_size * ctx.world_size
    n_val = int(length * cfg.val_fraction)
    if not cfg.gpu_resident:
        val = SyntheticImages(n_val, shape, cfg.num_classes, cfg.seed + 1) if n_val else None
        return _bundle(SyntheticImages(length, shape, cfg.num_classes, cfg.seed), val, cfg, ctx, cfg.num_classes, shape)
    per_rank = length // ctx.world_size
    steps = per_rank // cfg.batch_size if cfg.drop_last else math.ceil(per_rank / cfg.batch_size)
    train = DeviceBatches(max(steps, 1), cfg.batch_size, shape, cfg.num_classes, ctx.device, cfg.seed + ctx.rank,
                          cfg.channels_last)
    val = None
    if n_val and cfg.test_steps is None:
        val_steps = math.ceil(n_val / ctx.world_size / cfg.batch_size)
        val = DeviceBatches(val_steps, cfg.batch_size, shape, cfg.num_classes, ctx.device, cfg.seed + 1,
                            cfg.channels_last)
    return DataBundle(train, val, cfg.num_classes, shape, "classification", None, len(train))


def data_seed(cfg: Any) -> int:
    """The seed of generated data and of a val split: ``--data-seed``, else ``--seed``."""
    return cfg.seed if getattr(cfg, "data_seed", None) is None else cfg.data_seed


def _generated(cfg: Any, ctx: RankInfo) -> DataBundle:
    n = cfg.num_samples or GENERATED_SAMPLES
    size_bytes = n * GENERATED_CHANNELS * cfg.image_size**2 * 4
    if size_bytes > GENERATED_MAX_BYTES:
        raise ValueError(f"the generated set ({n} images of {cfg.image_size} px) would take {size_bytes / 2**30:.1f} "
                         f"GiB of host memory per process; lower --num-samples or --image-size, or use --dataset "
                         "synthetic for throughput runs")
    images, labels = make_generated_images(n, cfg.num_classes, cfg.image_size, data_seed(cfg))
    train, val = _split(images, labels, cfg.val_fraction)
    return _bundle(train, val, cfg, ctx, cfg.num_classes, tuple(images.shape[1:]))


def make_tokens(num_sequences: int, seq_len: int, vocab_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences whose next token follows a hidden rule: ``next = rule[previous]`` (a random
    permutation of the vocabulary drawn from ``seed``), replaced by a uniformly random token with
    probability ``TOKENS_NOISE``. Inputs ``(n, seq_len)`` and targets (the inputs shifted by one)."""
    g = torch.Generator().manual_seed(seed)
    rule = torch.randperm(vocab_size, generator=g)
    tokens = torch.empty(num_sequences, seq_len + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(vocab_size, (num_sequences,), generator=g)
    noise = torch.rand(num_sequences, seq_len, generator=g) < TOKENS_NOISE
    random_tokens = torch.randint(vocab_size, (num_sequences, seq_len), generator=g)
    for t in range(seq_len):
        tokens[:, t + 1] = torch.where(noise[:, t], random_tokens[:, t], rule[tokens[:, t]])
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _tokens(cfg: Any, ctx: RankInfo) -> DataBundle:
    seed = cfg.seed if getattr(cfg, "data_seed", None) is None else cfg.data_seed
    inputs, targets = make_tokens(cfg.num_samples or TOKENS_SAMPLES, cfg.seq_len, cfg.vocab_size, seed)
    train, val = _split(inputs, targets, cfg.val_fraction)
    return _bundle(train, val, cfg, ctx, cfg.vocab_size, (cfg.seq_len,))


def _line(cfg: Any, ctx: RankInfo) -> DataBundle:
    n = cfg.num_samples or LINE_POINTS
    train = TensorDataset(*make_line(n, cfg.seed))
    n_val = int(n * cfg.val_fraction)
    val = TensorDataset(*make_line(n_val, cfg.seed + 1)) if n_val else None
    return _bundle(train, val, cfg, ctx, 1, (1,), task="regression")


def _pointclouds(cfg: Any, ctx: RankInfo) -> DataBundle:
    points, labels = make_point_clouds(cfg.num_samples or DEFAULT_CLOUDS, cfg.num_classes, POINTS_PER_CLOUD, cfg.seed)
    train, val = _split(points, labels, cfg.val_fraction)
    return _bundle(train, val, cfg, ctx, cfg.num_classes, tuple(points.shape[1:]))


def _require_dir(cfg: Any, hint: str) -> Path:
    if not cfg.data_dir:
        raise ValueError(f"dataset={cfg.dataset!r} needs --data-dir DIR ({hint})")
    path = Path(cfg.data_dir).expanduser()
    if not path.is_dir() and not (cfg.dataset == "cifar10" and cfg.download):
        raise ValueError(f"data_dir={str(path)!r} does not exist or is not a folder ({hint})")
    return path


def _cifar10(cfg: Any, ctx: RankInfo) -> DataBundle:
    from torchvision import datasets, transforms

    root = _require_dir(cfg, "the folder holding cifar-10-batches-py/, or where --download puts it")
    if not (root / CIFAR10_FOLDER).is_dir() and not cfg.download:
        raise ValueError(f"CIFAR-10 is not in data_dir={str(root)!r} (no {CIFAR10_FOLDER}/ there): download it once "
                         "with --download on a node with internet access (e.g. the login node), or fix --data-dir")
    resize = [transforms.Resize(cfg.image_size)] if cfg.image_size != CIFAR10_SIZE else []
    tail = [transforms.ToTensor(), transforms.Normalize(CIFAR10_MEAN, CIFAR10_STD)]
    augment = [transforms.RandomCrop(CIFAR10_SIZE, padding=CIFAR10_PADDING), transforms.RandomHorizontalFlip()]
    if cfg.download and ctx.world_size > 1:
        raise ValueError(f"--download must run in a single process (e.g. once on the login node), not in a "
                         f"{ctx.world_size}-process job")
    train = datasets.CIFAR10(str(root), train=True, download=cfg.download,
                             transform=transforms.Compose(augment + resize + tail))
    val = datasets.CIFAR10(str(root), train=False, download=False, transform=transforms.Compose(resize + tail))
    if cfg.num_samples is not None:  # a course-sized subset: the first N training images (classes are mixed)
        if cfg.num_samples > len(train):
            raise ValueError(f"num_samples={cfg.num_samples} is more than CIFAR-10's {len(train):,} training images: "
                             "lower it, or leave it out to train on all of them")
        train = torch.utils.data.Subset(train, range(cfg.num_samples))
    return _bundle(train, val, cfg, ctx, CIFAR10_CLASSES, (3, cfg.image_size, cfg.image_size))



def _fashion_mnist(cfg: Any, ctx: RankInfo) -> DataBundle:
    """Fashion-MNIST: the first ``num_samples`` training images (all 60,000 without it), the 10,000 test images
    as the validation set; ``(3, image_size, image_size)`` samples like CIFAR-10's."""
    data = fashion_mnist.load(cfg.data_dir, cfg.image_size, cfg.num_samples)
    return _bundle(data.train, data.val, cfg, ctx, fashion_mnist.NUM_CLASSES, (3, cfg.image_size, cfg.image_size))

def _image_folder(cfg: Any, ctx: RankInfo) -> DataBundle:
    root = _require_dir(cfg, "an ImageFolder: train/ and val/ with one sub-folder per class")
    train_dir, val_dir = jpeg.split_folders(root)
    if cfg.gpu_decode and ctx.device.type != "cuda":
        raise ValueError(f"gpu_decode decodes JPEGs with nvjpeg and needs a CUDA device, but this run is on "
                         f"{ctx.device}; drop --gpu-decode (PIL decodes on the CPU) or run on a GPU")
    train_set = jpeg.image_folder(train_dir, cfg.image_size, train=True, raw_bytes=cfg.gpu_decode)
    num_classes = len(train_set.classes)
    if val_dir is not None:
        val_set = jpeg.image_folder(val_dir, cfg.image_size, train=False, raw_bytes=cfg.gpu_decode)
    else:  # one folder: split it by val_fraction (same files, different transforms)
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(data_seed(cfg))).tolist()
        n_val = int(len(order) * cfg.val_fraction)
        val_set = Subset(jpeg.image_folder(train_dir, cfg.image_size, train=False, raw_bytes=cfg.gpu_decode),
                         order[:n_val])
        train_set = Subset(train_set, order[n_val:])
    shape = (3, cfg.image_size, cfg.image_size)
    if not cfg.gpu_decode:
        return _bundle(train_set, val_set, cfg, ctx, num_classes, shape)
    train_loader, sampler = make_loader(train_set, cfg, ctx, train=True, collate_fn=jpeg.collate_bytes, endless=True)
    train = jpeg.GpuDecodedBatches(train_loader, ctx.device, cfg.image_size, train=True, seed=cfg.seed + ctx.rank,
                                   channels_last=cfg.channels_last)
    val = None
    if len(val_set) > 0 and cfg.test_steps is None:
        val_loader, _ = make_loader(val_set, cfg, ctx, train=False, collate_fn=jpeg.collate_bytes)
        val = jpeg.GpuDecodedBatches(val_loader, ctx.device, cfg.image_size, train=False,
                                     channels_last=cfg.channels_last)
    return DataBundle(train, val, num_classes, shape, "classification", sampler, len(train))


BUILDERS = {"synthetic": _synthetic, "generated": _generated, "line": _line, "jpeg_folder": _image_folder,
            "imagefolder": _image_folder, "cifar10": _cifar10, "fashion-mnist": _fashion_mnist,
            "pointclouds": _pointclouds, "tokens": _tokens}


def build_data(cfg: Any, ctx: RankInfo) -> DataBundle:
    """Datasets and loaders of ``cfg.dataset`` for this process (see the module docstring)."""
    if cfg.dataset not in BUILDERS:
        raise ValueError(f"dataset={cfg.dataset!r} is unknown; choose one of {', '.join(DATASETS)}")
    validate_loader_options(cfg)
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size={cfg.batch_size} must be >= 1")
    if cfg.gpu_resident and cfg.dataset != "synthetic":
        raise ValueError(f"gpu_resident applies to --dataset synthetic only (got {cfg.dataset!r})")
    if cfg.gpu_decode and cfg.dataset not in ("jpeg_folder", "imagefolder"):
        raise ValueError(f"gpu_decode applies to JPEG folders (jpeg_folder, imagefolder), not {cfg.dataset!r}")
    if cfg.num_samples is not None and cfg.num_samples < 1:
        raise ValueError(f"num_samples={cfg.num_samples} must be >= 1")
    if getattr(cfg, "device_data", False):  # the whole set on the device, no DataLoader (device.py)
        from coursekit.train.data.device import build_device_data

        generated = make_generated_images(cfg.num_samples or GENERATED_SAMPLES, cfg.num_classes, cfg.image_size,
                                          data_seed(cfg)) if cfg.dataset == "generated" else None
        train, val, num_classes, shape = build_device_data(cfg, ctx, generated)
        if len(train) == 0:
            raise ValueError(f"the {cfg.dataset} train set gives no full batch of batch_size={cfg.batch_size}; "
                             "lower --batch-size or drop --drop-last")
        return DataBundle(train, val, num_classes, shape, "classification", train, len(train))  # type: ignore[arg-type]
    return BUILDERS[cfg.dataset](cfg, ctx)
