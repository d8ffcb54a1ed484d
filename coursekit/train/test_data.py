import itertools
import pickle
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from coursekit.train.config import TrainConfig
from coursekit.train.data import (
    CIFAR10_FOLDER,
    DeviceBatches,
    build_data,
    jpeg,
    make_generated_images,
    make_loader,
    shutdown_workers,
)
from coursekit.train.data.pointclouds import SPECIES, make_point_clouds

CPU = torch.device("cpu")
SINGLE = SimpleNamespace(rank=0, world_size=1, device=CPU)
TINY_JPEG = (64, 48)


def first_batch(loader):
    return next(iter(loader))


def test_generated_set_shapes_split_and_determinism():
    cfg = TrainConfig(dataset="generated", num_samples=500, val_fraction=0.2, batch_size=16, image_size=16)
    data = build_data(cfg, SINGLE)
    assert data.input_shape == (3, 16, 16) and data.task == "classification" and data.num_classes == 10
    assert len(data.train_loader.dataset) == 400 and len(data.val_loader.dataset) == 100
    assert data.steps_per_epoch == len(data.train_loader) == 25
    x, y = first_batch(data.train_loader)
    assert x.shape == (16, 3, 16, 16) and y.dtype == torch.int64
    a, _ = make_generated_images(50, 10, 16, seed=3)
    b, _ = make_generated_images(50, 10, 16, seed=3)
    c, _ = make_generated_images(50, 10, 16, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert 0.8 < a.std() < 1.2  # unit variance by construction


def test_generated_set_is_learnable_well_above_chance():
    torch.manual_seed(0)
    images, labels = make_generated_images(3000, 10, 16, seed=0)
    train_x, train_y, val_x, val_y = images[:2400], labels[:2400], images[2400:], labels[2400:]
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 10))  # logistic regression
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(300):
        idx = torch.randint(0, len(train_x), (64,))
        optimizer.zero_grad()
        F.cross_entropy(model(train_x[idx]), train_y[idx]).backward()
        optimizer.step()
    with torch.no_grad():
        val_acc = (model(val_x).argmax(1) == val_y).float().mean().item()
    chance = 1 / 10
    assert val_acc > 3 * chance, f"val accuracy {val_acc:.2f} is not clearly above chance"


def test_line_is_the_dli_regression():
    cfg = TrainConfig(dataset="line", model="linear", batch_size=100)
    data = build_data(cfg, SINGLE)
    assert data.task == "regression" and data.input_shape == (1,) and data.num_classes == 1
    assert data.steps_per_epoch == 1  # batch 100 = full-batch gradient descent on the 100 points
    x, y = first_batch(data.train_loader)
    assert x.shape == y.shape == (100, 1)
    design = torch.cat([x, torch.ones_like(x)], dim=1)
    slope, intercept = torch.linalg.lstsq(design, y).solution.flatten().tolist()
    assert abs(slope - 10) < 1.5 and abs(intercept - 2) < 1.0
    assert len(data.val_loader.dataset) == 20


def test_synthetic_loader_and_gpu_resident_iterator():
    cfg = TrainConfig(dataset="synthetic", batch_size=8, image_size=24, num_classes=7)
    data = build_data(cfg, SINGLE)
    assert data.steps_per_epoch == 100  # SYNTHETIC_STEPS_PER_EPOCH global batches by default
    x, y = first_batch(data.train_loader)
    assert x.shape == (8, 3, 24, 24) and int(y.max()) < 7
    resident = build_data(cfg.replace(gpu_resident=True, num_samples=40, test_steps=3), SINGLE)
    assert isinstance(resident.train_loader, DeviceBatches) and resident.val_loader is None
    batches = list(resident.train_loader)
    assert len(batches) == resident.steps_per_epoch == 5
    assert all(b[0].shape == (8, 3, 24, 24) and b[0].device == CPU for b in batches)


