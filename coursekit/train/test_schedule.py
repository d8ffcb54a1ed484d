import math

import pytest
import torch

from coursekit.train.config import TrainConfig
from coursekit.train.optim import build_optimizer
from coursekit.train.schedule import build_scheduler, lr_factor, onecycle_factor

STEPS_PER_EPOCH = 10


def lrs(cfg, total_steps, global_batch=256, **kwargs):
    """The LR used at each optimiser step 0 .. total_steps - 1."""
    model = torch.nn.Linear(2, 1)
    optimizer = build_optimizer(model, cfg, global_batch)
    scheduler = build_scheduler(optimizer, cfg, STEPS_PER_EPOCH, total_steps, **kwargs)
    seen = []
    for _ in range(total_steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_warmup_from_the_unscaled_lr_to_the_linearly_scaled_lr():
    # 4 GPUs x base batch 256: lr 0.1 -> 0.4, warmup 1 epoch from 0.1 (= 1/num_gpus of 0.4, as in DLI)
    cfg = TrainConfig(lr=0.1, lr_scaling="linear", base_batch=256, warmup_epochs=1)
    seen = lrs(cfg, 30, global_batch=1024)
    expected_warmup = [0.1 + (0.4 - 0.1) * s / 10 for s in range(10)]
    assert seen[:10] == pytest.approx(expected_warmup)
    assert seen[10:] == pytest.approx([0.4] * 20)


def test_warmup_without_scaling_ramps_from_one_over_warmup_steps():
    cfg = TrainConfig(lr=0.2, warmup_epochs=0.5)  # 5 warmup steps
    seen = lrs(cfg, 8)
    start = 1 / 5
    assert seen == pytest.approx([0.2 * (start + (1 - start) * s / 5) for s in range(5)] + [0.2] * 3)
    assert lrs(cfg, 4, warmup_start_factor=0.0)[:2] == pytest.approx([0.0, 0.2 / 5])


def test_step_schedule_decays_every_n_epochs_counted_from_zero():
    cfg = TrainConfig(lr=1.0, schedule="step", step_every_epochs=2, step_gamma=0.5, warmup_epochs=1)
    seen = lrs(cfg, 60)
    assert seen[15] == pytest.approx(1.0)  # epoch 1.5
    assert seen[20] == pytest.approx(0.5) and seen[39] == pytest.approx(0.5)  # epochs 2 .. 3.9
    assert seen[40] == pytest.approx(0.25)


def test_cosine_after_warmup():
    cfg = TrainConfig(lr=1.0, schedule="cosine", warmup_epochs=1)
    seen = lrs(cfg, 50)
    assert seen[10] == pytest.approx(1.0)
    assert seen[30] == pytest.approx(0.5 * (1 + math.cos(math.pi * 20 / 40)))
    assert seen[49] == pytest.approx(0.5 * (1 + math.cos(math.pi * 39 / 40)))


def test_onecycle_matches_torch_onecyclelr():
    total = 37
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    reference = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=total, cycle_momentum=False)
    expected = []
    for _ in range(total):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    assert [onecycle_factor(s, total) for s in range(total)] == pytest.approx(expected)
    assert lrs(TrainConfig(lr=1.0, schedule="onecycle"), total) == pytest.approx(expected)


def test_bad_schedules_are_clear_errors():
    with pytest.raises(ValueError, match="linear-decay"):
        lr_factor(3, schedule="linear-decay", steps_per_epoch=10, total_steps=100)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="warmup_epochs"):
        build_scheduler(optimizer, TrainConfig(warmup_epochs=-1), 10, 100)
