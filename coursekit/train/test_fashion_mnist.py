"""``--dataset fashion-mnist``: Debian's real files (package dataset-fashion-mnist, which CI installs: these tests
fail, never skip, without it), their checks, the CIFAR-shaped samples and a short run of the engine on them."""

from __future__ import annotations

import gzip
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from coursekit.train.checks import static_problems
from coursekit.train.config import TrainConfig
from coursekit.train.data import build_data
from coursekit.train.data import fashion_mnist as fm

SINGLE = SimpleNamespace(rank=0, world_size=1, device=torch.device("cpu"))


@pytest.fixture(scope="module", autouse=True)
def debian_files() -> Path:
    missing = [name for name in fm.FILES if fm.file_path(fm.DEBIAN_DIR, name) is None]
    assert not missing, (f"Debian's Fashion-MNIST is not installed ({', '.join(missing)} missing in {fm.DEBIAN_DIR}): "
                         f"apt-get install -y {fm.DEBIAN_PACKAGE}")
    return fm.DEBIAN_DIR


@pytest.fixture
def one_thread():
    """One torch thread: two busy cores shared by two pytest workers make small CPU ops crawl otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_debian_files_load_fast_as_cifar_shaped_normalized_images(one_thread) -> None:
    fm._CACHE.clear()
    started = time.perf_counter()
    data = fm.load()  # no data_dir: Debian's folder
    seconds = time.perf_counter() - started
    assert seconds < 5, f"verifying and decoding the 70,000 images took {seconds:.1f} s"
    assert data.folder == fm.DEBIAN_DIR and len(data.train) == 60_000 and len(data.val) == 10_000
    assert torch.bincount(data.train.labels).tolist() == [6000] * 10
    assert torch.bincount(data.val.labels).tolist() == [1000] * 10
    assert data.train.classes[9] == "Ankle boot" and data.train.labels[0] == 9  # the first training image
    x, y = data.val.batch(range(10_000))
    assert x.shape == (10_000, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(x[:, 0], x[:, 1]) and torch.equal(x[:, 0], x[:, 2])  # grey in 3 channels
    assert abs(x.mean().item()) < 0.05 and abs(x.std().item() - 1) < 0.05  # normalized (by the train set's stats)
    zero = -fm.MEAN / fm.STD  # the padding: black pixels
    assert torch.allclose(x[:, :, :2], torch.tensor(zero)) and torch.allclose(x[:, :, :, -2:], torch.tensor(zero))
    raw = fm.load_arrays(fm.DEBIAN_DIR)["t10k-images-idx3-ubyte"][:3]
    assert torch.allclose(x[:3, 0, 2:30, 2:30], (torch.from_numpy(raw).float() / 255 - fm.MEAN) / fm.STD, atol=1e-5)
    single_x, single_y = data.val[7]
    assert single_x.shape == (3, 32, 32) and torch.equal(single_x, x[7]) and single_y == y[7]


def test_training_samples_are_random_crops_with_padding_4_and_flips(one_thread) -> None:
    arrays = fm.load_arrays(fm.DEBIAN_DIR)
    images, labels = arrays["train-images-idx3-ubyte"][:1], arrays["train-labels-idx1-ubyte"][:1]
    plain = fm.FashionImages(images, labels, train=False).batch([0])[0][0, 0]
    framed = torch.full((40, 40), -fm.MEAN / fm.STD)
    framed[4:36, 4:36] = plain
    windows = [framed[top:top + 32, left:left + 32] for top in range(9) for left in range(9)]
    candidates = torch.stack(windows + [w.flip(-1) for w in windows])  # every crop, mirrored or not
    torch.manual_seed(0)
    samples = fm.FashionImages(images, labels, train=True).batch([0] * 64)[0][:, 0]
    distance = (samples[:, None] - candidates[None]).abs().amax((-1, -2))  # (64, 162)
    assert (distance.amin(1) < 1e-5).all()  # each sample is one of them
    assert len(set(distance.argmin(1).tolist())) > 20  # and they vary: different windows, both orientations
    assert (distance.argmin(1) >= 81).any() and (distance.argmin(1) < 81).any()


def test_the_engine_builder_takes_the_first_n_images_resizes_and_refuses_too_many(tmp_path, one_thread) -> None:
    cfg = TrainConfig(dataset="fashion-mnist", num_samples=100, batch_size=10)
    data = build_data(cfg, SINGLE)
    full = fm.load()
    assert data.num_classes == 10 and data.input_shape == (3, 32, 32) and data.steps_per_epoch == 10
    train, val = data.train_loader.dataset, data.val_loader.dataset
    assert len(train) == 100 and len(val) == 10_000
    assert torch.equal(train.labels, full.train.labels[:100]) and torch.equal(train.images, full.train.images[:100])
    x, y = next(iter(data.train_loader))
    assert x.shape == (10, 3, 32, 32) and y.shape == (10,) and x.is_contiguous()
    with pytest.raises(ValueError, match="num_samples=60001 is more than Fashion-MNIST's 60,000"):
        build_data(cfg.replace(num_samples=60_001), SINGLE)
    resized = build_data(cfg.replace(image_size=48, workers=1), SINGLE)  # a worker process prepares the batch
    x, _ = next(iter(resized.train_loader))
    assert x.shape == (10, 3, 48, 48) and resized.input_shape == (3, 48, 48)
    assert static_problems(TrainConfig(model="resnet18", dataset="fashion-mnist")) == []  # no --data-dir needed
    assert any("does not exist" in p for p in static_problems(
        TrainConfig(dataset="fashion-mnist", data_dir=str(tmp_path / "nowhere"))))


def copy_files(target: Path, names=tuple(fm.FILES)) -> Path:
    target.mkdir(parents=True)
    for name in names:
        shutil.copyfile(fm.file_path(fm.DEBIAN_DIR, name), target / f"{name}.gz")
    return target


def test_a_data_dir_is_read_in_either_layout_gz_or_not_and_missing_files_say_what_to_do(tmp_path) -> None:
    folder = copy_files(tmp_path / "data" / fm.FOLDER)
    labels = folder / "t10k-labels-idx1-ubyte.gz"
    (folder / "t10k-labels-idx1-ubyte").write_bytes(gzip.decompress(labels.read_bytes()))  # uncompressed
    labels.unlink()
    assert fm.data_folder(tmp_path / "data") == folder == fm.data_folder(folder)  # DIR/fashion-mnist/ or DIR
    assert len(fm.load(tmp_path / "data", num_samples=10).val) == 10_000
    with pytest.raises(ValueError, match=r"(?s)not in data_dir=.*instructor data fashion-mnist.*apt-get install"):
        fm.load(tmp_path)
    (folder / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ValueError, match=r"incomplete: t10k-labels-idx1-ubyte\[\.gz\] missing"):
        fm.load(folder)


def test_a_corrupt_file_is_a_clear_error_that_names_it_and_what_to_do(tmp_path) -> None:
    folder = copy_files(tmp_path / fm.FOLDER)
    labels = gzip.decompress((folder / "train-labels-idx1-ubyte.gz").read_bytes())
    (folder / "train-labels-idx1-ubyte.gz").unlink()
    broken = folder / "train-labels-idx1-ubyte"
    broken.write_bytes(labels[:100] + bytes([labels[100] ^ 1]) + labels[101:])  # one label changed
    with pytest.raises(ValueError, match="MD5") as error:
        build_data(TrainConfig(dataset="fashion-mnist", data_dir=str(tmp_path)), SINGLE)
    text = str(error.value)
    assert f"{broken} is corrupt" in text and fm.FILES["train-labels-idx1-ubyte"] in text
    assert f"coursekit instructor data fashion-mnist --dir {tmp_path}" in text
    truncated = folder / "t10k-labels-idx1-ubyte.gz"
    truncated.write_bytes(truncated.read_bytes()[:1000])
    assert any(str(truncated) in p and "decompressed" in p for p in fm.verify_folder(folder))


def test_one_epoch_of_the_engine_on_2000_images_learns_far_above_chance(tmp_path, one_thread) -> None:
    from coursekit.train.engine import train

    summary = train(TrainConfig(model="mlp", dataset="fashion-mnist", num_samples=2000, epochs=1, batch_size=32,
                                optimizer="adamw", lr=1e-3, progress="off", device="cpu", out=str(tmp_path / "run")))
    assert summary["status"] == "completed" and summary["steps"] == 63
    assert summary["val_acc"] > 0.5  # chance: 0.1; measured 0.61 (seed 0)
    summary = train(TrainConfig(model="resnet18", dataset="fashion-mnist", num_samples=8, batch_size=4, test_steps=1,
                                progress="off", device="cpu", out=str(tmp_path / "resnet")))
    assert summary["status"] == "completed" and summary["steps"] == 1
