"""The real data of the gpu profile: CIFAR-10 when staged, else Fashion-MNIST, else a generated stand-in.

Labs 00, 02, 04, 07 and 09 train on CIFAR-10 in the gpu profile. The instructor stages it once, on a node
with internet access (compute nodes usually have none)::

    python -m coursekit.labs.kit.datasets --stage --data-dir /shared/course/data

and points the course at it (``COURSEKIT_DATA_DIR`` or ``<course>/data``). Where it is absent, the lab's
settings say so once, at the start, and use the next data set that is there (``real_or_standin``):

1. **Fashion-MNIST** (``coursekit instructor data fashion-mnist --dir D``, or Debian's
   ``dataset-fashion-mnist`` package): 60,000 + 10,000 real images of clothes, 10 classes, padded to
   CIFAR-10's 32 x 32. Real data that does not saturate (a ResNet-18 reaches about 0.95): the labs' claims
   about accuracy are evidence on it, about Fashion-MNIST (``REAL DATA: FASHION-MNIST``);
2. the **generated stand-in**: a learnable image set of CIFAR-10's shape (10 classes, 32 x 32, 50,000 +
   10,000 images) made by the engine (``--dataset generated``). A ResNet separates it perfectly, so the
   run is a smoke test of the code, not evidence about accuracy: the settings print ``DATASET STAND-IN``
   and say so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from coursekit.labs.kit.profiles import DATA_DIR_ENV, data_dir

CIFAR10_FOLDER = "cifar-10-batches-py"  # what torchvision's CIFAR10 reads under data_dir
CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000
CIFAR10_CLASSES, CIFAR10_SIZE = 10, 32
STANDIN_MARK = "DATASET STAND-IN"
FASHION_MARK = "REAL DATA: FASHION-MNIST"
STAGE_COMMAND = "python -m coursekit.labs.kit.datasets --stage --data-dir {data_dir}"


def cifar10_present(folder: str | Path) -> bool:
    """Does ``folder`` hold torchvision's CIFAR-10 (``cifar-10-batches-py/`` with its batches)?"""
    batches = Path(folder).expanduser() / CIFAR10_FOLDER
    return (batches / "data_batch_1").is_file() and (batches / "test_batch").is_file()


def stage_command(folder: str | Path | None = None) -> str:
    return STAGE_COMMAND.format(data_dir=folder or data_dir())


def standin_config(config: Any) -> Any:
    """``config`` (a cifar10 TrainConfig) on the generated stand-in of CIFAR-10's shape."""
    train = config.num_samples or CIFAR10_TRAIN  # a subset of CIFAR-10 keeps its size on the stand-in
    return config.replace(dataset="generated", data_dir=None, download=False, num_classes=CIFAR10_CLASSES,
                          image_size=CIFAR10_SIZE, num_samples=train + CIFAR10_TEST,
                          val_fraction=CIFAR10_TEST / (train + CIFAR10_TEST))


def standin_notice(folder: str | Path, train_images: int = CIFAR10_TRAIN) -> str:
    """The one message a lab prints when neither CIFAR-10 nor Fashion-MNIST is there."""
    return (f"{STANDIN_MARK}: neither CIFAR-10 nor Fashion-MNIST is in {folder}, so this lab trains on the "
            f"generated stand-in (10 classes, 32 x 32, {train_images:,} + {CIFAR10_TEST:,} images). A ResNet "
            "separates it perfectly: this run is a smoke test of the code, NOT evidence about accuracy, and the "
            "claims about accuracy are reported, not checked.\n"
            f"    Real data: coursekit instructor data fashion-mnist --dir {folder} (no internet needed), or\n"
            f"    CIFAR-10 once on a node with internet access: {stage_command(folder)}; then restart the kernel.")


def fashion_notice(folder: Path, train_images: int) -> str:
    """The one message a lab prints when it trains on Fashion-MNIST instead of CIFAR-10."""
    return (f"{FASHION_MARK}: CIFAR-10 is not staged, so this lab trains on Fashion-MNIST from {folder} "
            f"({train_images:,} + {CIFAR10_TEST:,} real 28 x 28 images of clothes, 10 classes, padded to 32 x 32). "
            "Its accuracies are Fashion-MNIST's, not CIFAR-10's (a ResNet-18 reaches about 0.95 on it).")


def fashion_mnist_folder(folder: str | Path) -> Path | None:
    """Where Fashion-MNIST's files are: ``folder/fashion-mnist``, ``folder``, else Debian's; None if nowhere."""
    from coursekit.train.data import fashion_mnist

    for candidate in (Path(folder).expanduser() / fashion_mnist.FOLDER, Path(folder).expanduser(),
                      fashion_mnist.DEBIAN_DIR):
        if all(fashion_mnist.file_path(candidate, name) is not None for name in fashion_mnist.FILES):
            return candidate
    return None


def fashion_config(config: Any, folder: Path) -> Any:
    """``config`` (a cifar10 TrainConfig) on Fashion-MNIST in ``folder``, with the same number of training images."""
    return config.replace(dataset="fashion-mnist", data_dir=str(folder), download=False,
                          num_classes=CIFAR10_CLASSES, image_size=CIFAR10_SIZE)


def real_or_standin(config: Any, folder: str | Path | None = None) -> tuple[Any, str | None]:
    """``(config, None)`` when CIFAR-10 is staged in ``folder`` (default: ``config.data_dir``); else the
    configuration on Fashion-MNIST when it is there, else on the generated stand-in, with the notice to print."""
    where = folder or config.data_dir or data_dir()
    if cifar10_present(where):
        return config, None
    fashion = fashion_mnist_folder(where)
    if fashion is not None:
        return fashion_config(config, fashion), fashion_notice(fashion, config.num_samples or 60_000)
    return standin_config(config), standin_notice(where, config.num_samples or CIFAR10_TRAIN)


def on_standin(config: Any) -> bool:
    """Is ``config`` the generated stand-in of a real data set (so its accuracies are not evidence)?"""
    return getattr(config, "dataset", None) == "generated" and config.num_classes == CIFAR10_CLASSES \
        and config.image_size == CIFAR10_SIZE


cifar10_or_standin = real_or_standin  # the name the benchmarks use


def stage_cifar10(folder: str | Path) -> Path:
    """Download CIFAR-10 into ``folder`` with torchvision (train and test sets); its path."""
    from torchvision import datasets

    root = Path(folder).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    datasets.CIFAR10(str(root), train=True, download=True)
    datasets.CIFAR10(str(root), train=False, download=True)
    return root / CIFAR10_FOLDER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coursekit.labs.kit.datasets", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help=f"default: ${DATA_DIR_ENV} or <course>/data")
    parser.add_argument("--stage", action="store_true", help="download CIFAR-10 there (needs internet access)")
    args = parser.parse_args(argv)
    folder = args.data_dir or data_dir()
    if args.stage and not cifar10_present(folder):
        print(f"CIFAR-10 staged in {stage_cifar10(folder)}")
    present = cifar10_present(folder)
    print(f"CIFAR-10 {'is' if present else 'is NOT'} in {folder}" + ("" if present else f": {stage_command(folder)}"))
    return 0 if present else 1


if __name__ == "__main__":
    sys.exit(main())
