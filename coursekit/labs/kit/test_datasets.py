from pathlib import Path

import pytest

from coursekit.labs.kit import datasets
from coursekit.train.config import TrainConfig
from coursekit.train.data import fashion_mnist


@pytest.fixture()
def no_debian_copy(tmp_path, monkeypatch):
    """A machine without Debian's Fashion-MNIST: only what the data folder holds counts."""
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "no-debian-copy")


def test_standin_when_no_real_data_is_there(tmp_path, no_debian_copy):
    config = TrainConfig(model="resnet18", dataset="cifar10", data_dir=str(tmp_path), batch_size=256)
    chosen, notice = datasets.cifar10_or_standin(config)
    assert chosen.dataset == "generated" and chosen.data_dir is None
    assert (chosen.num_classes, chosen.image_size, chosen.num_samples) == (10, 32, 60_000)
    assert round(chosen.num_samples * (1 - chosen.val_fraction)) == 50_000 and chosen.batch_size == 256
    assert notice.startswith(datasets.STANDIN_MARK) and f"--data-dir {tmp_path}" in notice
    assert "smoke test" in notice and "NOT evidence" in notice and "fashion-mnist --dir" in notice
    assert datasets.on_standin(chosen) and not datasets.on_standin(config)


def test_fashion_mnist_before_the_standin_when_cifar10_is_absent(tmp_path):
    """Debian's dataset-fashion-mnist is installed here (CI installs it): it is the real data the labs use."""
    config = TrainConfig(model="resnet18", dataset="cifar10", data_dir=str(tmp_path), num_samples=10_000)
    chosen, notice = datasets.real_or_standin(config)
    assert chosen.dataset == "fashion-mnist" and chosen.data_dir == str(fashion_mnist.DEBIAN_DIR)
    assert (chosen.num_classes, chosen.image_size, chosen.num_samples) == (10, 32, 10_000)
    assert notice.startswith(datasets.FASHION_MARK) and not datasets.on_standin(chosen)
    staged = tmp_path / fashion_mnist.FOLDER
    staged.mkdir()
    for name in fashion_mnist.FILES:
        (staged / f"{name}.gz").symlink_to(fashion_mnist.file_path(fashion_mnist.DEBIAN_DIR, name))
    assert datasets.real_or_standin(config)[0].data_dir == str(staged)  # the course's copy first



def test_standin_keeps_a_subsets_size(tmp_path, no_debian_copy):
    config = TrainConfig(model="resnet18", dataset="cifar10", data_dir=str(tmp_path), num_samples=10_000)
    chosen, _ = datasets.cifar10_or_standin(config)
    assert round(chosen.num_samples * (1 - chosen.val_fraction)) == 10_000
    assert round(chosen.num_samples * chosen.val_fraction) == 10_000  # CIFAR-10's whole test set


def test_cifar10_kept_when_staged(tmp_path):
    batches = tmp_path / datasets.CIFAR10_FOLDER
    batches.mkdir()
    (batches / "data_batch_1").write_bytes(b"x")
    (batches / "test_batch").write_bytes(b"x")
    config = TrainConfig(model="resnet18", dataset="cifar10", data_dir=str(tmp_path))
    assert datasets.cifar10_or_standin(config) == (config, None)


def test_cli_says_where_it_is_missing(tmp_path, capsys):
    assert datasets.main(["--data-dir", str(tmp_path)]) == 1
    assert "is NOT in" in capsys.readouterr().out


def test_the_validation_text_names_a_real_sets_test_split_and_a_generated_sets_fraction() -> None:
    assert datasets.validation_text(TrainConfig(dataset="fashion-mnist")) == "validated on its 10,000 test images"
    assert datasets.validation_text(TrainConfig(dataset="generated", val_fraction=0.25)) == "validation 25%"


def test_the_fashion_notice_says_the_side_the_runs_train_at(tmp_path: Path) -> None:
    assert "padded to 32 x 32)" in datasets.fashion_notice(tmp_path, 60_000)
    assert "padded to 32 x 32, then resized to 224 x 224)" in datasets.fashion_notice(tmp_path, 60_000, 224)
