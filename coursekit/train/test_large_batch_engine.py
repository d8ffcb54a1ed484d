"""Engine options of lab 07 (large batches): noise scale, trust ratios, LARS eta, warm-up start, smoothing."""

import math

import pytest
import torch
from torch import nn

from coursekit.metrics import read_metrics, steps
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig
from coursekit.train.engine import train
from coursekit.train.loop import classification_loss, regression_loss
from coursekit.train.models import GhostBatchNorm1d, build_model
from coursekit.train.optim import build_optimizer
from coursekit.train.probes import layer_norms, noise_scale, two_batch_noise_scale
from coursekit.train.schedule import build_scheduler

# Toy problem: one weight w = 0, samples x = 1 with targets y in TOY_Y, loss (w - y)^2. The gradient of
# sample i is -2 y_i = -2, -4, -6, -8: G = -5, |G|^2 = 25, tr(Sigma) = mean((g_i - G)^2) = (9+1+1+9)/4 = 5,
# so B_simple = 5 / 25 = 0.2.
TOY_Y = [1.0, 2.0, 3.0, 4.0]
TOY_GRAD_SQ, TOY_TRACE_SIGMA, TOY_B_SIMPLE = 25.0, 5.0, 0.2


def toy() -> tuple[nn.Module, torch.utils.data.TensorDataset]:
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)
    data = torch.utils.data.TensorDataset(torch.ones(len(TOY_Y), 1), torch.tensor(TOY_Y).reshape(-1, 1))
    return model, data


def test_b_simple_matches_the_hand_computed_toy_value():
    model, data = toy()
    result = noise_scale(model, data, regression_loss, batch_size=2, num_batches=4000, device=torch.device("cpu"),
                         seed=0)
    assert result["grad_sq"] == pytest.approx(TOY_GRAD_SQ)
    # E||g_B - g||^2 = tr(Sigma)/B * (n - B)/(n - 1) = 5/2 * 2/3 for B = 2 of n = 4
    assert result["grad_noise_var"] == pytest.approx(5 / 3, rel=0.05)
    assert result["trace_sigma"] == pytest.approx(TOY_TRACE_SIGMA, rel=0.05)
    assert result["b_simple"] == pytest.approx(TOY_B_SIMPLE, rel=0.05)
    full = noise_scale(model, data, regression_loss, batch_size=4, num_batches=2, device=torch.device("cpu"), seed=0)
    assert full["b_simple"] is None and full["grad_noise_var"] == pytest.approx(0.0)  # the whole set: no noise


def test_noise_probe_in_the_steps_shape_uses_whole_chunks_the_callers_move_and_autocast():
    """chunk = the training batch: the set is cut to whole chunks (10 samples, chunk 4 -> the first 8), every
    forward goes through the caller's to_device and autocast (the engine's channels_last and bf16)."""
    import contextlib

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(10, 3, generator=g), torch.randn(10, 1, generator=g))
    model = nn.Linear(3, 1)
    calls = {"move": 0, "autocast": 0}

    def move(batch):
        calls["move"] += 1
        return batch[0], batch[1]

    def autocast():
        calls["autocast"] += 1
        return contextlib.nullcontext()

    chunked = noise_scale(model, data, regression_loss, batch_size=4, num_batches=3, device=torch.device("cpu"),
                          seed=1, to_device=move, autocast=autocast, chunk=4)
    first8 = noise_scale(model, torch.utils.data.Subset(data, range(8)), regression_loss, batch_size=4,
                         num_batches=3, device=torch.device("cpu"), seed=1)
    assert chunked == pytest.approx(first8)
    assert calls == {"move": 2 + 3, "autocast": 2 + 3}  # 2 chunks of the set, 3 mini-batches
    whole = noise_scale(model, data, regression_loss, batch_size=4, num_batches=3, device=torch.device("cpu"), seed=1)
    assert whole["grad_sq"] != pytest.approx(chunked["grad_sq"])  # without chunk: all 10 samples


def test_two_batch_estimator_by_hand():
    # E|G_B|^2 = |G|^2 + tr(Sigma)/B: 30 at B = 1, 26 at B = 5 for the toy's 25 and 5
    result = two_batch_noise_scale(30.0, 26.0, 1, 5)
    assert result["grad_sq"] == pytest.approx(TOY_GRAD_SQ)
    assert result["trace_sigma"] == pytest.approx(TOY_TRACE_SIGMA)
    assert result["b_simple"] == pytest.approx(TOY_B_SIMPLE)
    with pytest.raises(ValueError, match="b_small < b_big"):
        two_batch_noise_scale(30.0, 26.0, 5, 5)


