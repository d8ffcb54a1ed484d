"""--device-data, --holdout-samples, the airbench model, the linear schedule and --noise-every (lab 07's engine)."""

import pytest
import torch
import torch.nn.functional as F

from coursekit.metrics import read_metrics, steps
from coursekit.train.checks import static_problems
from coursekit.train.config import TrainConfig
from coursekit.train.data import make_generated_images
from coursekit.train.data.device import PAD, DeviceImages, build_device_data
from coursekit.train.engine import train
from coursekit.train.models import build_model
from coursekit.train.noise import TwoBatchNoise
from coursekit.train.schedule import lr_factor


class Ctx:
    rank, world_size, device = 0, 1, torch.device("cpu")


def _images(n=6, side=8, channels=1):
    return torch.arange(n * channels * side * side, dtype=torch.int64).remainder(251).to(torch.uint8).view(
        n, channels, side, side)


def test_a_training_batch_is_a_reflect_padded_crop_of_each_image_mirrored_or_not():
    images = _images()
    loader = DeviceImages(images, torch.arange(6), 6, train=True, seed=3)
    x, y = next(iter(loader))
    padded = F.pad(images.float(), (PAD,) * 4, mode="reflect")
    for sample, label in zip((x * 255).round(), y, strict=True):  # mean 0, std 1: the pixels / 255
        windows = [padded[label, :, r:r + 8, c:c + 8] for r in range(2 * PAD + 1) for c in range(2 * PAD + 1)]
        windows += [w.flip(-1) for w in windows]
        assert any(torch.equal(sample, w) for w in windows)
    assert not torch.equal((x * 255).round(), images.float()[y])  # 50 candidates: an unaugmented batch would be a fluke


def test_an_epoch_is_the_same_for_the_same_seed_and_epoch_and_differs_between_epochs():
    make = lambda: DeviceImages(_images(), torch.arange(6), 3, train=True, seed=1)  # noqa: E731
    a, b = make(), make()
    first = [x for x, _ in a]
    assert all(torch.equal(p, q) for p, q in zip(first, [x for x, _ in b], strict=True))
    a.set_epoch(1)
    assert not all(torch.equal(p, q) for p, q in zip(first, [x for x, _ in a], strict=True))


def test_validation_batches_are_the_normalised_images_in_order_with_grey_repeated():
    images = _images()
    loader = DeviceImages(images, torch.arange(6), 4, train=False, mean=(0.5,), std=(0.25,), channels=3)
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 8, 8) and y.tolist() == [0, 1, 2, 3]
    assert torch.allclose(x[:, 0], (images[:4, 0].float() / 255 - 0.5) / 0.25, atol=1e-6)
    assert torch.equal(x[:, 0], x[:, 2]) and len(loader) == 2


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="batch_size"):
        DeviceImages(_images(), torch.arange(6), 0, train=True)
    with pytest.raises(ValueError, match="one label each"):
        DeviceImages(_images(), torch.arange(5), 2, train=True)
    problems = " ".join(static_problems(TrainConfig(holdout_samples=10, noise_every=1)))
    assert "holdout_samples=10 needs --device-data" in problems and "noise_every=1 needs --accumulation-steps" in problems
    assert "device_data holds" in " ".join(static_problems(TrainConfig(dataset="line", model="linear", device_data=True)))


def test_the_holdout_split_is_the_last_training_images_and_leaves_the_rest_to_training():
    cfg = TrainConfig(dataset="generated", device_data=True, num_samples=200, holdout_samples=50, image_size=8,
                      batch_size=16)
    generated = make_generated_images(200, 10, 8, seed=0)
    train_loader, val, classes, shape = build_device_data(cfg, Ctx(), generated)
    assert len(train_loader.labels) == 150 and len(val.labels) == 50 and classes == 10 and shape == (3, 8, 8)
    assert torch.equal(val.images, generated[0][150:]) and torch.equal(val.labels, generated[1][150:])
    with pytest.raises(ValueError, match="holdout_samples"):
        build_device_data(cfg.replace(holdout_samples=200), Ctx(), generated)


