import copy

import pytest
import torch
from torch import nn

from coursekit.train.config import MODELS, TrainConfig
from coursekit.train.models import (
    ActivationCheckpoint,
    GhostBatchNorm1d,
    GhostBatchNorm2d,
    apply_activation_checkpointing,
    build_model,
    convert_to_ghost_batchnorm,
    count_checkpointed_blocks,
    num_parameters,
)

BATCH = 4
TINY_IMAGE = (3, 16, 16)
TINY_CLOUD = (32, 3)
CLASSES = 5


def tiny_input(model_name: str) -> tuple[tuple[int, ...], int]:
    if model_name == "pointnet":
        return TINY_CLOUD, CLASSES
    return TINY_IMAGE, CLASSES


@pytest.mark.parametrize("name", [m for m in MODELS if m != "gpt"])  # gpt: token input, test_parallel_models.py
def test_every_model_runs_forward_and_backward_on_cpu(name):
    torch.manual_seed(0)
    shape, classes = tiny_input(name)
    model = build_model(TrainConfig(model=name), classes, shape)
    out = model(torch.randn(BATCH, *shape))
    assert out.shape == (BATCH, classes)
    out.logsumexp(dim=1).mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"


def test_linear_on_the_line_is_one_neuron():
    model = build_model(TrainConfig(model="linear"), 1, (1,))
    assert isinstance(model, nn.Linear)
    assert dict(model.named_parameters()).keys() == {"weight", "bias"}
    assert model(torch.ones(3, 1)).shape == (3, 1)


def test_resnet_keeps_torchvision_stem_for_large_images_and_cifar_stem_for_small():
    large = build_model(TrainConfig(model="resnet18"), 10, (3, 64, 64))
    assert large.conv1.kernel_size == (7, 7) and isinstance(large.maxpool, nn.MaxPool2d)
    small = build_model(TrainConfig(model="resnet18"), 10, (3, 32, 32))
    assert small.conv1.kernel_size == (3, 3) and small.conv1.stride == (1, 1)
    assert isinstance(small.maxpool, nn.Identity)
    grey = build_model(TrainConfig(model="wide_resnet"), 10, (1, 28, 28))
    assert grey(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_wide_resnet_is_wrn_16_4():
    model = build_model(TrainConfig(model="wide_resnet"), 10, (3, 32, 32))
    assert 2_700_000 < num_parameters(model) < 2_800_000  # WRN-16-4 on CIFAR-10: 2.75 M in the paper


@pytest.mark.parametrize("name, shape", [("resnet18", (1,)), ("wide_resnet", TINY_CLOUD), ("pointnet", TINY_IMAGE)])
def test_model_and_input_shape_mismatch_is_a_clear_error(name, shape):
    with pytest.raises(ValueError, match=name):
        build_model(TrainConfig(model=name), CLASSES, shape)


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="vgg"):
        build_model(TrainConfig(model="vgg"), CLASSES, TINY_IMAGE)


@pytest.mark.parametrize("name", ["mlp", "resnet18", "wide_resnet", "pointnet"])
def test_activation_checkpointing_gives_the_same_gradients(name):
    torch.manual_seed(0)
    shape, classes = tiny_input(name)
    plain = build_model(TrainConfig(model=name), classes, shape)
    plain.eval() if name == "pointnet" else plain.train()  # pointnet's dropout would differ between runs
    wrapped = apply_activation_checkpointing(copy.deepcopy(plain))
    assert count_checkpointed_blocks(wrapped) >= 2
    assert wrapped.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(BATCH, *shape)
    grads = []
    for model in (plain, wrapped):
        model.zero_grad()
        with torch.enable_grad():
            model(x).square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for g_plain, g_wrapped in zip(*grads, strict=True):
        torch.testing.assert_close(g_plain, g_wrapped)


def test_activation_checkpointing_is_idempotent_and_loads_plain_state_dicts():
    cfg = TrainConfig(model="resnet18", activation_checkpointing=True)
    model = build_model(cfg, CLASSES, TINY_IMAGE)
    count = count_checkpointed_blocks(model)
    assert count == 8  # resnet18: 4 stages x 2 basic blocks
    apply_activation_checkpointing(model)
    assert count_checkpointed_blocks(model) == count
    assert not any(isinstance(m.block, ActivationCheckpoint) for m in model.modules() if isinstance(m, ActivationCheckpoint))
    plain = build_model(TrainConfig(model="resnet18"), CLASSES, TINY_IMAGE)
    model.load_state_dict(plain.state_dict())
    torch.testing.assert_close(model.layer1[0].block.conv1.weight, plain.layer1[0].conv1.weight)


def test_ghost_batchnorm_normalises_virtual_batches_in_training():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(3)
    x = torch.randn(8, 3, 4, 4) + torch.arange(8.0).view(8, 1, 1, 1)  # sub-batches with different means
    ghost = convert_to_ghost_batchnorm(nn.Sequential(copy.deepcopy(bn)), virtual_batch=4)[0]
    assert isinstance(ghost, GhostBatchNorm2d)
    expected = torch.cat([nn.functional.batch_norm(part, None, None, training=True, eps=bn.eps)
                          for part in x.split(4)])
    torch.testing.assert_close(ghost(x), expected)
    assert not torch.allclose(bn(x), expected)  # ordinary batch norm uses all 8 samples
    assert ghost.running_mean.abs().sum() > 0  # running statistics are still tracked
    ghost.eval()
    reference = copy.deepcopy(bn).eval()
    reference.load_state_dict(ghost.state_dict())
    torch.testing.assert_close(ghost(x), reference(x))


def test_ghost_batchnorm_chunks_are_never_smaller_than_the_virtual_batch():
    ghost = GhostBatchNorm1d(2, virtual_batch=4)
    x = torch.randn(9, 2)  # two chunks of 5 and 4, not 4 + 4 + 1
    expected = torch.cat([nn.functional.batch_norm(part, None, None, training=True, eps=ghost.eps)
                          for part in x.tensor_split(2)])
    torch.testing.assert_close(ghost(x), expected)


def test_build_model_applies_ghost_batchnorm_and_checkpointing_from_the_config():
    cfg = TrainConfig(model="wide_resnet", ghost_batch_size=2, activation_checkpointing=True)
    model = build_model(cfg, CLASSES, TINY_IMAGE)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(isinstance(m, GhostBatchNorm2d) and m.virtual_batch == 2 for m in norms)
    assert count_checkpointed_blocks(model) == 6  # WRN-16: 3 groups x 2 blocks
    model(torch.randn(BATCH, *TINY_IMAGE)).sum().backward()
    with pytest.raises(ValueError, match="ghost_batch_size"):
        convert_to_ghost_batchnorm(model, 1)