def test_pointclouds_have_learnable_species():
    cfg = TrainConfig(dataset="pointclouds", model="pointnet", num_samples=60, batch_size=6)
    x, _ = first_batch(build_data(cfg, SINGLE).train_loader)
    assert x.shape == (6, 512, 3)
    points, labels = make_point_clouds(400, num_classes=len(SPECIES), num_points=256, seed=1)
    assert points.norm(dim=2).amax(dim=1).allclose(torch.ones(400))  # unit sphere
    # descriptor: crown radius per height slice; nearest class mean must beat chance clearly
    z, radius = points[..., 2], points[..., :2].norm(dim=2)
    bins = ((z - z.amin(1, keepdim=True)) / (z.amax(1, keepdim=True) - z.amin(1, keepdim=True)) * 7.999).long()
    descriptor = torch.zeros(400, 8).scatter_reduce(1, bins, radius, reduce="amax")
    means = torch.stack([descriptor[:300][labels[:300] == k].mean(0) for k in range(len(SPECIES))])
    predicted = torch.cdist(descriptor[300:], means).argmin(1)
    assert (predicted == labels[300:]).float().mean() > 3 / len(SPECIES)
    with pytest.raises(ValueError, match="num-classes"):
        make_point_clouds(20, num_classes=len(SPECIES) + 1)


def test_distributed_shards_form_the_single_process_global_batch():
    cfg = TrainConfig(dataset="generated", num_samples=100, val_fraction=0.0, batch_size=5, image_size=8)
    ranks = [build_data(cfg, SimpleNamespace(rank=r, world_size=2, device=CPU)) for r in range(2)]
    single = build_data(cfg.replace(batch_size=10), SINGLE)
    for data in (*ranks, single):
        data.train_sampler.set_epoch(1)
    union = torch.cat([first_batch(d.train_loader)[0] for d in ranks])
    global_batch = first_batch(single.train_loader)[0]
    as_set = lambda t: sorted(map(tuple, t.flatten(1)[:, :4].tolist()))  # noqa: E731
    assert as_set(union) == as_set(global_batch)
    assert ranks[0].steps_per_epoch == single.steps_per_epoch == 10


def test_loader_options_reach_the_dataloader():
    cfg = TrainConfig(dataset="generated", num_samples=64, batch_size=8, image_size=8, workers=1,
                      prefetch_factor=3, persistent_workers=True, pin_memory=True, drop_last=True)
    loader = build_data(cfg, SINGLE).train_loader
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (1, 3, True)
    assert loader.pin_memory and loader.drop_last
    with pytest.raises(ValueError, match="prefetch_factor"):
        build_data(cfg.replace(workers=0, persistent_workers=False), SINGLE)
    with pytest.raises(ValueError, match="persistent_workers"):
        build_data(cfg.replace(workers=0, prefetch_factor=None), SINGLE)


@pytest.mark.parametrize("changes, message", [
    ({"dataset": "mnist"}, "mnist"),
    ({"dataset": "cifar10"}, "data-dir"),
    ({"dataset": "imagefolder", "data_dir": "/nonexistent/imagenet"}, "/nonexistent/imagenet"),
    ({"dataset": "generated", "gpu_resident": True}, "gpu_resident"),
    ({"dataset": "generated", "image_size": 1024}, "GiB of host memory"),
    ({"dataset": "line", "gpu_decode": True}, "gpu_decode"),
])
def test_bad_data_options_are_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        build_data(TrainConfig(**changes), SINGLE)


def test_cifar10_missing_names_data_dir_and_download(tmp_path):
    with pytest.raises(ValueError, match=r"(?s)--download.*data-dir") as err:
        build_data(TrainConfig(dataset="cifar10", data_dir=str(tmp_path)), SINGLE)
    assert str(tmp_path) in str(err.value)


def write_fake_cifar10(root: Path, per_batch: int) -> None:
    folder = root / CIFAR10_FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 "labels": rng.integers(0, 10, per_batch).tolist()}
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": [f"c{i}" for i in range(10)]}))


def test_cifar10_loads_torchvisions_format(tmp_path, monkeypatch):
    write_fake_cifar10(tmp_path, per_batch=4)
    import torchvision.datasets.cifar

    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args: True)  # fake checksums
    data = build_data(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), batch_size=8), SINGLE)
    assert len(data.train_loader.dataset) == 20 and len(data.val_loader.dataset) == 4
    x, y = first_batch(data.train_loader)
    assert x.shape == (8, 3, 32, 32) and y.shape == (8,) and data.num_classes == 10



