import pytest
import torch
from torch import nn

from coursekit.train.config import OPTIMIZERS, TrainConfig
from coursekit.train.optim import LAMB, LARS, build_optimizer, parameter_groups, scaled_lr


def small_net() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))


def test_bias_and_norm_parameters_get_no_decay_and_no_trust_ratio():
    net = small_net()
    groups = {g["name"]: g for g in parameter_groups(net, weight_decay=0.05)}
    ids = lambda params: {id(p) for p in params}  # noqa: E731
    assert ids(groups["decay"]["params"]) == ids([net[0].weight, net[4].weight])
    assert ids(groups["no_decay"]["params"]) == ids([net[0].bias, net[1].weight, net[1].bias, net[4].bias])
    assert groups["decay"]["weight_decay"] == 0.05 and groups["decay"]["layer_adaptation"]
    assert groups["no_decay"]["weight_decay"] == 0.0 and not groups["no_decay"]["layer_adaptation"]


@pytest.mark.parametrize("scaling, expected", [("none", 0.1), ("linear", 0.4), ("sqrt", 0.2)])
def test_lr_scaling_from_the_base_batch(scaling, expected):
    cfg = TrainConfig(lr=0.1, lr_scaling=scaling, base_batch=256)
    assert scaled_lr(cfg, 1024) == pytest.approx(expected)  # k = 1024 / 256 = 4
    assert scaled_lr(cfg.replace(lr_scaling="linear"), 64) == pytest.approx(0.025)


@pytest.mark.parametrize("name, cls", [("sgd", torch.optim.SGD), ("adamw", torch.optim.AdamW), ("lars", LARS),
                                       ("lamb", LAMB)])
def test_each_optimizer_has_the_config_and_trains(name, cls):
    assert name in OPTIMIZERS
    lr = {"sgd": 0.05, "adamw": 0.01, "lars": 1.0, "lamb": 0.01}[name]
    cfg = TrainConfig(optimizer=name, lr=lr, lr_scaling="linear", base_batch=32, momentum=0.8, weight_decay=1e-4)
    torch.manual_seed(0)
    net = small_net()
    optimizer = build_optimizer(net, cfg, global_batch=64)
    assert isinstance(optimizer, cls)
    assert all(g["lr"] == pytest.approx(2 * lr) for g in optimizer.param_groups)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-4, 0.0]
    first = optimizer.param_groups[0]
    assert first.get("momentum", first.get("betas", (None,))[0]) == 0.8
    x, y = torch.randn(64, 3, 6, 6), torch.randint(0, 2, (64,))
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_unknown_optimizer_and_scaling_are_clear_errors():
    with pytest.raises(ValueError, match="rmsprop"):
        build_optimizer(small_net(), TrainConfig(optimizer="rmsprop"), 64)
    with pytest.raises(ValueError, match="lr_scaling"):
        scaled_lr(TrainConfig(lr_scaling="cubic"), 64)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_tensor_parallel_weights_beside_plain_ones_step_without_foreach(name, tmp_path):
    """Tensor parallelism leaves embeddings and norms as plain tensors beside DTensor weights: torch's
    foreach kernels (its default on CUDA) refuse the mix, so the optimizer must not use them (seen on 2xH100)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    from coursekit.train.optim import foreach_allowed

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
        model[0].weight = nn.Parameter(distribute_tensor(model[0].weight.detach(), mesh, [Replicate()]))
        model[0].bias = nn.Parameter(distribute_tensor(model[0].bias.detach(), mesh, [Replicate()]))
        cfg = TrainConfig(optimizer=name, lr=0.1)
        groups = parameter_groups(model, cfg.weight_decay)
        assert foreach_allowed(groups) is False
        forced = (torch.optim.SGD if name == "sgd" else torch.optim.AdamW)(model.parameters(), lr=0.1, foreach=True)
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        with pytest.raises(RuntimeError, match="mixed"):
            forced.step()  # what CUDA's default did
        optimizer = build_optimizer(model, cfg, global_batch=cfg.batch_size)
        before = model[1].weight.detach().clone()
        optimizer.step()
        assert not torch.equal(before, model[1].weight.detach())
    finally:
        dist.destroy_process_group()
    assert foreach_allowed([{"params": list(nn.Linear(2, 2).parameters())}]) is None
