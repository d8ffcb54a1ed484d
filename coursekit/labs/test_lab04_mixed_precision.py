"""Lab 04 demonstrations: exact facts about fp16, the scaler and memory layouts."""

import pytest
import torch

from coursekit import labs
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
    assert numerics.scaler_follows_overflows(table)


def test_the_scaler_claim_fails_on_a_scale_that_never_halves_or_a_skip_that_fits():
    table = list(numerics.grad_scaler_demo(gradient=1000.0, steps=12))
    never_halves = [{**row, "scale": 65536.0, "fits_fp16": False, "skipped": True} for row in table]
    assert not numerics.scaler_follows_overflows(never_halves)
    skips_a_fitting_step = [*table[:-1], {**table[-1], "skipped": True}]
    assert not numerics.scaler_follows_overflows(skips_a_fitting_step)
    assert not numerics.scaler_follows_overflows([])


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


def _runs(accs):
    """Planted sweep rows: {(precision, seed): val_acc}."""
    return [{"precision": p, "seed": seed, "val_acc": acc} for (p, seed), acc in accs.items()]


# one run of the gpu profile on Fashion-MNIST (cosine, 3 epochs): formats within 0.016 of fp32 of the same seed,
# while the seeds moved fp32 by 0.04 (another run: 0.011, and bf16 -0.004 and -0.030)
MEASURED = {("fp32", 0): 0.863, ("bf16", 0): 0.873, ("fp16", 0): 0.857,
            ("fp32", 1): 0.901, ("bf16", 1): 0.887, ("fp16", 1): 0.895}


def test_formats_match_holds_on_the_measured_pairs():
    holds, evidence = numerics.formats_match(_runs(MEASURED))
    assert holds is True  # bf16: +0.010 and -0.014; fp16: -0.006 on both seeds: every seed within 0.03
    assert "bf16 − fp32 per seed +0.010, -0.014" in evidence and "fp32 alone moved by 0.038" in evidence
    assert "mean -0.002 ± 0.012 (every seed within 0.03)" in evidence


FP32 = {("fp32", 0): 0.90, ("fp32", 1): 0.90}


@pytest.mark.parametrize(("bf16", "verdict"), [
    ((0.895, 0.905), True),    # -0.005 and +0.005: every seed within 0.03
    ((0.896, 0.865), None),    # -0.004 and -0.035: the mean -0.020 is within 0.03, one seed is not: undecided
    ((0.84, 0.85), False),     # -0.06 and -0.05: every seed beyond 0.03
])
def test_formats_match_decides_only_where_every_seed_agrees(bf16, verdict):
    holds, evidence = numerics.formats_match(_runs({**FP32, ("bf16", 0): bf16[0], ("bf16", 1): bf16[1]}),
                                             0.03, formats=["bf16"])
    assert holds is verdict
    assert (verdict is None) == ("undecided with 2 seeds" in evidence)


def test_formats_match_pairs_by_seed_so_the_seed_does_not_decide():
    # unpaired, bf16 of seed 0 against fp32 of seed 1 would be 0.038 apart: paired, the gaps are small
    gaps = numerics.paired_gaps(_runs(MEASURED))
    assert gaps["bf16"]["diffs"] == pytest.approx([0.010, -0.014])
    assert gaps["bf16"]["mean"] == pytest.approx(-0.002) and gaps["bf16"]["se"] == pytest.approx(0.012)
    assert numerics.paired_gaps(_runs({("fp32", 0): 0.9, ("bf16", 0): 0.88}))["bf16"]["se"] is None


@pytest.mark.parametrize("planted", [
    {("bf16", 0): 0.40, ("bf16", 1): 0.45},   # a format that breaks training (0.3-0.5 below)
    {("fp16", 0): 0.82, ("fp16", 1): 0.86},   # 0.04 below fp32 on both seeds: beyond the tolerance
    {("bf16", 0): 0.91, ("bf16", 1): 0.94},   # 0.04 above: a claim of equality fails either way
])
def test_formats_match_fails_on_planted_rows(planted):
    holds, _ = numerics.formats_match(_runs({**MEASURED, **planted}))
    assert holds is False