def test_cifar10_subset_is_its_first_images_and_too_many_is_refused(tmp_path, monkeypatch):
    write_fake_cifar10(tmp_path, per_batch=4)
    import torchvision.datasets.cifar

    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args: True)
    full = build_data(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), batch_size=4), SINGLE)
    part = build_data(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), batch_size=4, num_samples=6), SINGLE)
    assert len(part.train_loader.dataset) == 6 and len(part.val_loader.dataset) == 4
    assert list(part.train_loader.dataset.indices) == list(range(6)) and len(full.train_loader.dataset) == 20
    with pytest.raises(ValueError, match="num_samples=21 is more than"):
        build_data(TrainConfig(dataset="cifar10", data_dir=str(tmp_path), num_samples=21), SINGLE)

@pytest.fixture(scope="module")
def jpeg_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("jpegs")
    assert jpeg.main(["--out", str(root), "--classes", "2", "--images-per-class", "4",
                      "--val-images-per-class", "2", "--width", str(TINY_JPEG[0]), "--height", str(TINY_JPEG[1])]) == 0
    return root


def test_a_loader_worker_reads_jpeg_bytes_without_importing_torchvision(jpeg_tree, monkeypatch):
    from torchvision import io

    file = next((jpeg_tree / "train").glob("*/*.jpg"))
    expected = io.read_file(str(file))
    # a forked worker of a process that used CUDA aborted inside that import (lab 05 on an H200)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    read = jpeg.read_bytes(str(file))
    assert read.dtype == torch.uint8 and torch.equal(read, expected)


def test_jpeg_tree_layout_and_imagenet_like_file_size(jpeg_tree, tmp_path):
    assert len(list((jpeg_tree / "train").glob("*/*.jpg"))) == 8
    assert len(list((jpeg_tree / "val").glob("*/*.jpg"))) == 4
    info = jpeg.write_synthetic_jpeg_tree(tmp_path, num_classes=1, images_per_class=1, val_images_per_class=0)
    assert 60_000 < info["bytes"] < 150_000  # one 500x375 image, ImageNet's ~100 kB


def test_jpeg_folder_decodes_on_the_cpu(jpeg_tree):
    cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), batch_size=4, image_size=32)
    data = build_data(cfg, SINGLE)
    assert data.num_classes == 2 and data.steps_per_epoch == 2
    x, y = first_batch(data.train_loader)
    assert x.shape == (4, 3, 32, 32) and set(y.tolist()) <= {0, 1}
    assert first_batch(data.val_loader)[0].shape == (4, 3, 32, 32)
    flat = build_data(cfg.replace(data_dir=str(jpeg_tree / "train"), val_fraction=0.25), SINGLE)
    assert len(flat.train_loader.dataset) == 6 and len(flat.val_loader.dataset) == 2


def test_gpu_decode_needs_cuda_and_its_decoding_matches_pil(jpeg_tree):
    cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), gpu_decode=True, image_size=32)
    with pytest.raises(ValueError, match="CUDA"):
        build_data(cfg, SINGLE)
    files = sorted((jpeg_tree / "val").glob("*/*.jpg"))
    decoded = jpeg.decode_batch([jpeg.read_bytes(str(f)) for f in files], "cpu", 32, train=False, rng=None)
    from PIL import Image

    reference = torch.stack([jpeg.cpu_transform(32, train=False)(Image.open(f).convert("RGB")) for f in files])
    assert decoded.shape == reference.shape == (len(files), 3, 32, 32)
    # same crop and normalisation, other resampling code: equal up to pixel noise, unlike a shifted crop
    pooled = lambda t: F.avg_pool2d(t, 4)  # noqa: E731
    error = (pooled(decoded) - pooled(reference)).abs().mean()
    assert error < 0.2 and error < 0.5 * (pooled(decoded) - pooled(reference.roll(3, -1))).abs().mean()
    import random

    augmented = jpeg.decode_batch([jpeg.read_bytes(str(f)) for f in files], "cpu", 24, train=True, rng=random.Random(0))
    assert augmented.shape == (len(files), 3, 24, 24) and torch.isfinite(augmented).all()


def test_empty_image_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="coursekit.train.data.jpeg"):
        build_data(TrainConfig(dataset="jpeg_folder", data_dir=str(tmp_path)), SINGLE)


def _threads_left(before: set) -> list:
    """Threads started since `before` and still running: another test's thread that ends meanwhile (an asyncio
    child watcher, a stop thread) must not count, as it did when the tests compared thread counts."""
    return [thread for thread in threading.enumerate() if thread not in before]


