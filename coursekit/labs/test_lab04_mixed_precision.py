"""Lab 04 demonstrations: exact facts about fp16, the scaler and memory layouts."""

import pytest
import torch

from coursekit.labs import lab04_mixed_precision as numerics


def test_formats_table():
    table = numerics.formats_table()
    fp16 = table.one(format="fp16")
    assert fp16["max"] == 65504 and fp16["smallest_subnormal"] == 2.0**-24 and fp16["bits"] == 16
    assert table.one(format="bf16")["exponent_bits"] == table.one(format="fp32")["exponent_bits"] == 8
    assert table.one(format="tf32")["bits"] == 19


def test_underflow_and_its_rescue():
    table = numerics.underflow_table()
    assert table.one(value=2.0**-24)["as_fp16"] == 2.0**-24
    halfway = table.one(value=2.0**-25)
    assert halfway["as_fp16"] == 0.0 and halfway["lost_without_scaling"]
    assert halfway["unscaled_fp32"] == 2.0**-25 and halfway["recovered_with_scaling"]


def test_grad_scaler_skips_until_the_scaled_gradient_fits():
    table = numerics.grad_scaler_demo(gradient=1000.0, steps=12)
    skipped = table.column("skipped")
    assert skipped == [True] * 10 + [False] * 2  # 65536 * 1000 needs ten halvings to fit under 65504
    assert table[-1]["scale"] == 64.0


def test_channels_last_strides():
    table = numerics.strides_table((2, 3, 4, 5))
    assert table[0]["strides"] == (60, 20, 5, 1)
    assert table[1]["strides"] == (60, 1, 15, 3)


def test_matmul_tflops_runs_anywhere():
    rows = numerics.matmul_tflops([16, 15], precision="fp32", device="cpu")
    assert [r["multiple_of_8"] for r in rows] == [True, False]
    assert all(r["tflops"] > 0 for r in rows)


def test_training_flop_per_image_of_a_linear_layer():
    model = torch.nn.Linear(10, 4)
    # forward 2*10*4 multiply-adds, backward only the weight gradient (the input needs none): as much again
    assert numerics.training_flop_per_image(model, (10,), 4) == pytest.approx(2 * 2 * 10 * 4)
