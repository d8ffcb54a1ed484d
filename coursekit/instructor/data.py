"""``coursekit instructor data cifar10 | fashion-mnist``: a dataset staged once, verified, in a shared folder
(lab 05's JPEG tree: ``lab05_jpeg.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from coursekit.instructor.common import EXIT_FAILED, EXIT_OK


def data_cifar10(folder: Path) -> int:
    """Download CIFAR-10 once (torchvision checks each archive's MD5) and verify the extracted batches."""
    from coursekit.labs.kit import datasets

    if not datasets.cifar10_present(folder):
        try:
            datasets.stage_cifar10(folder)
        except (OSError, RuntimeError) as error:
            raise ValueError(f"--dir {folder}: could not download CIFAR-10 ({error}); run this on a login node "
                             "with internet access") from error
    problems = verify_cifar10(folder)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print(f"CIFAR-10 in {folder / datasets.CIFAR10_FOLDER}: " + ("verified" if not problems else "NOT valid"))
    return EXIT_FAILED if problems else EXIT_OK


def verify_cifar10(folder: Path) -> list[str]:
    """Every batch file present with torchvision's MD5 (empty: all is well)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    base = Path(folder) / CIFAR10.base_folder
    return [f"{base / name}: missing or corrupt (MD5 differs)" for name, md5 in CIFAR10.train_list + CIFAR10.test_list
            if not check_integrity(str(base / name), md5)]


def data_fashion_mnist(folder: Path, source: Path | None = None) -> int:
    """Copy Debian's Fashion-MNIST (package dataset-fashion-mnist, or ``source``) to ``folder/fashion-mnist/``,
    each file verified by the MD5 of its uncompressed bytes; intact files already there are kept."""
    from coursekit.train.data import fashion_mnist

    staged = fashion_mnist.stage(folder, source)
    what = (f"copied {len(staged.copied)} of its 4 files from {staged.source}" if staged.copied
            else "already staged, its 4 files intact")
    print(f"Fashion-MNIST in {staged.folder}: {what} ({staged.bytes / 1e6:.1f} MB, MD5s verified); "
          f"train with --dataset fashion-mnist --data-dir {Path(folder).expanduser()}")
    return EXIT_OK
