"""Fashion-MNIST: the engine's real image data set that no compute node has to download.

H. Xiao, K. Rasul, R. Vollgraf, *Fashion-MNIST: a Novel Image Dataset for Benchmarking Machine Learning
Algorithms*, 2017 (MIT licence, © 2017 Zalando SE). 60,000 training and 10,000 test images, 28 × 28 grey,
10 classes. Debian's package ``dataset-fashion-mnist`` installs its four IDX files in
``/usr/share/datasets/fashion-mnist/`` (``apt-get install -y dataset-fashion-mnist``);
``coursekit instructor data fashion-mnist --dir D`` copies them to ``D/fashion-mnist/`` for a room.

``--dataset fashion-mnist`` reads the files (``.gz`` or uncompressed) from ``--data-dir DIR`` (``DIR/fashion-mnist/``
or ``DIR`` itself), else from Debian's folder. Each file's uncompressed bytes are checked against its MD5 once
per process (Debian recompressed the ``.gz`` files: their own checksums differ from torchvision's) and kept
decoded in memory (``uint8``, 55 MB). The images are made CIFAR-10-shaped: zero-padded to 32 × 32, the grey
channel repeated 3 times, normalized by the padded training set's mean and std, resized when ``--image-size``
is not 32; training batches get CIFAR-10's augmentation (random crop with padding 4, horizontal flip), done on
tensors, a whole batch at once (``__getitems__``), not by PIL image by image.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

FOLDER = "fashion-mnist"  # under a data folder (--data-dir, the course's data_dir)
DEBIAN_PACKAGE = "dataset-fashion-mnist"
DEBIAN_DIR = Path("/usr/share/datasets") / FOLDER  # where the Debian package puts the files
FILES = {  # the IDX files and the MD5 of their uncompressed bytes
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}
IMAGES_MAGIC, LABELS_MAGIC = 0x803, 0x801  # IDX: unsigned bytes, 3 or 1 dimensions
GZIP_MAGIC = b"\x1f\x8b"  # an IDX file starts with two zero bytes
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
NUM_CLASSES = len(CLASSES)
TRAIN_IMAGES, TEST_IMAGES = 60_000, 10_000
SIDE = 28  # the images' side
SIZE = 32  # after zero padding: CIFAR-10's side
BORDER = (SIZE - SIDE) // 2
CROP_PADDING = 4  # training augmentation: random 32 x 32 crop of the image padded by 4 (as CIFAR-10's)
MEAN, STD = 0.2190, 0.3318  # of the 60,000 training images zero-padded to 32 x 32, pixels in [0, 1]
INSTALL_HINT = (f"install Debian's package: apt-get install -y {DEBIAN_PACKAGE} (or, without root: apt-get download "
                f"{DEBIAN_PACKAGE} && dpkg-deb -x {DEBIAN_PACKAGE}_*.deb DIR, then use DIR/usr/share/datasets/{FOLDER})")

_CACHE: dict[tuple, dict[str, np.ndarray]] = {}  # decoded, verified files of this process, by their stat


def data_folder(data_dir: str | Path | None = None) -> Path:
    """The folder holding the four files: ``data_dir/fashion-mnist/`` or ``data_dir``, else Debian's folder."""
    if data_dir is None:
        candidates = [DEBIAN_DIR]
        where = f"Debian's folder {DEBIAN_DIR} (no --data-dir given)"
        fix = INSTALL_HINT + ", or give --data-dir"
    else:
        root = Path(data_dir).expanduser()
        candidates = candidate_folders(root)
        where = f"data_dir={str(root)!r} (neither in {FOLDER}/ nor directly there)"
        fix = (f"stage them with `coursekit instructor data fashion-mnist --dir {root}`, fix --data-dir, or leave "
               f"--data-dir out to read Debian's copy in {DEBIAN_DIR} ({INSTALL_HINT})")
    for folder in candidates:
        if not missing_files(folder):
            return folder
    for folder in candidates:  # some files but not all: name the missing ones
        missing = missing_files(folder)
        if len(missing) < len(FILES):
            raise ValueError(f"Fashion-MNIST in {folder} is incomplete: {', '.join(m + '[.gz]' for m in missing)} "
                             f"missing; {fix}")
    raise ValueError(f"Fashion-MNIST is not in {where}: its files {', '.join(FILES)} (.gz or uncompressed) are "
                     f"missing; {fix}")


