"""CIFAR-10 for the gpu profile: is it staged, how to stage it, and the stand-in where it is not.

Labs 00, 02 and 04 train on CIFAR-10 in the gpu profile. The instructor stages it once, on a node with
internet access (compute nodes usually have none)::

    python -m coursekit.labs.kit.datasets --stage --data-dir /shared/course/data

and points the course at it (``COURSEKIT_DATA_DIR`` or ``<course>/data``). Where it is absent, the lab's
settings say so once, at the start, with that command, and use the **generated stand-in** instead: a
learnable image set of CIFAR-10's shape (10 classes, 32 x 32, 50,000 + 10,000 images) made by the
engine (``--dataset generated``), so that a dry run of the notebooks still passes. Its accuracies are
not CIFAR-10's: the settings print ``DATASET STAND-IN`` so that nobody mistakes one for the other.
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
    """The one message a lab prints when CIFAR-10 is absent."""
    return (f"{STANDIN_MARK}: CIFAR-10 is not in {folder} (no {CIFAR10_FOLDER}/ there), so this lab trains on "
            f"the generated stand-in (10 classes, 32 x 32, {train_images:,} + {CIFAR10_TEST:,} images): the code "
            f"and the claims are the same, the accuracies are not CIFAR-10's.\n"
            f"    To use CIFAR-10, stage it once on a node with internet access: {stage_command(folder)}\n"
            f"    (or set ${DATA_DIR_ENV} to the folder that holds {CIFAR10_FOLDER}/), then restart the kernel.")


def cifar10_or_standin(config: Any, folder: str | Path | None = None) -> tuple[Any, str | None]:
    """``(config, None)`` when CIFAR-10 is staged in ``folder`` (default: ``config.data_dir``); else the
    stand-in configuration and the notice to print."""
    where = folder or config.data_dir or data_dir()
    if cifar10_present(where):
        return config, None
    return standin_config(config), standin_notice(where, config.num_samples or CIFAR10_TRAIN)


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
