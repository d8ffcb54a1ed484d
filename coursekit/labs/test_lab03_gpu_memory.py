"""Lab 03: memory anatomy measured tensor by tensor."""

import pytest

from coursekit.labs import lab03_gpu_memory as anatomy
from coursekit.labs.kit.results import ResultsTable
from coursekit.train.config import TrainConfig


def test_bytes_per_parameter_and_activations():
    sgd = anatomy.measure_training_memory("mlp", (3, 8, 8), "sgd", 4, device="cpu")
    adam = anatomy.measure_training_memory("mlp", (3, 8, 8), "adamw", 4, device="cpu")
    double = anatomy.measure_training_memory("mlp", (3, 8, 8), "sgd", 8, device="cpu")
    assert anatomy.bytes_per_parameter(sgd) == 12.0
    assert round(anatomy.bytes_per_parameter(adam), 2) == 16.0
    assert sgd["no_grad_saved_bytes"] == 0 and sgd["eval_saved_bytes"] > 0
    assert abs(double["activations_bytes"] / sgd["activations_bytes"] - 2) < 0.05
    assert sgd["train_peak_bytes"] is None  # no GPU allocator on a CPU
    assert sgd["gpu"]["device"] == "cpu" and sgd["gpu"]["total_memory_gb"] is None  # the job says what it ran on


def test_tables_add_megabytes():
    rows = anatomy.measure_cases([dict(model_name="mlp", input_shape=(3, 8, 8), optimizer="sgd", batch_size=2,
                                       device="cpu")])
    table = anatomy.anatomy_table(rows)
    assert table[0]["bytes_per_param"] == 12.0
    assert table[0]["parameters_mib"] == rows[0]["parameters_bytes"] / 2**20
    assert table[0]["parameters_m"] == rows[0]["num_parameters"] / 1e6


# --- the calculator against the allocator, on rows shaped like the GPU run ------------------------------------

CALIBRATION = [(32, 7514), (64, 10441), (128, 16276), (256, 27956)]  # ResNet-50 fp32 on an H200, MiB
HELD_OUT = [(64, 3.0 * 1024), (256, 11.2 * 1024)]  # bf16 + channels_last, the engine's benchmark on an H100


def peak_rows(calibration=CALIBRATION, held_out=HELD_OUT, error=0.0):
    """Measured peaks with the calculator's estimate ``error`` off them (relative)."""
    rows = [{"case": "calibration", "label": "resnet50 fp32", "batch_size": b, "peak_mem_mib": m,
             "estimate_mib": m * (1 + error)} for b, m in calibration]
    rows += [{"case": "held out", "label": "resnet50 bf16 + channels_last", "batch_size": b, "peak_mem_mib": m,
              "estimate_mib": m * (1 + error)} for b, m in held_out]
    return ResultsTable(rows)


def test_peak_claims_hold_within_the_tolerance():
    tolerance = anatomy.settings("gpu")["peak_tolerance"]
    assert [c.holds for c in anatomy.check_peak_claims(peak_rows(error=0.05), tolerance, True, "")] == [True, True]


def test_a_peak_that_rounds_to_zero_from_below_reads_as_zero():
    """The H200 run printed "7513/7514 MiB (-0.0%)"."""
    rows = ResultsTable([{"case": case, "label": case, "batch_size": 32, "peak_mem_mib": 7514, "estimate_mib": 7513}
                         for case in ("calibration", "held out")])
    evidence = anatomy.check_peak_claims(rows, 0.1, True, "")[0].evidence
    assert "(+0.0%)" in evidence and "-0.0%" not in evidence


def test_resnet50_training_flop_per_image():
    """The constant the speed-up note uses, against torch's own count of a forward and a backward."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from coursekit.train.models import build_model

    model = build_model(TrainConfig(model="resnet50", image_size=224), 1000, (3, 224, 224))
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(2, 3, 224, 224)).sum().backward()
    assert counter.get_total_flops() / 2 / 1e9 == pytest.approx(anatomy.RESNET50_TRAIN_GFLOP, rel=0.01)


def test_the_speedup_note_is_the_ratio_of_sustained_flops():
    gpu = {"device": "NVIDIA H200", "images_per_s": 742, "batch_size": 64}  # the H200 run's rows
    cpu = {"device": "CPU x86_64 (16 threads)", "images_per_s": 14.7, "batch_size": 64}
    note = anatomy.speedup_note(gpu, cpu)
    assert "NVIDIA H200 18.0 TFLOP/s at batch 64" in note and "(16 threads) 357 GFLOP/s at batch 64" in note
    assert "datasheet peak is 67 TFLOP/s" in note and "sustained 27% of it" in note
    unknown = anatomy.speedup_note({**gpu, "device": "Some GPU"}, cpu)
    assert "TFLOP/s at batch 64" in unknown and "peak" not in unknown  # no peak invented for an unknown GPU


@pytest.mark.parametrize("rows, claim", [
    (peak_rows(error=-0.2), "calibration"),  # a term missing: the autotuning workspace is 15-35 % of fp32's peak
    (ResultsTable([r for r in peak_rows() if r["case"] == "calibration"]
                  + [{**r, "estimate_mib": 1.3 * r["peak_mem_mib"]} for r in peak_rows() if r["case"] == "held out"]),
     "not fitted"),  # the held-out case 30 % off
    (peak_rows(held_out=[]), "not fitted"),  # no held-out run completed
])
def test_a_planted_wrong_estimate_fails(rows, claim):
    with pytest.raises(AssertionError, match=claim):
        anatomy.check_peak_claims(rows, anatomy.settings("gpu")["peak_tolerance"], True, "")


def test_peak_claims_are_not_checked_without_a_gpu():
    assert [c.holds for c in anatomy.check_peak_claims(None, 0.1, False, "no GPU")] == [None, None]


def test_the_held_out_claim_says_the_fitted_term_is_not_tested_there():
    """bf16 + channels_last gets no autotuning workspace: agreeing there tests the rest of the calculator only."""
    held_out = anatomy.check_peak_claims(None, 0.1, False, "no GPU")[1].statement
    assert "not fitted" in held_out and "bf16 + channels_last" in held_out and "no autotuning workspace" in held_out


def test_estimates_per_case_follow_each_runs_options():
    base = TrainConfig(model="resnet18", dataset="synthetic", image_size=16, num_classes=10, gpu_resident=True)
    heldout = {"precision": "bf16", "channels_last": True}
    rows = [{"config": base.replace(batch_size=8), "peak_mem_mb": 100.0, "summary": {"mem_reserved_peak_mb": 120.0}},
            {"config": base.replace(batch_size=8, **heldout), "peak_mem_mb": 60.0, "summary": {}}]
    table = anatomy.add_estimates(ResultsTable(rows), heldout)
    assert table.column("case") == ["calibration", "held out"]
    assert table[1]["label"] == "resnet18 bf16 + channels_last"
    assert table[0]["estimate_mib"] > table[1]["estimate_mib"] > 0  # fp32 autotuning workspace, bf16 halves
    assert table[0]["reserved_mib"] == 120.0 and table[1]["peak_mem_mib"] == 60.0


def test_gpu_memory_in_gib():
    assert anatomy.gpu_memory_gib({"total_memory_gb": 85.0}, 1.0) == pytest.approx(79.16, abs=0.01)  # H100 80GB
    assert anatomy.gpu_memory_gib(None, 79.2) == 79.2