def candidate_folders(data_dir: str | Path) -> list[Path]:
    """Where a data folder may hold the four files, in the order they are looked for: ``data_dir/fashion-mnist/``,
    then ``data_dir`` itself (Debian's folder is the fallback of a run without a data folder, not of these)."""
    root = Path(data_dir).expanduser()
    return [root / FOLDER, root]


def missing_files(folder: Path) -> list[str]:
    """The names of the four files that ``folder`` lacks (neither ``name`` nor ``name.gz``); empty: all there."""
    return [name for name in FILES if file_path(folder, name) is None]


def file_path(folder: Path, name: str) -> Path | None:
    """``folder/name`` (uncompressed) or ``folder/name.gz``; None when neither is there."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def read_verified(path: Path, name: str) -> bytes:
    """The uncompressed bytes of ``path`` (the IDX file ``name``), checked against its MD5."""
    try:
        data = path.read_bytes()
        if data[:2] == GZIP_MAGIC:  # by content, not by name (a copy in progress is named .partial)
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise ValueError(f"{path}: cannot be read or decompressed ({error}); {_replace_hint(path)}") from error
    digest = hashlib.md5(data).hexdigest()
    if digest != FILES[name]:
        raise ValueError(f"{path} is corrupt: the MD5 of its uncompressed bytes is {digest}, not {FILES[name]}; "
                         + _replace_hint(path))
    return data


def _replace_hint(path: Path) -> str:
    if path.parent == DEBIAN_DIR:
        return f"reinstall Debian's copy: apt-get install --reinstall -y {DEBIAN_PACKAGE}"
    return (f"delete it and stage the files again (coursekit instructor data fashion-mnist --dir "
            f"{path.parent.parent if path.parent.name == FOLDER else path.parent}), or copy it from {DEBIAN_DIR}")


def parse_idx(data: bytes, name: str) -> np.ndarray:
    """An IDX file's array (``uint8``; images ``(n, 28, 28)``, labels ``(n,)``)."""
    magic = int.from_bytes(data[:4], "big")
    dims = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    expected = IMAGES_MAGIC if "images" in name else LABELS_MAGIC
    if magic != expected or len(data) != 4 + 4 * dims + int(np.prod(shape)):
        raise ValueError(f"{name}: not an IDX file of unsigned bytes (magic {magic:#x}, shape {shape})")
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape).copy()


def load_arrays(folder: Path) -> dict[str, np.ndarray]:
    """The four files of ``folder``, verified and decoded once per process (again only when a file changes)."""
    paths = {name: file_path(folder, name) for name in FILES}
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        raise ValueError(f"Fashion-MNIST in {folder} is incomplete: {', '.join(m + '[.gz]' for m in missing)} "
                         f"missing; {INSTALL_HINT}")
    key = tuple((str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in paths.values())
    if key not in _CACHE:
        _CACHE.clear()  # one copy of the data set per process
        _CACHE[key] = {name: parse_idx(read_verified(path, name), name) for name, path in paths.items()}
    return _CACHE[key]


def verify_folder(folder: Path) -> list[str]:
    """Every problem of the four files in ``folder`` (empty: all present and intact)."""
    problems = []
    for name in FILES:
        path = file_path(folder, name)
        if path is None:
            problems.append(f"{folder / name}[.gz]: missing")
            continue
        try:
            read_verified(path, name)
        except ValueError as error:
            problems.append(str(error))
    return problems


class FashionImages(Dataset):
    """Grey 28 x 28 images as CIFAR-10-shaped samples ``(3, image_size, image_size)``, normalized; ``train``:
    random crop (padding 4) and horizontal flip per sample. ``__getitems__`` prepares a whole batch with a few
    tensor operations (the DataLoader calls it with a batch's indices); the random draws use torch's global
    generator, as torchvision's transforms do (seeded per worker by the DataLoader)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, image_size: int = SIZE, train: bool = False) -> None:
        margin = BORDER + (CROP_PADDING if train else 0)
        side = SIDE + 2 * margin
        self.images = torch.zeros(len(images), side, side, dtype=torch.uint8)
        self.images[:, margin:margin + SIDE, margin:margin + SIDE] = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels).long()
        self.image_size, self.train = image_size, train
        self.classes = list(CLASSES)

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``(n, 3, image_size, image_size)`` (float32, the 3 channels a view of one) and labels ``(n,)``."""
        index = torch.as_tensor(indices, dtype=torch.long)
        if self.train:  # a random 32 x 32 window of each (padded) image, mirrored or not: one gather
            n, steps, side = len(index), torch.arange(SIZE), self.images.shape[-1]
            top = torch.randint(0, 2 * CROP_PADDING + 1, (n, 1))
            left = torch.randint(0, 2 * CROP_PADDING + 1, (n, 1))
            flip = torch.rand(n, 1) < 0.5
            rows = top + steps
            cols = left + torch.where(flip, SIZE - 1 - steps, steps)
            offsets = (index * side**2)[:, None, None] + rows[:, :, None] * side + cols[:, None, :]
            pixels = torch.take(self.images, offsets)
        else:
            pixels = self.images[index]
        x = pixels.unsqueeze(1).float().mul_(1 / (255 * STD)).sub_(MEAN / STD)
        if self.image_size != SIZE:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", antialias=True,
                              align_corners=False)
        return x.expand(-1, 3, -1, -1), self.labels[index]

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        images, labels = self.batch(indices)
        return list(zip(images.unbind(0), labels.unbind(0), strict=True))  # the collate function stacks them

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = self.batch([index])
        return images[0].contiguous(), labels[0]