def test_formats_match_uses_the_pairs_that_completed():
    # one pair left for bf16: no standard error, so it cannot decide; fp16 alone still holds
    holds, evidence = numerics.formats_match(_runs({k: v for k, v in MEASURED.items() if k != ("bf16", 1)}))
    assert holds is None and "bf16 − fp32 per seed +0.010, mean +0.010 (one seed" in evidence
    assert numerics.formats_match(_runs({k: v for k, v in MEASURED.items() if k[0] != "bf16"}))[0] is True


def test_formats_match_cannot_decide_when_a_format_has_no_fp32_beside_it():
    holds, evidence = numerics.formats_match(_runs({("fp32", 0): 0.86, ("bf16", 1): 0.87}))
    assert holds is None and "bf16: no seed with an fp32 run beside it" in evidence
    assert numerics.formats_match([])[0] is False


def test_the_ladder_shows_energy_per_image_only():
    rows = [{"energy_per_image_j": 0.2, "energy_per_epoch_j": 5000.0}]
    assert labs.energy_columns(rows, per_epoch=False) == ["energy_per_image_j"]
    assert labs.energy_columns([{"energy_per_image_j": None}], per_epoch=False) == []


def test_the_transfer_question_of_the_exit_ticket():
    # a gradient of 5000 through fp16 from a scale of 2^16: 13 halvings to 8, the first scale with 5000 x S <= 65504
    table = numerics.grad_scaler_demo(gradient=5000.0, steps=20)
    assert sum(table.column("skipped")) == 13 and table[-1]["scale"] == 8.0


def test_the_scaler_events_name_the_run_whose_scaler_skipped_steps():
    steps = [{"step": 10, "loss": 2.0, "loss_scale": 65536.0, "skipped_steps": 0},
             {"step": 150, "loss": 40.0, "loss_scale": 65536.0, "skipped_steps": 0},
             {"step": 165, "loss": 30.1, "loss_scale": 8192.0, "skipped_steps": 3},
             {"step": 300, "loss": 0.5, "loss_scale": 8192.0, "skipped_steps": 3}]
    rows = [{"precision": "fp32", "seed": 1, "val_acc": 0.913, "summary": {}, "steps": []},
            {"precision": "bf16", "seed": 1, "val_acc": 0.883, "summary": {"skipped_steps": 0}, "steps": []},
            {"precision": "fp16", "seed": 1, "val_acc": 0.831, "summary": {"skipped_steps": 3}, "steps": steps}]
    text = numerics.scaler_events(rows)
    assert text.startswith("fp16 seed 1: its GradScaler skipped 3 step(s), the first of them after step 20 by "
                           "step 165 (scale 65,536 → 8,192); from there its step loss peaked at 30.1 at step 165")
    assert "-0.082 from fp32 seed 1" in text and "bf16" not in text and "cannot undo" in text
    assert numerics.scaler_events(rows[:2]) == "No run's GradScaler skipped a step."
    calibrating = [{"step": 1, "loss": 2.4, "loss_scale": 16384.0, "skipped_steps": 2},
                   {"step": 300, "loss": 0.5, "loss_scale": 32768.0, "skipped_steps": 2}]
    start = numerics.scaler_events([rows[0], {**rows[2], "summary": {"skipped_steps": 2}, "steps": calibrating}])
    assert start == "fp16 seed 1: its GradScaler skipped 2 step(s) in its first 20 steps, while it found its scale: the usual start."


def test_the_sweep_speed_spread_names_the_largest_ratio_between_seeds():
    # the H200 run of 2026-11-30: fp16 11,939 and 17,216 images/s on its two seeds, bf16 13,762 and 16,824
    rows = [{"precision": p, "images_per_s": v} for p, v in
            (("fp32", 7073), ("fp32", 7619), ("bf16", 13762), ("bf16", 16824), ("fp16", 11939), ("fp16", 17216))]
    text = numerics.sweep_speed_spread(rows)
    assert "up to ×1.44 between two seeds of one format (fp16)" in text
    assert "cannot rank bf16 against fp16 (their seeds' speeds overlap)" in text and "fp32 against" not in text
    apart = [{"precision": p, "images_per_s": v} for p, v in (("fp32", 7000), ("fp32", 7200), ("bf16", 14000),
                                                               ("bf16", 15000))]
    assert "×1.07 between two seeds of one format (bf16), less than the gaps" in numerics.sweep_speed_spread(apart)
    assert numerics.sweep_speed_spread(rows[:1] + [{"precision": "bf16", "images_per_s": None}]) == ""
