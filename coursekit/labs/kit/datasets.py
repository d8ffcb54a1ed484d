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

``resolve(wanted)`` is the one decision of where a lab's data set comes from (the course's data folder,
Debian's system copy of Fashion-MNIST, the generated stand-in): the labs' settings train on what it returns
and ``coursekit doctor`` prints it (``DataSource.describe``), so the two cannot disagree.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coursekit.labs.kit.profiles import DATA_DIR_ENV, data_dir

CIFAR10_FOLDER = "cifar-10-batches-py"  # what torchvision's CIFAR10 reads under data_dir
CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000
CIFAR10_CLASSES, CIFAR10_SIZE = 10, 32
STANDIN_MARK = "DATASET STAND-IN"
FASHION_MARK = "REAL DATA: FASHION-MNIST"
STAGE_COMMAND = "python -m coursekit.labs.kit.datasets --stage --data-dir {data_dir}"
CIFAR10, FASHION_MNIST, GENERATED = "cifar10", "fashion-mnist", "generated"  # TrainConfig's dataset names
TEST_IMAGES = {CIFAR10: CIFAR10_TEST, FASHION_MNIST: 10_000}  # validated on their own test split (no val_fraction)
COURSE_FOLDER, SYSTEM_COPY = "the course's data folder", "Debian's system copy"  # where real files came from
# the data sets the labs ask for, and who asks (the doctor names them); lab 05's JPEG tree is written on first use
WANTED = {CIFAR10: "CIFAR-10 (labs 02, 04, 07; 00 and 09 in the gpu profile)",
          FASHION_MNIST: "Fashion-MNIST (lab 09's small race on a CPU)"}


def validation_text(config: Any) -> str:
    """Which images a configuration validates on, in words: a real set's test split, else its ``val_fraction``."""
    if config.dataset in TEST_IMAGES:
        return f"validated on its {TEST_IMAGES[config.dataset]:,} test images"
    return f"validation {config.val_fraction:.0%}"


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


def fashion_notice(folder: Path, train_images: int, image_size: int = CIFAR10_SIZE) -> str:
    """The one message a lab prints when it trains on Fashion-MNIST instead of CIFAR-10 (``image_size``: the side
    its runs train at; the engine resizes the padded images to it)."""
    shape = f"padded to {CIFAR10_SIZE} x {CIFAR10_SIZE}" + (
        f", then resized to {image_size} x {image_size}" if image_size != CIFAR10_SIZE else "")
    return (f"{FASHION_MARK}: CIFAR-10 is not staged, so this lab trains on Fashion-MNIST from {folder} "
            f"({train_images:,} + {CIFAR10_TEST:,} real 28 x 28 images of clothes, 10 classes, {shape}). "
            "Its accuracies are Fashion-MNIST's, not CIFAR-10's (a ResNet-18 reaches about 0.95 on it).")


@dataclass(frozen=True)
class DataSource:
    """What a lab asking for ``wanted`` trains on: ``dataset`` (cifar10, fashion-mnist or generated) from
    ``folder`` (None: generated), found in ``origin`` (the course's data folder, Debian's system copy, or
    ``generated``); ``data_dir`` is the course's data folder looked in, ``passed_over`` the incomplete copies
    skipped on the way, each ``(what, fix)`` (a real problem: someone staged them and the labs do not use them)."""

    wanted: str
    dataset: str
    folder: Path | None
    origin: str
    data_dir: Path
    passed_over: tuple[tuple[str, str], ...] = ()

    @property
    def real(self) -> bool:
        return self.dataset != GENERATED

    def describe(self) -> str:
        """What a participant gets, in one line: ``Fashion-MNIST: Debian's system copy /usr/share/... (real data)``."""
        if not self.real:
            return "the generated stand-in: accuracy claims are smoke tests only"
        name = "CIFAR-10" if self.dataset == CIFAR10 else "Fashion-MNIST"
        return f"{name}: {self.origin} {self.folder} (real data)"


def resolve(wanted: str = CIFAR10, folder: str | Path | None = None) -> DataSource:
    """Where a lab's data set comes from (``folder``: the course's data folder, default ``data_dir()``):
    ``cifar10``: CIFAR-10 staged there, else Fashion-MNIST; ``fashion-mnist``: Fashion-MNIST in
    ``folder/fashion-mnist`` or ``folder``, else Debian's system copy; else the generated stand-in."""
    from coursekit.train.data import fashion_mnist

    if wanted not in WANTED:
        raise ValueError(f"no lab asks for {wanted!r}: one of {', '.join(WANTED)}")
    root = Path(folder or data_dir()).expanduser()
    passed_over = []
    if wanted == CIFAR10:
        if cifar10_present(root):
            return DataSource(wanted, CIFAR10, root / CIFAR10_FOLDER, COURSE_FOLDER, root)
        if (root / CIFAR10_FOLDER).exists():
            passed_over.append((f"CIFAR-10 in {root / CIFAR10_FOLDER} is incomplete (data_batch_1 or test_batch "
                                "missing)", f"stage it again: {stage_command(root)}"))
    for candidate in (*fashion_mnist.candidate_folders(root), fashion_mnist.DEBIAN_DIR):
        origin = SYSTEM_COPY if candidate == fashion_mnist.DEBIAN_DIR else COURSE_FOLDER
        missing = fashion_mnist.missing_files(candidate)
        if not missing:
            return DataSource(wanted, FASHION_MNIST, candidate, origin, root, tuple(passed_over))
        if len(missing) < len(fashion_mnist.FILES):
            fix = (f"apt-get install --reinstall -y {fashion_mnist.DEBIAN_PACKAGE}" if origin == SYSTEM_COPY
                   else f"coursekit instructor data fashion-mnist --dir {root}")
            passed_over.append((f"Fashion-MNIST in {candidate} is incomplete ({', '.join(missing)} missing)", fix))
    return DataSource(wanted, GENERATED, None, GENERATED, root, tuple(passed_over))


def fashion_config(config: Any, folder: Path) -> Any:
    """``config`` (a cifar10 TrainConfig) on Fashion-MNIST in ``folder``, with the same number of training images."""
    return config.replace(dataset="fashion-mnist", data_dir=str(folder), download=False,
                          num_classes=CIFAR10_CLASSES, image_size=CIFAR10_SIZE)


def real_or_standin(config: Any, folder: str | Path | None = None) -> tuple[Any, str | None]:
    """``(config, None)`` when CIFAR-10 is staged in ``folder`` (default: ``config.data_dir``); else the
    configuration on Fashion-MNIST when it is there, else on the generated stand-in, with the notice to print."""
    where = folder or config.data_dir or data_dir()
    source = resolve(CIFAR10, where)
    if source.dataset == CIFAR10:
        return config, None
    if source.dataset == FASHION_MNIST:
        return fashion_config(config, source.folder), fashion_notice(source.folder, config.num_samples or 60_000,
                                                                     config.image_size)
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
