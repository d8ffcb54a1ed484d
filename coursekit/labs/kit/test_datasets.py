from coursekit.labs.kit import datasets
from coursekit.train.config import TrainConfig


def test_standin_when_cifar10_is_absent(tmp_path):
    config = TrainConfig(model="resnet18", dataset="cifar10", data_dir=str(tmp_path), batch_size=256)
    chosen, notice = datasets.cifar10_or_standin(config)
    assert chosen.dataset == "generated" and chosen.data_dir is None
    assert (chosen.num_classes, chosen.image_size, chosen.num_samples) == (10, 32, 60_000)
    assert round(chosen.num_samples * (1 - chosen.val_fraction)) == 50_000 and chosen.batch_size == 256
    assert notice.startswith(datasets.STANDIN_MARK) and f"--data-dir {tmp_path}" in notice



def test_standin_keeps_a_subsets_size(tmp_path):
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