def test_decoding_thread_keeps_order_stops_early_and_raises_loader_errors(jpeg_tree):
    files = sorted((jpeg_tree / "train").glob("*/*.jpg"))
    batches = [([jpeg.read_bytes(str(f))], torch.tensor([i])) for i, f in enumerate(files)]
    threads_before = set(threading.enumerate())
    decoded = jpeg.GpuDecodedBatches(batches, "cpu", 16, train=True, channels_last=True, prefetch=2)
    labels = [int(y) for x, y in decoded]
    assert labels == list(range(len(files)))
    x, _ = next(iter(decoded))
    assert x.shape == (1, 3, 16, 16) and x.is_contiguous(memory_format=torch.channels_last)
    for i, _ in enumerate(decoded):  # leaving early must not leave the decoding thread blocked
        if i == 1:
            break
    assert _threads_left(threads_before) == []

    def failing():
        yield batches[0]
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(jpeg.GpuDecodedBatches(failing(), "cpu", 16, train=False))


def _epoch_seeded_loader(jpeg_tree, workers: int = 0, persistent: bool = False, endless: bool = False):
    from torch.utils.data import DataLoader, DistributedSampler

    dataset = jpeg.image_folder(jpeg_tree / "train", 16, train=True, raw_bytes=True)
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=3)
    batches = ({"batch_sampler": jpeg.EndlessEpochs(sampler, 2, drop_last=False)} if endless
               else {"batch_size": 2, "sampler": sampler})
    return DataLoader(dataset, num_workers=workers, persistent_workers=persistent, collate_fn=jpeg.collate_bytes,
                      **batches)


@pytest.mark.parametrize("drop_last", [False, True])
def test_endless_epochs_are_the_samplers_epochs_one_after_the_other(drop_last):
    from torch.utils.data import BatchSampler, DistributedSampler

    sampler = DistributedSampler(range(11), num_replicas=2, rank=1, shuffle=True, seed=5)
    sampler.set_epoch(3)
    endless = jpeg.EndlessEpochs(sampler, 4, drop_last)
    assert len(endless) == (1 if drop_last else 2)  # 6 of the 11 indices on rank 1
    got = list(itertools.islice(endless, 4 * len(endless)))
    want = []
    for epoch in range(3, 7):
        sampler.set_epoch(epoch)
        want += list(BatchSampler(sampler, 4, drop_last))
    assert got == want
    sampler.set_epoch(0)  # the loop's set_epoch on the original: a new pass starts at start_epoch, not there
    assert list(itertools.islice(endless, 1)) == want[:1]