@dataclass
class FashionMNIST:
    train: FashionImages
    val: FashionImages
    folder: Path


def load(data_dir: str | Path | None = None, image_size: int = SIZE, num_samples: int | None = None) -> FashionMNIST:
    """The training set (its first ``num_samples`` images) and the 10,000 test images as the validation set."""
    if image_size < 1:
        raise ValueError(f"image_size={image_size} must be at least 1")
    folder = data_folder(data_dir)
    arrays = load_arrays(folder)
    n = len(arrays["train-labels-idx1-ubyte"])
    if num_samples is not None and num_samples > n:
        raise ValueError(f"num_samples={num_samples} is more than Fashion-MNIST's {n:,} training images: lower it, "
                         "or leave it out to train on all of them")
    n = n if num_samples is None else num_samples
    train = FashionImages(arrays["train-images-idx3-ubyte"][:n], arrays["train-labels-idx1-ubyte"][:n], image_size,
                          train=True)
    val = FashionImages(arrays["t10k-images-idx3-ubyte"], arrays["t10k-labels-idx1-ubyte"], image_size, train=False)
    return FashionMNIST(train, val, folder)


@dataclass
class Staged:
    folder: Path  # where the files are now
    source: Path
    copied: list[str]  # the files copied this time (empty: all were there and intact)
    bytes: int  # the four files' size on disk


def stage(data_dir: str | Path, source: str | Path | None = None) -> Staged:
    """Copy the four files from ``source`` (Debian's folder) to ``data_dir/fashion-mnist/``, each verified
    (by MD5) after copying; files already there and intact are kept."""
    source = Path(source).expanduser() if source is not None else DEBIAN_DIR
    target = Path(data_dir).expanduser() / FOLDER
    copied = []
    for name in FILES:
        present = file_path(target, name)
        if present is not None and _intact(present, name):
            continue
        origin = file_path(source, name)
        if origin is None:
            raise ValueError(f"Fashion-MNIST's {name}[.gz] is not in {source}: {INSTALL_HINT}; --source names "
                             "the folder that holds the files (default Debian's)")
        final = target / origin.name
        partial = final.with_name(f".{final.name}.partial")
        try:
            target.mkdir(parents=True, exist_ok=True)
            if present is not None:
                present.unlink()  # corrupt; its replacement may be compressed differently
            shutil.copyfile(origin, partial)
        except OSError as error:
            raise ValueError(f"cannot copy {origin} to {final}: {error}; choose a --dir you can write to") from error
        if not _intact(partial, name):
            partial.unlink()
            read_verified(origin, name)  # raises: the source is corrupt, and says what to do
            raise ValueError(f"copying {origin} to {final} gave a corrupt file (disk full?)")
        os.replace(partial, final)
        copied.append(final.name)
    size = sum(file_path(target, name).stat().st_size for name in FILES)
    return Staged(target, source, copied, size)


def _intact(path: Path, name: str) -> bool:
    try:
        read_verified(path, name)
    except ValueError:
        return False
    return True