def test_airbench_has_about_two_million_parameters_and_refuses_tiny_images():
    model = build_model(TrainConfig(model="airbench"), 10, (3, 32, 32))
    assert 1.9e6 < sum(p.numel() for p in model.parameters()) < 2.1e6
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    with pytest.raises(ValueError, match="image-size"):
        build_model(TrainConfig(model="airbench"), 10, (3, 4, 4))


def test_the_linear_schedule_warms_up_in_steps_then_falls_to_zero():
    factors = [lr_factor(s, schedule="linear", steps_per_epoch=10, total_steps=10, warmup_steps=4,
                         warmup_start_factor=0.25) for s in range(10)]
    assert factors[:4] == pytest.approx([0.25, 0.4375, 0.625, 0.8125]) and factors[4] == 1.0
    assert factors[5:] == pytest.approx([5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def test_the_two_batch_estimator_recovers_a_planted_gradient_and_noise():
    """Micro-batch gradients g + e_i (planted): |G|^2 = |g|^2 and tr(Sigma) follow McCandlish's formulas."""
    model = torch.nn.Linear(2, 1, bias=False)
    noise = TwoBatchNoise(model, every=1, decay=0.0)
    g, errors = torch.tensor([[1.0, 2.0]]), [torch.tensor([[1.0, 0.0]]), torch.tensor([[-1.0, 0.0]])]
    total = torch.zeros(1, 2)
    for e in errors:  # each micro-batch adds half its gradient (its loss weight 1/2)
        total = total + (g + e) / 2
        model.weight.grad = total.clone()
        noise.micro_batch_done(0.5)
    noise.step_done(batch=8)
    # |G_small|^2 = 5 + 1 = 6 at b = 4, |G_big|^2 = 5 at B = 8: |G|^2 = (8*5 - 4*6)/4 = 4, tr = 1/(1/4 - 1/8) = 8
    assert noise.grad_sq == pytest.approx(4.0) and noise.trace_sigma == pytest.approx(8.0)
    assert noise.record()["b_simple"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="at least 2 micro-batches"):
        noise.micro_batch_done(1.0)
        noise.step_done(batch=8)


def test_the_engine_trains_on_device_data_with_a_target_on_the_holdout_and_the_noise_scale(tmp_path):
    base = TrainConfig(model="mlp_bn", dataset="generated", device_data=True, num_samples=600, image_size=8,
                       batch_size=32, epochs=2, schedule="linear", warmup_steps=3, nesterov=True, device="cpu",
                       progress="off", drop_last=True)
    summary = train(base.replace(out=str(tmp_path / "a"), holdout_samples=200, target_acc=0.01, eval_every=2,
                                 timing_warmup=0))  # any accuracy reaches 0.01: the run stops at the first evaluation
    assert summary["status"] == "completed" and summary["steps_to_target"] == 2 and summary["steps"] == 2
    assert summary["val_samples"] == 200  # the held-out split, not the generated validation share
    train(base.replace(out=str(tmp_path / "d"), accumulation_steps=4, noise_every=1, log_every=4))
    records = steps(read_metrics(tmp_path / "d"))
    assert all(r["b_simple"] is not None and r["grad_sq"] > 0 for r in records)


def test_fashion_mnist_on_the_device_is_the_loaders_validation_set_and_the_first_training_images():
    from coursekit.train.data import fashion_mnist

    try:
        folder = fashion_mnist.data_folder(None)
    except ValueError:
        pytest.skip("Fashion-MNIST is not installed here")
    cfg = TrainConfig(dataset="fashion-mnist", device_data=True, num_samples=500, batch_size=64)
    train_loader, val, classes, shape = build_device_data(cfg, Ctx())
    reference = fashion_mnist.load(folder, num_samples=500)
    x, y = next(iter(val))
    ref_x, ref_y = reference.val.batch(range(len(y)))  # validation batches hold at least VAL_BATCH_MIN images
    assert torch.allclose(x, ref_x, atol=1e-5) and torch.equal(y, ref_y) and classes == 10 and shape == (3, 32, 32)
    assert len(train_loader.labels) == 500 and torch.equal(train_loader.labels, reference.train.labels)