def _epoch(decoded, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    decoded.sampler.set_epoch(epoch)  # as the training loop does before each epoch
    return [(x.clone(), y.clone()) for x, y in decoded]


@pytest.mark.parametrize("endless", [False, True])
def test_decoding_runs_into_the_next_epoch_and_gives_what_a_fresh_pass_gives(jpeg_tree, endless, monkeypatch):
    import time

    from torch.utils.data import DataLoader

    starts = []
    original_iter = DataLoader.__iter__
    monkeypatch.setattr(DataLoader, "__iter__", lambda self: starts.append(1) or original_iter(self))
    threads_before = set(threading.enumerate())
    ahead = jpeg.GpuDecodedBatches(_epoch_seeded_loader(jpeg_tree, endless=endless), "cpu", 16, train=True, seed=1,
                                   prefetch=2)
    reference = jpeg.GpuDecodedBatches(_epoch_seeded_loader(jpeg_tree), "cpu", 16, train=True, seed=1, prefetch=0)
    assert ahead.run_ahead and not reference.run_ahead
    first = _epoch(ahead, 0)
    producer = ahead._producer
    deadline = time.monotonic() + 10
    while producer.out.qsize() < 2 and time.monotonic() < deadline:  # epoch 1's batches, before the loop asks
        time.sleep(0.01)
    assert producer.out.qsize() == 2 and producer.epoch == 1
    second = _epoch(ahead, 1)
    assert ahead._producer is producer  # the batches decoded ahead were used, no restart
    assert len(starts) == 1 if endless else len(starts) >= 2  # endless: the loader (its workers) never restarted
    resumed = _epoch(ahead, 5)  # another epoch than the one decoded ahead (a resume): restarted for it
    assert ahead._producer is not producer
    for got, epoch in ((first, 0), (second, 1), (resumed, 5)):
        want = _epoch(reference, epoch)
        assert [y.tolist() for _, y in got] == [y.tolist() for _, y in want]
        assert all(torch.equal(a, b) for (a, _), (b, _) in zip(got, want, strict=True))  # same crops and flips
    assert [y.tolist() for _, y in first] != [y.tolist() for _, y in second]  # shuffled anew each epoch
    ahead.close()
    assert ahead._producer is None and _threads_left(threads_before) == []


def test_shutdown_stops_the_decoding_thread_before_the_workers_it_reads_from(jpeg_tree):
    import multiprocessing

    decoded = jpeg.GpuDecodedBatches(_epoch_seeded_loader(jpeg_tree, workers=2, persistent=True), "cpu", 16,
                                     train=True, prefetch=2)
    _epoch(decoded, 0)
    producer = decoded._producer
    assert producer is not None and producer.thread.is_alive()  # decoding epoch 1 already
    assert len(multiprocessing.active_children()) == 2
    shutdown_workers(decoded)
    assert decoded._producer is None and not producer.thread.is_alive()
    assert multiprocessing.active_children() == []


def test_gpu_decode_trains_from_endless_epochs_and_validates_from_a_plain_loader(jpeg_tree):
    cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), gpu_decode=True, image_size=16, batch_size=3,
                      workers=2, persistent_workers=True)
    data = build_data(cfg, SimpleNamespace(rank=0, world_size=1, device=torch.device("cuda")))  # not decoded here
    train, val = data.train_loader, data.val_loader
    assert train.endless_epochs is not None and train.run_ahead and train.sampler is data.train_sampler
    assert len(train) == data.steps_per_epoch == 3 and train.loader.num_workers == 2  # 8 images, batch 3
    assert val.endless_epochs is None and not val.run_ahead


def test_gpu_resident_batches_can_be_channels_last():
    cfg = TrainConfig(dataset="synthetic", gpu_resident=True, channels_last=True, batch_size=4, image_size=8,
                      num_samples=8)
    x, _ = first_batch(build_data(cfg, SINGLE).train_loader)
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_raw_jpeg_bytes_cross_loader_workers_without_hanging(tmp_path: Path) -> None:
    """Regression: one tensor per image through worker processes exhausted file descriptors and hung."""
    from torch.utils.data import DataLoader

    jpeg.write_synthetic_jpeg_tree(tmp_path, num_classes=2, images_per_class=24, size=(64, 48))
    dataset = jpeg.image_folder(tmp_path / "train", 32, train=True, raw_bytes=True)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, persistent_workers=True, prefetch_factor=4,
                        collate_fn=jpeg.collate_bytes, drop_last=True)
    decoded = jpeg.GpuDecodedBatches(loader, "cpu", 32, train=True, prefetch=2)
    for _ in range(2):  # two partial epochs: the producer thread must stop and restart cleanly
        for index, (images, labels) in enumerate(decoded):
            assert images.shape == (8, 3, 32, 32) and labels.shape == (8,)
            if index == 1:
                break


def test_no_more_workers_than_batches_and_validation_workers_do_not_persist(jpeg_tree):
    # 8 train images in batches of 4: 2 batches an epoch keep 2 workers busy, not 16; the 4 val images
    # are one batch, prepared by one worker that stops after the pass
    cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), image_size=16, batch_size=4, workers=16,
                      persistent_workers=True, prefetch_factor=4)
    data = build_data(cfg, SINGLE)
    assert (data.train_loader.num_workers, data.train_loader.persistent_workers) == (2, True)
    assert (data.val_loader.num_workers, data.val_loader.persistent_workers) == (1, False)


def test_gpu_decoding_loader_spawns_its_workers_and_they_read_the_files(jpeg_tree):
    # forked workers inherit the process's CUDA state and abort (lab 05's nvjpeg run on an H200); spawned ones
    # start clean: the raw-bytes dataset and its collate function must cross to them
    cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), gpu_decode=True, batch_size=4, workers=1)
    dataset = jpeg.image_folder(jpeg_tree / "train", 16, train=True, raw_bytes=True)
    loader, _ = make_loader(dataset, cfg, SINGLE, train=True, collate_fn=jpeg.collate_bytes, endless=True)
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    (packed, lengths), labels = next(iter(loader))
    assert len(lengths) == len(labels) == 4 and int(lengths.sum()) == packed.numel()
    cpu_cfg = TrainConfig(dataset="jpeg_folder", data_dir=str(jpeg_tree), batch_size=4, workers=1)
    assert make_loader(dataset, cpu_cfg, SINGLE, train=True)[0].multiprocessing_context is None


