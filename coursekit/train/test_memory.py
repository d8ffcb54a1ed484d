import pytest
import torch
from torch import nn

from coursekit.train.config import TrainConfig
from coursekit.train.memory import estimate_memory, sharded_memory, sharding_table, smallest_n_that_fits
from coursekit.train.models import apply_activation_checkpointing, build_model

# Linear(10, 20) + ReLU + Linear(20, 5): 10*20 + 20 + 20*5 + 5 = 325 parameters
PARAMS = 325


def small_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))


def test_hipergator_convention_is_24_bytes_per_parameter_for_adam():
    est = estimate_memory(small_mlp(), "adamw", "fp32", batch_size=8, input_shape=(10,), convention="hipergator")
    assert est.num_parameters == PARAMS
    assert est.parameters_bytes == 4 * PARAMS and est.gradients_bytes == 4 * PARAMS
    assert est.optimizer_state_bytes == 8 * PARAMS and est.master_copy_bytes == 8 * PARAMS
    assert est.bytes_per_parameter == 24
    sgd = estimate_memory(small_mlp(), "sgd", "bf16", batch_size=8, input_shape=(10,), convention="hipergator")
    assert sgd.optimizer_state_bytes == 4 * PARAMS and sgd.bytes_per_parameter == 20


def test_the_default_convention_counts_what_torch_allocates():
    """fp32 training keeps no master copies: the default must not quote the 24 B rule of thumb for it."""
    assert estimate_memory(small_mlp(), "adamw", "fp32", 8, (10,)).bytes_per_parameter == 16


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
    # the backward's temporary: one gradient of the widest saved tensor (20 floats) per sample
    assert est.transient_bytes == 64 * 80 and est.input_bytes == 0 and est.workspace_bytes == 0
    assert est.total_bytes == sum(est.as_dict()[k] for k in (
        "parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "master_copy_bytes", "buffers_bytes",
        "activations_bytes", "transient_bytes"))
    # bf16: the fp32 input batch on the device is not what the forward saves (a bf16 copy), so it counts
    assert half.input_bytes == 64 * 40


def test_optimizer_step_sets_the_peak_when_activations_are_small():
    est = estimate_memory(small_mlp(), "adamw", "fp32", 1, (10,), convention="pytorch")
    assert est.optimizer_temporary_bytes == 8 * PARAMS
    assert est.total_bytes == est.static_bytes + est.optimizer_temporary_bytes


# The calculator against the GPU (max_memory_allocated, MiB): ResNet-50 fp32, SGD + momentum, 224 px, the
# engine's --gpu-resident pool of two batches, cudnn.benchmark on. Batch 32-256: lab 03 on an H200 (issue 12);
# 512: bench/memory_sweep_gpu.py on an H100. bf16 + channels_last (GiB): bench/ladder_gpu.py batch sweep, H100.
MEASURED_FP32_MIB = {32: 7515, 64: 10441, 128: 16276, 256: 27956, 512: 51302}
MEASURED_BF16_GIB = {64: 3.0, 256: 11.2, 1024: 43.6}
MEASURED_NO_AUTOTUNE_GIB = 21.48  # batch 256, one input batch, algorithms already chosen (bare loop, ladder)


@pytest.fixture(scope="module")
def resnet50():
    return build_model(TrainConfig(model="resnet50", image_size=224), 1000, (3, 224, 224))


def test_calculator_matches_measured_gpu_peaks(resnet50):
    shape = (3, 224, 224)
    # one probe (a ResNet-50 forward on the CPU) per precision; the other batches by at_batch, checked once
    fp32 = estimate_memory(resnet50, "sgd", "fp32", 64, shape, convention="pytorch", input_batches=2,
                           cudnn_benchmark=True)
    for batch, measured in MEASURED_FP32_MIB.items():
        est = fp32.at_batch(batch)
        assert est.total_bytes / 2**20 == pytest.approx(measured, rel=0.03), batch
        # without the autotuning workspace the estimate is 10-60 % low: the named term matters
        assert est.total_bytes - est.workspace_bytes < 0.9 * measured * 2**20
    bf16 = estimate_memory(resnet50, "sgd", "bf16", 256, shape, convention="pytorch", input_batches=2,
                           cudnn_benchmark=True)
    for batch, measured in MEASURED_BF16_GIB.items():
        est = bf16.at_batch(batch)
        assert est.workspace_bytes == 0 and est.total_bytes / 2**30 == pytest.approx(measured, rel=0.05), batch
    assert bf16.at_batch(256).total_bytes == pytest.approx(bf16.total_bytes, rel=1e-6)
    bare = estimate_memory(resnet50, "sgd", "fp32", 256, shape, convention="pytorch")
    assert bare.total_bytes / 2**30 == pytest.approx(MEASURED_NO_AUTOTUNE_GIB, rel=0.03)
    assert bare.fixed_bytes + 256 * bare.per_sample_bytes == pytest.approx(bare.total_bytes)


