"""JPEG folders: a generator of ImageNet-like JPEG trees, and the two ways of reading them.

- ``write_synthetic_jpeg_tree(root, num_classes, images_per_class)`` writes ``root/train/<class>/*.jpg``
  and ``root/val/<class>/*.jpg``: 500x375 images of about 100 kB (ImageNet's typical size), each a
  class-specific colour layout + per-image variation + texture, so the classes can be learnt.
  CLI: ``python -m coursekit.train.data.jpeg --out DIR --classes 10 --images-per-class 100 --workers 8``.
- CPU decoding: torchvision ``ImageFolder`` + PIL, ``RandomResizedCrop`` (train) or resize + centre
  crop (val), in the DataLoader's workers.
- GPU decoding (``--gpu-decode``): the workers only read the files' bytes; ``GpuDecodedBatches``
  decodes each batch on the GPU, then crops, resizes, flips and normalises there, in a background thread
  on its own CUDA stream, a few batches ahead and on into the next epoch, so that decoding overlaps the
  training step; the train loader's workers never stop between epochs (``EndlessEpochs``). The decoder:
  torchvision's ``decode_jpeg(device="cuda")`` (nvjpeg's CUDA kernels, on the SMs), or with
  ``$COURSEKIT_JPEG_DECODER=nvimgcodec`` nvImageCodec (``pip install nvidia-nvimgcodec-cu13``) on the
  GPU's hardware JPEG engines (A100, H100, H200), which do not use the SMs but fed the step less well on
  an H100 (``DEFAULT_DECODER``); ``GpuDecodedBatches.decoder_name`` says which ran.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import math
import os
import queue
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Sampler

if TYPE_CHECKING:  # torchvision is imported where it is used: ~1 s off every job that reads no JPEGs
    from torchvision import datasets, transforms

JPEG_SIZE = (500, 375)  # width, height
JPEG_QUALITY = 90
LAYOUT_GRID = (6, 8)  # rows, columns of the class colour layout
DETAIL_GRID = (48, 64)
LAYOUT_VARIATION = 40.0  # per-image change of the layout (grey levels)
DETAIL_STD = 40.0
PIXEL_NOISE_STD = 17.0  # gives ~100 kB files at 500x375, quality 90
VAL_SHARE = 0.1
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_RATIO = 256 / 224  # val: resize the short side to image_size * this, then centre-crop
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
CROP_ATTEMPTS = 10
JPEG_EXTENSIONS = (".jpg", ".jpeg")  # matched case-insensitively
PREFETCH_BATCHES = 4  # GPU decoding: batches decoded ahead by the background thread
QUEUE_POLL_S = 0.05
DECODER_ENV = "COURSEKIT_JPEG_DECODER"
DECODERS = ("nvimgcodec", "torchvision")
# the faster of the two beside a ResNet-50 step on an H100 in each of four records of bench/jpeg_decode_gpu.py
# (2026-11-26): torchvision 0.89 / 0.82 / 0.91 / 0.92x synthetic, nvImageCodec's hardware engines 0.87 / 0.77 /
# 0.87 / 0.89x (the last: 3 runs each; bench/REPORT-gpu.md)
DEFAULT_DECODER = "torchvision"


# ----------------------------------------------------------------------------- generator


def _class_layout(seed: int, label: int) -> np.ndarray:
    return np.random.default_rng([seed, label]).uniform(0, 255, (*LAYOUT_GRID, 3))


def synthetic_jpeg_image(layout: np.ndarray, rng: np.random.Generator, size: tuple[int, int]) -> Image.Image:
    """One image: the class layout, varied, upsampled, plus texture and pixel noise."""
    width, height = size
    varied = np.clip(layout + rng.normal(0, LAYOUT_VARIATION, layout.shape), 0, 255).astype(np.uint8)
    base = np.asarray(Image.fromarray(varied).resize(size, Image.BICUBIC), dtype=np.float32)
    detail = np.clip(rng.normal(128, DETAIL_STD, (*DETAIL_GRID, 3)), 0, 255).astype(np.uint8)
    texture = np.asarray(Image.fromarray(detail).resize(size, Image.BILINEAR), dtype=np.float32) - 128
    pixels = base + texture + rng.normal(0, PIXEL_NOISE_STD, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _write_class(root: str, split: str, label: int, count: int, size: tuple[int, int], seed: int,
                 quality: int) -> int:
    folder = Path(root) / split / f"class_{label:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, label, 0 if split == "train" else 1])
    layout = _class_layout(seed, label)
    written = 0
    for i in range(count):
        path = folder / f"{split}_{label:04d}_{i:06d}.jpg"
        synthetic_jpeg_image(layout, rng, size).save(path, "JPEG", quality=quality)
        written += path.stat().st_size
    return written


def write_synthetic_jpeg_tree(root: str | Path, num_classes: int, images_per_class: int,
                              size: tuple[int, int] = JPEG_SIZE, *, val_images_per_class: int | None = None,
                              seed: int = 0, quality: int = JPEG_QUALITY, workers: int = 1) -> dict[str, Any]:
    """Write ``root/{train,val}/class_NNNN/*.jpg``; returns counts, bytes and seconds."""
    if num_classes < 1 or images_per_class < 1:
        raise ValueError(f"num_classes ({num_classes}) and images_per_class ({images_per_class}) must be >= 1")
    if val_images_per_class is None:
        val_images_per_class = max(1, math.ceil(VAL_SHARE * images_per_class))
    jobs = [(str(root), split, label, count, tuple(size), seed, quality)
            for split, count in (("train", images_per_class), ("val", val_images_per_class)) if count > 0
            for label in range(num_classes)]
    start = time.perf_counter()
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            sizes = list(pool.map(_write_class, *zip(*jobs, strict=True)))
    else:
        sizes = [_write_class(*job) for job in jobs]
    images = num_classes * (images_per_class + val_images_per_class)
    return {"root": str(root), "images": images, "bytes": sum(sizes), "seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------- datasets


def split_folders(data_dir: Path) -> tuple[Path, Path | None]:
    """ImageNet layout ``data_dir/train`` (+ ``data_dir/val``), else ``data_dir`` itself and no val folder."""
    train = data_dir / "train"
    if train.is_dir():
        val = data_dir / "val"
        return train, (val if val.is_dir() else None)
    return data_dir, None


def cpu_transform(image_size: int, train: bool) -> transforms.Compose:
    from torchvision import transforms

    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if train:
        return transforms.Compose([transforms.RandomResizedCrop(image_size, scale=CROP_SCALE, ratio=CROP_RATIO),
                                   transforms.RandomHorizontalFlip(), transforms.ToTensor(), normalize])
    return transforms.Compose([transforms.Resize(round(image_size * RESIZE_RATIO)), transforms.CenterCrop(image_size),
                               transforms.ToTensor(), normalize])


def read_bytes(path: str) -> torch.Tensor:
    """A file's bytes as a uint8 tensor, in a loader worker, without importing ``torchvision.io`` there (a worker
    forked from a process that uses CUDA aborted inside that import on an H200: lab 05's nvjpeg run; such workers
    are spawned now, ``make_loader``, and need none of torchvision.io's CUDA code to read bytes)."""
    return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8)


def image_folder(root: Path, image_size: int, train: bool, raw_bytes: bool) -> datasets.DatasetFolder:
    """An ImageFolder of ``root`` giving decoded, transformed tensors, or the files' raw bytes."""
    from torchvision import datasets

    try:
        if raw_bytes:
            return datasets.DatasetFolder(str(root), loader=read_bytes, extensions=JPEG_EXTENSIONS)
        return datasets.ImageFolder(str(root), transform=cpu_transform(image_size, train))
    except FileNotFoundError as err:
        raise ValueError(f"data_dir: no class folders with images under {root} ({err}); write a synthetic tree "
                         "with `python -m coursekit.train.data.jpeg --out DIR` or pass --data-dir of an ImageFolder") from err


def collate_bytes(batch: list[tuple[torch.Tensor, int]]) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Pack a batch's JPEG files into one byte tensor + their lengths.

    One tensor crosses from a loader worker, not one per image: a list of hundreds of small tensors
    exhausts the file descriptors of torch's shared-memory transfer and hangs the loader.
    """
    files = [data for data, _ in batch]
    packed = torch.cat(files) if files else torch.empty(0, dtype=torch.uint8)
    lengths = torch.tensor([len(data) for data in files], dtype=torch.int64)
    return (packed, lengths), torch.tensor([label for _, label in batch])


def unpack_bytes(encoded: Any) -> list[torch.Tensor]:
    """The per-image byte tensors of a batch, from ``collate_bytes``' packing or from a plain list."""
    if isinstance(encoded, tuple) and len(encoded) == 2 and isinstance(encoded[0], torch.Tensor):
        packed, lengths = encoded
        return list(torch.split(packed, lengths.tolist()))
    return list(encoded)


# ----------------------------------------------------------------------------- GPU decoding


def random_resized_box(height: int, width: int, rng: random.Random) -> tuple[int, int, int, int]:
    """``(top, left, h, w)`` of torchvision's RandomResizedCrop, drawn from ``rng``."""
    area = height * width
    for _ in range(CROP_ATTEMPTS):
        target = area * rng.uniform(*CROP_SCALE)
        ratio = math.exp(rng.uniform(math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1])))
        w, h = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    side = min(height, width)  # fallback: the central square
    return (height - side) // 2, (width - side) // 2, side, side


def center_box(height: int, width: int, image_size: int) -> tuple[int, int, int, int]:
    """The box that resize-short-side-to ``image_size * RESIZE_RATIO`` + centre crop keeps."""
    side = min(round(min(height, width) / RESIZE_RATIO), height, width)
    return (height - side) // 2, (width - side) // 2, side, side


JpegDecoder = Callable[[list[torch.Tensor]], list[torch.Tensor]]  # JPEG bytes -> (3, H, W) uint8 on the GPU


def torchvision_decoder(device: torch.device) -> JpegDecoder:
    """torchvision's nvjpeg decoding (CUDA kernels on the SMs)."""
    from torchvision import io

    return lambda encoded: list(io.decode_jpeg(encoded, mode=io.ImageReadMode.RGB, device=device))


def _preload_nvjpeg() -> None:
    """nvImageCodec's JPEG extension opens ``libnvjpeg.so.13`` (the nvidia-nvjpeg package, not installed with
    torch): torchvision's wheel carries one with that soname, and a library already loaded is found by its
    soname, so loading torchvision's copy first lets nvImageCodec use it."""
    import ctypes
    import importlib.util

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    for library in sorted((Path(spec.origin).parent.parent / "torchvision.libs").glob("libnvjpeg*.so*")):
        with contextlib.suppress(OSError):
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


NVIMGCODEC_BACKENDS = {"hardware": "HW_GPU_ONLY", "cuda": "GPU_ONLY"}  # our names -> nvImageCodec's BackendKind


def nvimgcodec_decoder(device: torch.device, backends: tuple[str, ...] = ("hardware", "cuda"),
                       cpu_threads: int | None = None) -> JpegDecoder | None:
    """nvImageCodec on the GPU's hardware JPEG engines (its CUDA decoder where an image needs it); None where
    the package or a GPU decoder is absent. Decodes on the current CUDA stream. ``backends`` (names of
    ``NVIMGCODEC_BACKENDS``, in order of preference) and ``cpu_threads`` (its helper threads; None: its
    default, one per core) are there for bench/jpeg_decode_gpu.py to tell the backends apart."""
    unknown = [b for b in backends if b not in NVIMGCODEC_BACKENDS]
    if unknown or not backends:
        raise ValueError(f"backends={backends!r}: use some of {', '.join(NVIMGCODEC_BACKENDS)}")
    try:
        from nvidia import nvimgcodec
    except ImportError:
        return None
    _preload_nvjpeg()
    try:
        kinds = [nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, NVIMGCODEC_BACKENDS[b])) for b in backends]
        threads = {} if cpu_threads is None else {"max_num_cpu_threads": cpu_threads}
        decoder = nvimgcodec.Decoder(device_id=device.index or 0, backends=kinds, **threads)
        options = {"color_spec": nvimgcodec.ColorSpec.SRGB, "allow_any_depth": False, "apply_exif_orientation": False}
        try:  # interleaved RGB (H, W, 3); older releases have no sample_format and give it by default
            params = nvimgcodec.DecodeParams(**options, sample_format=nvimgcodec.SampleFormat.I_RGB)
        except (AttributeError, TypeError):
            params = nvimgcodec.DecodeParams(**options)
    except Exception:  # noqa: BLE001 - no usable GPU decoder here: torchvision's path is the fallback
        return None
    fallback = torchvision_decoder(device)
    state = {"broken": False, "batches": 0, "fallback_batches": 0}  # read by the bench: did it decode them?

    def decode(encoded: list[torch.Tensor]) -> list[torch.Tensor]:
        state["batches"] += 1
        if not state["broken"]:
            try:
                stream = torch.cuda.current_stream(device).cuda_stream
                images = decoder.decode([data.numpy() for data in encoded], params=params, cuda_stream=stream)
                if all(image is not None for image in images):  # else: the batch via nvjpeg
                    return [torch.as_tensor(image, device=device).permute(2, 0, 1) for image in images]
            except Exception as error:  # noqa: BLE001 - keep training: torchvision decodes from now on
                state["broken"] = True
                warnings.warn(f"nvImageCodec failed ({type(error).__name__}: {error}); torchvision's nvjpeg "
                              "decodes the JPEGs from now on", stacklevel=2)
        state["fallback_batches"] += 1
        return fallback(encoded)

    decode.state = state  # type: ignore[attr-defined]
    return decode


def choose_decoder(device: torch.device) -> tuple[str, JpegDecoder]:
    """The GPU JPEG decoder to use: ``$COURSEKIT_JPEG_DECODER`` if set, else ``DEFAULT_DECODER``; its name and
    the function. nvImageCodec falls back to torchvision where it is not usable, unless asked for by name."""
    wanted = os.environ.get(DECODER_ENV, "")
    if wanted and wanted not in DECODERS:
        raise ValueError(f"${DECODER_ENV}={wanted!r}: use one of {', '.join(DECODERS)} (or leave it unset)")
    if (wanted or DEFAULT_DECODER) == "nvimgcodec":
        hardware = nvimgcodec_decoder(device)
        if hardware is not None:
            return "nvimgcodec", hardware
        if wanted == "nvimgcodec":
            raise ValueError(f"${DECODER_ENV}=nvimgcodec but nvImageCodec is not usable here: "
                             "pip install nvidia-nvimgcodec-cu13 (CUDA 13) or unset it")
    return "torchvision", torchvision_decoder(device)


def crop_resize(images: list[torch.Tensor], boxes: list[tuple[int, int, int, int]], image_size: int) -> torch.Tensor:
    """Each ``(3, H, W)`` uint8 image's box ``(top, left, h, w)`` resized to ``image_size``: float ``(B, 3, S, S)``.

    Images of one size go through one ``roi_align`` (bilinear; its adaptive sampling averages over each output
    pixel's footprint, i.e. antialiased like PIL's resize) instead of a resize per image: a few kernel launches
    a batch, not hundreds, so the decoding thread holds the GIL briefly beside the training step."""
    from torchvision.ops import roi_align

    groups: dict[tuple[int, ...], list[int]] = {}
    for index, image in enumerate(images):
        groups.setdefault(tuple(image.shape), []).append(index)
    out = torch.empty(len(images), 3, image_size, image_size, device=images[0].device) if len(groups) > 1 else None
    for indices in groups.values():
        stacked = torch.stack([images[i] for i in indices]).float()
        rois = torch.tensor([[n, boxes[i][1], boxes[i][0], boxes[i][1] + boxes[i][3], boxes[i][0] + boxes[i][2]]
                             for n, i in enumerate(indices)], dtype=torch.float32).to(stacked.device, non_blocking=True)
        resized = roi_align(stacked, rois, output_size=(image_size, image_size), spatial_scale=1.0,
                            sampling_ratio=-1, aligned=True)
        if len(groups) == 1:  # every image of one size (a generated tree, a resized data set): no scatter
            return resized
        out[torch.tensor(indices, device=out.device)] = resized  # type: ignore[index]
    return out  # type: ignore[return-value]


def decode_batch(encoded: list[torch.Tensor], device: torch.device | str, image_size: int, train: bool,
                 rng: random.Random, decoder: JpegDecoder | None = None) -> torch.Tensor:
    """Decode JPEG bytes on ``device`` (with ``decoder``, default torchvision's nvjpeg) and return normalised
    float images ``(B, 3, size, size)``."""
    images = (decoder or torchvision_decoder(torch.device(device)))(encoded)
    boxes = [random_resized_box(image.shape[1], image.shape[2], rng) if train
             else center_box(image.shape[1], image.shape[2], image_size) for image in images]
    batch = crop_resize(images, boxes, image_size)
    if train:
        flip = torch.tensor([rng.random() < 0.5 for _ in images]).to(batch.device, non_blocking=True)
        batch = torch.where(flip.view(-1, 1, 1, 1), batch.flip(-1), batch)
    mean = torch.tensor(IMAGENET_MEAN).mul(255).view(1, 3, 1, 1).to(batch.device, non_blocking=True)
    std = torch.tensor(IMAGENET_STD).mul(255).view(1, 3, 1, 1).to(batch.device, non_blocking=True)
    return (batch - mean) / std


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_EPOCH_END = object()


class _Producer:
    """The background thread of ``GpuDecodedBatches``: decodes the loader's batches on its own CUDA stream into
    a bounded queue, epoch after epoch when the owner's ``run_ahead`` (an epoch-seeded sampler: it sets the
    next epoch itself, as the training loop will), else one epoch."""

    def __init__(self, owner: GpuDecodedBatches, epoch: int | None) -> None:
        self.owner, self.epoch = owner, epoch
        self.out: queue.Queue = queue.Queue(maxsize=owner.prefetch)
        self.at_epoch_start = True  # no batch of its current epoch taken yet: a new pass may use it
        self.stop = threading.Event()
        if owner.endless_epochs is not None:
            owner.endless_epochs.start_epoch = epoch or 0
        # The loader's workers are forked here, in the caller's thread: a process forked from a helper thread
        # inherits locks other threads held (a gloo process group's, seen hanging in ~ProcessGroupGloo).
        self.iterator = iter(owner.loader)
        self.thread = threading.Thread(target=self._run, name="jpeg-decode", daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            with contextlib.suppress(queue.Full):
                self.out.put(item, timeout=QUEUE_POLL_S)
                return True
        return False

    def _run(self) -> None:
        owner = self.owner
        cuda = owner.device.type == "cuda"
        stream = torch.cuda.Stream(owner.device) if cuda else None
        endless = owner.endless_epochs
        try:
            iterator, self.iterator = self.iterator, None
            per_epoch = len(owner) if endless is not None else None  # else: the loader ends each epoch itself
            while True:
                for index, batch in enumerate(itertools.islice(iterator, per_epoch)):
                    if self.stop.is_set():
                        break
                    with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
                        images, labels = owner._decode(*batch, owner.crop_rng(self.epoch, index))
                        event = torch.cuda.Event() if cuda else None
                        if event is not None:
                            event.record(stream)
                    if not self._put((images, labels, event)):
                        return
                if not owner.run_ahead or self.stop.is_set():
                    self._put(_EPOCH_END)
                    return
                # the next epoch is decoded while the training step still consumes this one's last batches:
                # its first batch is ready when the loop asks for it
                self.epoch = (self.epoch or 0) + 1  # before the end mark: the consumer compares it after
                if endless is None:  # a loader that ends with each epoch: set the next one and start it again
                    owner.sampler.set_epoch(self.epoch)
                    iterator = iter(owner.loader)
                if not self._put(_EPOCH_END):
                    return
        except BaseException as err:  # handed to the consumer, raised there
            self._put(_Failure(err))

    def close(self) -> None:
        """Stop the thread, then drop the batches it had decoded (their GPU memory; and no CUDA tensor is
        left for a loader worker forked later to inherit)."""
        self.stop.set()
        self.thread.join()
        self.iterator = None  # not taken by a thread stopped at once: its workers go with it
        with contextlib.suppress(queue.Empty):
            while True:
                self.out.get_nowait()


class EndlessEpochs(Sampler[list[int]]):
    """The batches of an epoch-seeded ``sampler`` (``set_epoch``: the training loader's DistributedSampler),
    epoch after epoch from ``start_epoch``, without end. A DataLoader over it never resets its workers at an
    epoch boundary: they read the next epoch's first batches while this epoch's last ones train. ``len()`` is
    one epoch's batches. It draws from a copy of ``sampler``: the training loop's ``set_epoch`` on the
    original does not move it (``GpuDecodedBatches`` compares the two)."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last
        self.start_epoch = getattr(sampler, "epoch", 0)

    def __len__(self) -> int:
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        own, epoch = copy.copy(self.sampler), self.start_epoch
        while True:
            own.set_epoch(epoch)
            indices = list(own)
            stop = len(self) * self.batch_size if self.drop_last else len(indices)
            for start in range(0, stop, self.batch_size):
                yield indices[start:start + self.batch_size]
            epoch += 1


class GpuDecodedBatches:
    """Wraps a loader of ``(list of JPEG bytes, labels)`` and yields decoded batches on ``device``.

    With ``prefetch > 0`` a background thread decodes up to ``prefetch`` batches ahead, on its own CUDA
    stream, so that nvjpeg's decoding overlaps the training step (the consumer's stream waits on an
    event of each batch before using it). With a sampler that has ``set_epoch`` (the training loader's
    DistributedSampler) the thread goes on into the next epoch at the end of one, so that a new epoch does
    not start with an empty pipeline, and over a loader of ``EndlessEpochs`` (the engine's) the loader's
    workers never stop either; when the loop sets another epoch than the one decoded ahead (a resume), that
    work is dropped and decoding restarts. ``close()`` stops the thread (``data.shutdown_workers`` calls it).
    Random crops and flips are drawn from ``(seed, epoch, batch index)``: the same however far ahead it runs.
    """

    def __init__(self, loader: Iterable[Any], device: torch.device | str, image_size: int, train: bool,
                 seed: int = 0, channels_last: bool = False, prefetch: int = PREFETCH_BATCHES,
                 run_ahead: bool | None = None) -> None:
        self.loader, self.device, self.image_size, self.train = loader, torch.device(device), image_size, train
        self.seed = seed
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.prefetch = prefetch
        batch_sampler = getattr(loader, "batch_sampler", None)
        self.endless_epochs = batch_sampler if isinstance(batch_sampler, EndlessEpochs) else None
        self.sampler = self.endless_epochs.sampler if self.endless_epochs else getattr(loader, "sampler", None)
        epoch_seeded = hasattr(self.sampler, "set_epoch") and hasattr(self.sampler, "epoch")
        self.run_ahead = prefetch > 0 and epoch_seeded and (train if run_ahead is None else run_ahead)
        self.decoder_name: str | None = None  # "nvimgcodec" or "torchvision", once the first batch is decoded
        self._decoder: JpegDecoder | None = None
        self._producer: _Producer | None = None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def crop_rng(self, epoch: int | None, index: int) -> random.Random:
        """The random crops and flips of one batch."""
        return random.Random(f"{self.seed}/{epoch}/{index}")

    def _decode(self, encoded: Any, labels: torch.Tensor, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
        if self._decoder is None:
            if self.device.type == "cuda":
                self.decoder_name, self._decoder = choose_decoder(self.device)
            else:  # CPU (tests): torchvision decodes on the CPU
                self.decoder_name, self._decoder = "torchvision", torchvision_decoder(self.device)
        images = decode_batch(unpack_bytes(encoded), self.device, self.image_size, self.train, rng, self._decoder)
        return images.contiguous(memory_format=self.memory_format), labels.to(self.device, non_blocking=True)

    def close(self) -> None:
        """Stop the decoding thread (and drop what it decoded ahead)."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close()

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = getattr(self.sampler, "epoch", None)
        if self.prefetch <= 0:
            if self.endless_epochs is not None:
                self.endless_epochs.start_epoch = epoch or 0
            for index, (encoded, labels) in enumerate(itertools.islice(self.loader, len(self))):
                yield self._decode(encoded, labels, self.crop_rng(epoch, index))
            return
        producer = self._producer
        if producer is None or not producer.at_epoch_start or producer.epoch != epoch:
            self.close()  # none yet, another pass in progress, or ahead for another epoch than the loop runs now
            producer = self._producer = _Producer(self, epoch)
        producer.at_epoch_start = False
        finished = False
        try:
            while (item := producer.out.get()) is not _EPOCH_END:
                if isinstance(item, _Failure):
                    raise item.error
                images, labels, event = item
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)
                    images.record_stream(current)
                    labels.record_stream(current)
                yield images, labels
            finished = producer.at_epoch_start = True
        finally:
            if not (finished and self.run_ahead):  # left early, failed, or one epoch only: stop its thread
                producer.close()
                if self._producer is producer:
                    self._producer = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.train.data.jpeg",
                                     description="write a synthetic ImageNet-like JPEG tree (train/ and val/)")
    parser.add_argument("--out", required=True, help="root folder to write")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--images-per-class", type=int, default=100)
    parser.add_argument("--val-images-per-class", type=int, default=None, help=f"default {VAL_SHARE:.0%} of train")
    parser.add_argument("--width", type=int, default=JPEG_SIZE[0])
    parser.add_argument("--height", type=int, default=JPEG_SIZE[1])
    parser.add_argument("--quality", type=int, default=JPEG_QUALITY)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes writing in parallel")
    args = parser.parse_args(argv)
    info = write_synthetic_jpeg_tree(args.out, args.classes, args.images_per_class, (args.width, args.height),
                                     val_images_per_class=args.val_images_per_class, seed=args.seed,
                                     quality=args.quality, workers=args.workers)
    print(f"wrote {info['images']} JPEGs ({info['bytes'] / info['images'] / 1e3:.0f} kB each on average) "
          f"under {info['root']} in {info['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