def test_loader_start_epochs_and_shutdown_cost_little_beside_the_steps(jpeg_tree, tmp_path):
    """Lab 05's slow case (16 persistent workers, prefetch 4, several epochs with validation): the run's
    time outside its steps stays bounded by the steps' own time (plus a fixed allowance for a loaded CI
    machine), where 16 + 16 idle workers per loader used to multiply it."""
    import time

    from coursekit.metrics import epochs, read_metrics
    from coursekit.train.engine import train

    cfg = TrainConfig(model="mlp", dataset="jpeg_folder", data_dir=str(jpeg_tree), image_size=16, batch_size=4,
                      steps=6, workers=16, persistent_workers=True, prefetch_factor=4, progress="off",
                      out=str(tmp_path / "run"))
    start = time.perf_counter()
    summary = train(cfg)
    wall = time.perf_counter() - start
    epoch_s = sum(r["epoch_time_s"] for r in epochs(read_metrics(tmp_path / "run")))
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert wall - epoch_s < 2 * epoch_s + 10.0, f"{wall:.1f} s for {epoch_s:.1f} s of epochs"


class _ThreadCount(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return torch.get_num_threads()


def test_loader_workers_compute_with_one_torch_thread():
    """16 workers with 16 torch threads each would oversubscribe a 16-core node: torch gives each one."""
    loader = torch.utils.data.DataLoader(_ThreadCount(), batch_size=2, num_workers=2)
    assert [int(x) for batch in loader for x in batch] == [1, 1, 1, 1]


def test_run_stops_persistent_workers_and_records_loader_phases(jpeg_tree, tmp_path):
    """Persistent (pinned) workers stop when the run ends, not at interpreter exit where torch 2.11 joins
    each with a 5 s timeout (lab 05: 191 s for a 30-step run); the summary says where loader time went."""
    import multiprocessing

    from coursekit.train.engine import train

    cfg = TrainConfig(model="mlp", dataset="jpeg_folder", data_dir=str(jpeg_tree), image_size=16, batch_size=4,
                      steps=5, workers=4, persistent_workers=True, prefetch_factor=4, pin_memory=True,
                      progress="off", out=str(tmp_path / "run"))
    summary = train(cfg)
    assert multiprocessing.active_children() == []
    phases = summary["loader_phases"]
    assert set(phases) == {"build_s", "first_batch_s", "validation_s", "shutdown_s"}
    assert len(phases["first_batch_s"]) == 3  # 2 batches an epoch, 5 steps: 3 epochs started
    assert phases["validation_s"] > 0 and all(v >= 0 for v in (phases["build_s"], phases["shutdown_s"]))


def test_gpu_jpeg_decoder_choice_and_fallback(monkeypatch):
    """torchvision's nvjpeg by default (measured faster beside the step), nvImageCodec (hardware JPEG engines)
    when asked for; asked for where it is absent: a clear error; as the default where it is absent: torchvision.
    (The hardware path itself needs a GPU: bench/jpeg_decode_gpu.py.)"""
    import sys

    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # the package absent, as on this machine
    monkeypatch.delenv(jpeg.DECODER_ENV, raising=False)
    assert jpeg.nvimgcodec_decoder(CPU) is None
    assert jpeg.choose_decoder(CPU)[0] == "torchvision"
    monkeypatch.setattr(jpeg, "DEFAULT_DECODER", "nvimgcodec")
    assert jpeg.choose_decoder(CPU)[0] == "torchvision"
    monkeypatch.setenv(jpeg.DECODER_ENV, "nvimgcodec")
    with pytest.raises(ValueError, match="nvidia-nvimgcodec-cu13"):
        jpeg.choose_decoder(CPU)
    monkeypatch.setenv(jpeg.DECODER_ENV, "dali")
    with pytest.raises(ValueError, match="COURSEKIT_JPEG_DECODER"):
        jpeg.choose_decoder(CPU)


def test_decoded_batches_say_which_decoder_ran(jpeg_tree):
    files = sorted((jpeg_tree / "train").glob("*/*.jpg"))[:2]
    loader = [(jpeg.collate_bytes([(jpeg.read_bytes(str(f)), 0) for f in files]))]
    batches = jpeg.GpuDecodedBatches(loader, "cpu", 16, train=False, prefetch=0)
    (images, labels), = list(batches)
    assert images.shape == (2, 3, 16, 16) and batches.decoder_name == "torchvision"


def test_nvimgcodec_path_decodes_in_rgb_chw_and_falls_back_on_failure(jpeg_tree, monkeypatch):
    """The hardware path's plumbing, with a stand-in for nvImageCodec (PIL decodes): HWC images come back
    as (3, H, W) like torchvision's; an image it cannot decode sends the batch to torchvision."""
    import io as pyio
    import sys
    import types

    from PIL import Image

    calls = {"decode": 0}

    class Decoder:
        fail = False

        def __init__(self, device_id, backends, max_num_cpu_threads=0):
            calls["backends"], calls["threads"] = backends, max_num_cpu_threads

        def decode(self, sources, params=None, cuda_stream=0):
            calls["decode"] += 1
            if self.fail:
                return [None for _ in sources]
            return [np.array(Image.open(pyio.BytesIO(s.tobytes())).convert("RGB")) for s in sources]

    fake = types.SimpleNamespace(
        Decoder=Decoder, Backend=lambda kind: kind, BackendKind=types.SimpleNamespace(HW_GPU_ONLY=4, GPU_ONLY=2),
        DecodeParams=lambda **kw: kw, ColorSpec=types.SimpleNamespace(SRGB=1), SampleFormat=types.SimpleNamespace(I_RGB=2))
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", fake)
    monkeypatch.setitem(sys.modules, "nvidia", types.SimpleNamespace(nvimgcodec=fake))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=0))
    monkeypatch.delenv(jpeg.DECODER_ENV, raising=False)
    decode = jpeg.nvimgcodec_decoder(CPU)
    files = sorted((jpeg_tree / "train").glob("*/*.jpg"))[:2]
    encoded = [jpeg.read_bytes(str(f)) for f in files]
    images = decode(encoded)
    reference = jpeg.torchvision_decoder(CPU)(encoded)
    assert calls["decode"] == 1 and [i.shape for i in images] == [r.shape for r in reference]
    assert all(torch.equal(i, r) for i, r in zip(images, reference, strict=True))
    assert jpeg.choose_decoder(CPU)[0] == "torchvision"  # the default: measured faster beside the step
    monkeypatch.setenv(jpeg.DECODER_ENV, "nvimgcodec")
    assert jpeg.choose_decoder(CPU)[0] == "nvimgcodec"
    Decoder.fail = True  # an image it cannot decode: the batch goes through torchvision
    assert all(torch.equal(i, r) for i, r in zip(decode(encoded), reference, strict=True)) and calls["decode"] == 2
    assert decode.state == {"broken": False, "batches": 2, "fallback_batches": 1}
    assert calls["backends"] == [4, 2] and calls["threads"] == 0  # hardware first, CUDA where it cannot
    jpeg.nvimgcodec_decoder(CPU, backends=("cuda",), cpu_threads=4)
    assert calls["backends"] == [2] and calls["threads"] == 4
    with pytest.raises(ValueError, match="backends=.*hardware, cuda"):
        jpeg.nvimgcodec_decoder(CPU, backends=("dali",))


def test_crop_resize_batches_images_by_size_and_keeps_their_order():
    """One roi_align per image size (few kernel launches in the decoding thread); mixed sizes stay in order."""
    g = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 255, shape, dtype=torch.uint8, generator=g) for shape in
              [(3, 40, 50), (3, 30, 50), (3, 40, 50)]]
    boxes = [jpeg.center_box(x.shape[1], x.shape[2], 16) for x in images]
    together = jpeg.crop_resize(images, boxes, 16)
    alone = torch.cat([jpeg.crop_resize([x], [box], 16) for x, box in zip(images, boxes, strict=True)])
    assert together.shape == (3, 3, 16, 16) and torch.equal(together, alone)