def test_at_batch_equals_a_new_probe_at_that_batch():
    model = build_model(TrainConfig(model="resnet18"), 10, (3, 16, 16))
    options = {"convention": "pytorch", "input_batches": 2, "cudnn_benchmark": True}
    for precision in ("fp32", "bf16"):
        small = estimate_memory(model, "sgd", precision, 8, (3, 16, 16), **options)
        large = estimate_memory(model, "sgd", precision, 96, (3, 16, 16), **options)
        assert small.at_batch(96).total_bytes == pytest.approx(large.total_bytes, rel=1e-4), precision
        assert small.at_batch(96).workspace_bytes == pytest.approx(large.workspace_bytes, rel=1e-4), precision


def test_tf32_gets_the_autotuning_workspace_of_fp32():
    """TF32 is a math mode on fp32 tensors: the autotuner tries the same algorithms (lab 04: the same peak)."""
    model = build_model(TrainConfig(model="resnet18"), 10, (3, 16, 16))
    fp32, tf32 = (estimate_memory(model, "sgd", p, 8, (3, 16, 16), cudnn_benchmark=True) for p in ("fp32", "tf32"))
    assert tf32.workspace_bytes == fp32.workspace_bytes > 0 and tf32.total_bytes == fp32.total_bytes


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


# --- sharding (the Ultra-Scale Playbook's formulas) ----------------------------------------------------

def test_playbook_figures_for_mixed_precision_adam():
    # the playbook: Ψ = 7.5B, N = 64 -> DP 120 GB, ZeRO-1 31.4, ZeRO-2 16.6, ZeRO-3 1.9
    psi, n = 7_500_000_000, 64
    got = {s: sharded_memory(psi, s, n, "adamw", "bf16").total_bytes / 1e9 for s in ("ddp", "zero1", "zero2", "zero3")}
    assert got["ddp"] == pytest.approx(120.0)
    assert got["zero1"] == pytest.approx(31.4, abs=0.05)
    assert got["zero2"] == pytest.approx(16.6, abs=0.05)
    assert got["zero3"] == pytest.approx(1.875)


@pytest.mark.parametrize("strategy, per_param", [
    ("ddp", 4 + 4 + 8), ("zero1", 4 + 4 + 8 / 4), ("zero2", 4 + (4 + 8) / 4), ("zero3", 16 / 4), ("tp", 16 / 4),
    ("pp", 16 / 4),
])
def test_fp32_adam_equivalents(strategy, per_param):
    m = sharded_memory(1000, strategy, 4, "adamw", "fp32")
    assert m.bytes_per_parameter == pytest.approx(per_param)


def test_sgd_state_and_one_gpu_is_ddp():
    assert sharded_memory(10, "zero3", 1, "sgd", "fp32").total_bytes == 12 * 10
    assert sharded_memory(10, "ddp", 1, "sgd", "fp32", momentum=0).total_bytes == 8 * 10
    assert sharded_memory(10, "ddp", 1, "sgd", "bf16").bytes_per_parameter == 2 + 2 + 4 + 4


def test_seven_billion_with_adamw_needs_more_than_one_gpu():
    rows = {r["strategy"]: r for r in sharding_table(7_000_000_000, 8)}
    assert rows["ddp"]["total_gb"] == pytest.approx(112.0)
    assert rows["zero3"]["total_gb"] == pytest.approx(14.0)
    assert smallest_n_that_fits(7_000_000_000, "ddp", 80e9) is None
    assert smallest_n_that_fits(7_000_000_000, "zero3", 80e9) == 2


@pytest.mark.parametrize("kwargs, word", [({"strategy": "zero4"}, "strategy"), ({"n": 0}, "n="),
                                          ({"optimizer": "adam"}, "optimizer")])
def test_sharding_bad_input_names_the_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        sharded_memory(10, **{"strategy": "ddp", **kwargs})


@pytest.mark.parametrize("table_name, engine_name", [("DP", "ddp"), ("ZeRO-1", "zero1"), ("zero-2", "zero2"),
                                                     ("ZeRO-3", "zero3"), ("ZeRO-3 / FSDP", "zero3"),
                                                     ("FSDP", "zero3"), ("ZeRO_3", "zero3")])
def test_smallest_n_takes_the_tables_strategy_names(table_name, engine_name):
    answers = {name: smallest_n_that_fits(70_000_000_000, name, 80e9, headroom=0.2) for name in (table_name, engine_name)}
    assert answers[table_name] == answers[engine_name]
    assert smallest_n_that_fits(70_000_000_000, "ZeRO-3", 80e9, headroom=0.2) == 32  # 1.12 TB / 64 GB = 17.5
    assert smallest_n_that_fits(70e9, "ZeRO-3", 80e9, headroom=0.2) == 32  # as a participant types 70 billion


@pytest.mark.parametrize("kwargs, word", [({"strategy": "ZeRO-4"}, "strategy="), ({"strategy": 3}, "strategy="),
                                          ({"gpu_bytes": 0}, "gpu_bytes="), ({"headroom": 1.5}, "headroom="),
                                          ({"num_parameters": 0}, "num_parameters="), ({"num_parameters": 7.5e9 + 0.5}, "num_parameters="),
                                          ({"max_n": 0}, "max_n=")])
def test_smallest_n_bad_input_names_the_parameter(kwargs, word):
    args = {"num_parameters": 7_000_000_000, "strategy": "zero3", "gpu_bytes": 80e9, **kwargs}
    with pytest.raises(ValueError, match=word):
        smallest_n_that_fits(**args)
