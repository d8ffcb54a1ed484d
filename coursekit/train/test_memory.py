import pytest
import torch
from torch import nn

from coursekit.train.config import TrainConfig
from coursekit.train.memory import estimate_memory
from coursekit.train.models import apply_activation_checkpointing, build_model

# Linear(10, 20) + ReLU + Linear(20, 5): 10*20 + 20 + 20*5 + 5 = 325 parameters
PARAMS = 325


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))


def test_hipergator_convention_is_24_bytes_per_parameter_for_adam():
    est = estimate_memory(small_mlp(), "adamw", "fp32", batch_size=8, input_shape=(10,))
    assert est.num_parameters == PARAMS
    assert est.parameters_bytes == 4 * PARAMS and est.gradients_bytes == 4 * PARAMS
    assert est.optimizer_state_bytes == 8 * PARAMS and est.master_copy_bytes == 8 * PARAMS
    assert est.bytes_per_parameter == 24
    sgd = estimate_memory(small_mlp(), "sgd", "bf16", batch_size=8, input_shape=(10,))
    assert sgd.optimizer_state_bytes == 4 * PARAMS and sgd.bytes_per_parameter == 20


@pytest.mark.parametrize("optimizer, precision, per_param", [
    ("sgd", "fp32", 4 + 4 + 4), ("lars", "tf32", 4 + 4 + 4), ("adamw", "fp32", 4 + 4 + 8),
    ("lamb", "bf16", 4 + 4 + 8 + 2), ("adamw", "fp16", 4 + 4 + 8 + 2),
])
def test_pytorch_convention_counts_what_torch_amp_allocates(optimizer, precision, per_param):
    est = estimate_memory(small_mlp(), optimizer, precision, 8, (10,), convention="pytorch")
    assert est.bytes_per_parameter == per_param


def test_activations_are_the_tensors_saved_for_backward_times_the_batch():
    # per sample: the input of the first Linear (10 floats) and the ReLU output that the ReLU and the
    # second Linear both save (20 floats, counted once): 30 floats = 120 bytes
    est = estimate_memory(small_mlp(), "sgd", "fp32", batch_size=64, input_shape=(10,))
    assert est.activations_bytes == 64 * 120
    half = estimate_memory(small_mlp(), "sgd", "bf16", batch_size=64, input_shape=(10,))
    assert half.activations_bytes == 64 * 60
    assert est.total_bytes == sum(est.as_dict()[k] for k in (
        "parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "master_copy_bytes", "buffers_bytes",
        "activations_bytes"))


def test_sgd_without_momentum_has_no_state_and_frozen_parameters_no_gradient():
    model = small_mlp()
    model[0].requires_grad_(False)  # 220 frozen parameters
    est = estimate_memory(model, "sgd", "fp32", 1, (10,), momentum=0.0, convention="pytorch")
    assert est.optimizer_state_bytes == 0 and est.gradients_bytes == 4 * (PARAMS - 220)


def test_checkpointing_shrinks_the_activation_estimate_and_the_model_is_untouched():
    cfg = TrainConfig(model="resnet18")
    model = build_model(cfg, 10, (3, 16, 16))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain = estimate_memory(model, "sgd", "fp32", 32, (3, 16, 16))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BN statistics unchanged
    assert plain.buffers_bytes > 0
    saved = estimate_memory(apply_activation_checkpointing(model), "sgd", "fp32", 32, (3, 16, 16))
    assert saved.activations_bytes < 0.7 * plain.activations_bytes
    text = str(plain)
    assert "activations (batch 32)" in text and "total" in text and "MiB" in text


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="optimizer"):
        estimate_memory(small_mlp(), "adagrad", "fp32", 8, (10,))
    with pytest.raises(ValueError, match="convention"):
        estimate_memory(small_mlp(), "sgd", "fp32", 8, (10,), convention="deepspeed")
