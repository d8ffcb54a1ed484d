"""Lab 07: the plan follows the design, its settings are one typed declaration, bad input is named."""

import dataclasses

import pytest

from coursekit.labs import lab07_large_batch as lb
from coursekit.labs.lab07_large_batch.test_lab07 import S, gpu_settings
from coursekit.train.config import TrainConfig


def test_scaled_lr_is_a_function_of_numbers_and_names_a_bad_one():
    assert lb.scaled_lr(0.1, 256, 8192, "linear") == pytest.approx(3.2)
    assert lb.scaled_lr(0.1, 256, 1024, "sqrt") == pytest.approx(0.2)
    assert lb.scaled_lr(0.1, 256, 4096, "none") == 0.1
    for kwargs, name in (({"rule": "cubic"}, "rule"), ({"base_lr": 0}, "base_lr"), ({"batch": 0}, "batch")):
        with pytest.raises(ValueError, match=name):
            lb.scaled_lr(**{"base_lr": 0.1, "base_batch": 256, "batch": 512, "rule": "linear", **kwargs})
    assert lb.steps_per_epoch(60_000, 4096) == 14
    with pytest.raises(ValueError, match="batch"):
        lb.steps_per_epoch(100, 256)


def test_the_gpu_plan_is_the_measured_design():
    s = gpu_settings()
    runs = lb.plan(s)
    a = [r for r in runs if r.tags["part"] == "A"]
    # 6 scaling arms and ghost BN for 3 seeds; SGD's two outer grid points, LARS's and LAMB's grids, equal steps: 1 seed
    assert len(a) == 7 * 3 + 9 and {r.config.schedule for r in a} == {"linear"}
    seed0 = {r.tags["arm"]: r.config for r in a if r.tags["seed"] == 0}
    assert seed0["reference B=256"].lr == 0.1 and seed0["reference B=256"].warmup_steps == 0
    assert seed0["linear 4x + warm-up B=1024"].lr == pytest.approx(0.4)
    assert seed0["linear 4x + warm-up B=1024"].warmup_steps == 116
    assert seed0["sqrt 4x + warm-up B=4096"].lr == pytest.approx(0.4)
    assert seed0["linear 16x + warm-up B=4096"].lr == pytest.approx(1.6)
    assert seed0["linear 16x + warm-up B=4096"].warmup_steps == 28
    assert all(c.model == "airbench" and c.device_data and c.epochs == 10 for c in seed0.values())
    assert all(c.nesterov for c in seed0.values() if c.optimizer == "sgd")
    assert {r.tags["arm"] for r in a if r.tags["seed"] == 1} == set(lb.arm_names(s, lb.SCALING, lb.GHOST))
    # the same grid shape for every optimizer: centre x {1/2, 1, 2}, the same warm-up and schedule
    for optimizer, centre in (("sgd", 0.4), ("lars", 10.0), ("lamb", 0.05)):
        grid = [seed0[name] for name in s.optimizer_grid[optimizer]]
        assert [c.lr for c in grid] == pytest.approx([centre / 2, centre, centre * 2])
        assert {(c.optimizer, c.warmup_steps, c.batch_size) for c in grid} == {(optimizer, 28, 4096)}
        assert all(c.nesterov == (optimizer == "sgd") for c in grid)  # the engine refuses Nesterov for LARS/LAMB
    ghost = seed0[s.claim_arms["large_ghost"]]
    assert ghost.ghost_batch_size == 256 and ghost.lr == pytest.approx(0.4) and ghost.warmup_steps == 28
    equal = seed0[s.claim_arms["large_equal_steps"]]
    assert equal.steps == 2340 and equal.warmup_steps == 468 and equal.lr == pytest.approx(1.6)
    assert equal.val_every_epochs >= equal.steps / 14  # one validation, after the last step
    b = [r.config for r in runs if r.tags["part"] == "B"]
    assert len(b) == 4 * 3 and all(c.log_every == 1 and c.batch_size == 4096 for c in b)
    assert sorted({(c.lr, c.warmup_steps) for c in b}) == [(6.4, 0), (6.4, 28), (12.8, 0), (12.8, 28)]
    c = [r.config for r in runs if r.tags["part"] == "C"]
    assert sorted({x.batch_size for x in c}) == [64, 128, 256, 512, 1024, 2048, 4096] and len(c) == 21
    assert all(x.holdout_samples == 10_000 and x.target_acc == 0.9 and x.schedule == "constant" for x in c)
    assert sorted(x.lr for x in c if x.batch_size == 1024) == pytest.approx([0.1, 0.2, 0.4])
    assert {x.epochs for x in c if x.batch_size == 64} == {2} and {x.epochs for x in c if x.batch_size == 4096} == {16}
    (d,) = [r.config for r in runs if r.tags["part"] == "D"]
    assert d.batch_size == 256 and d.accumulation_steps == 4 and d.noise_every >= 1 and d.target_acc is None


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_the_engine_accepts_every_planned_run(profile):
    from coursekit.train.checks import static_problems

    problems = {r.tags["arm"]: static_problems(r.config) for r in lb.plan(S(lb.settings(profile)))}
    assert not any(problems.values()), {arm: found for arm, found in problems.items() if found}


def test_submit_names_bad_input():
    with pytest.raises(ValueError, match="jobs"):
        lb.submit(lb.plan(gpu_settings()), name="x", jobs=0)
    with pytest.raises(ValueError, match="runs"):
        lb.submit([], name="x")


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_the_settings_are_one_frozen_dataclass_and_its_dict_keeps_their_order(profile):
    typed = lb.typed_settings(profile)
    assert isinstance(typed, lb.LargeBatchSettings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.base_batch = 1
    names = [f.name for f in dataclasses.fields(typed)]
    values = lb.settings(profile)
    assert list(values) == [n for n in names if n != "budget" or profile == "gpu"]  # cpu: no budget to show
    assert all(values[n] == getattr(typed, n) for n in values)
    assert all(isinstance(arm, lb.Arm) for arm in typed.arms) and isinstance(typed.base, TrainConfig)