def test_layer_norms_cover_the_adapted_layers_only():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    net(torch.randn(8, 4)).sum().backward()
    rows = layer_norms(net, grad_scale=2.0)
    assert [r["layer"] for r in rows] == ["0.weight", "2.weight"]  # no biases, no batch norm
    assert rows[0]["w_norm"] == pytest.approx(float(net[0].weight.detach().norm()))
    assert rows[0]["g_norm"] == pytest.approx(float(net[0].weight.grad.norm()) / 2.0)


def test_trust_coefficient_sets_the_lars_step():
    torch.manual_seed(0)
    net = nn.Linear(3, 2, bias=False)
    cfg = TrainConfig(optimizer="lars", lr=2.0, momentum=0.9, weight_decay=0.0, trust_coefficient=0.01)
    optimizer = build_optimizer(net, cfg, global_batch=cfg.base_batch)
    w0 = net.weight.detach().clone()
    net(torch.randn(5, 3)).pow(2).sum().backward()
    g = net.weight.grad.detach().clone()
    optimizer.step()
    expected = w0 - 2.0 * 0.01 * w0.norm() / g.norm() * g  # first step: the momentum buffer is the update
    assert torch.allclose(net.weight.detach(), expected, atol=1e-6)


def test_warmup_start_factor_is_the_first_lr():
    net = nn.Linear(2, 2)
    cfg = TrainConfig(lr=0.1, lr_scaling="linear", base_batch=64, warmup_epochs=1, warmup_start_factor=0.5)
    optimizer = build_optimizer(net, cfg, global_batch=256)  # scaled lr 0.4
    scheduler = build_scheduler(optimizer, cfg, steps_per_epoch=10, total_steps=20)
    lrs = []
    for _ in range(12):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.2)  # 0.4 * 0.5
    assert lrs[5] == pytest.approx(0.4 * (0.5 + 0.5 * 5 / 10))
    assert lrs[10] == pytest.approx(0.4)
    default = build_scheduler(build_optimizer(net, cfg.replace(warmup_start_factor=None), 256), cfg.replace(
        warmup_start_factor=None), steps_per_epoch=10, total_steps=20)
    assert default.get_last_lr()[0] == pytest.approx(0.1)  # Goyal et al.: from the base lr


def test_label_smoothing_is_the_textbook_loss():
    logits, target = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([0])
    eps, k = 0.1, 3
    log_p = torch.log_softmax(logits, 1)[0]
    expected = -((1 - eps) * log_p[0] + eps / k * log_p.sum())
    assert float(classification_loss(logits, target, label_smoothing=eps)) == pytest.approx(float(expected))


def test_bad_values_are_named():
    for bad, name in [({"warmup_start_factor": 0.0}, "warmup_start_factor"), ({"trust_coefficient": 0.0},
                      "trust_coefficient"), ({"label_smoothing": 1.0}, "label_smoothing"),
                      ({"trust_ratio_every": -1}, "trust_ratio_every")]:
        with pytest.raises(ValueError, match=name):
            validate(TrainConfig(**bad))


def test_mlp_bn_has_batch_norm_that_ghost_bn_replaces():
    cfg = TrainConfig(model="mlp_bn", ghost_batch_size=8)
    model = build_model(cfg, 4, (3, 4, 4))
    assert sum(isinstance(m, GhostBatchNorm1d) for m in model.modules()) == 2
    assert model(torch.randn(16, 3, 4, 4)).shape == (16, 4)


def test_a_run_records_b_simple_and_trust_ratios(tmp_path):
    cfg = TrainConfig(model="mlp_bn", dataset="generated", num_samples=200, num_classes=4, image_size=4,
                      batch_size=16, steps=6, log_every=3, grad_noise_batches=4, trust_ratio_every=3,
                      optimizer="lars", lr=1.0, label_smoothing=0.1, progress="off", device="cpu",
                      out=str(tmp_path))
    assert train(cfg)["status"] == "completed"
    records = steps(read_metrics(tmp_path))
    assert len(records) == 2
    for record in records:
        assert record["b_simple"] > 0 and math.isfinite(record["b_simple"])
        assert [r["layer"] for r in record["trust_ratios"]] == ["1.0.weight", "2.0.weight", "3.weight"]
