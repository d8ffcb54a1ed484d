"""Lab 08's helpers without jobs: configurations, the bubble theory, weights compared, activations counted.
(The strategies themselves are tested against serial training in coursekit/train/test_parallel.py; the
notebook runs them as jobs.)"""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from coursekit.labs import lab08_model_parallel as mp
from coursekit.labs import lab_settings
from coursekit.labs.kit import recorded
from coursekit.train.config import TrainConfig

BENCH = Path(__file__).resolve().parents[2] / "bench"


def base() -> TrainConfig:
    return lab_settings("08", "cpu").base


def test_data_parallel_strategies_split_the_global_batch_and_the_others_keep_it():
    b = base()
    assert mp.strategy_config(b, "zero3", n=2).batch_size == b.batch_size // 2
    assert mp.strategy_config(b, "fsdp_tp", n=4).batch_size == b.batch_size // 2
    assert mp.strategy_config(b, "tensor", n=2).batch_size == b.batch_size
    one_f = mp.strategy_config(b, "1f1b", "/tmp/w", n=2, microbatches=4)
    assert (one_f.parallel, one_f.pipeline_schedule, one_f.microbatches) == ("pipeline", "1f1b", 4)
    assert one_f.save_weights == str(Path("/tmp/w") / "1f1b.pt")


@pytest.mark.parametrize("call, word", [
    (lambda: mp.strategy_config(base(), "zero4"), "strategy"),
    (lambda: mp.strategy_config(base().replace(batch_size=3), "ddp", n=2), "batch_size"),
    (lambda: mp.bubble_configs(base(), [3], stages=2), "microbatches"),
    (lambda: mp.bubble_theory(0, 4), "stages"),
])
def test_bad_input_names_the_parameter(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_bubble_theory_and_1f1b_needs_as_many_microbatches_as_stages():
    assert mp.bubble_theory(2, 1) == 0.5 and mp.bubble_theory(4, 8) == pytest.approx(3 / 11)
    configs = mp.bubble_configs(base(), [1, 2, 4], stages=2)
    pairs = [(c.pipeline_schedule, c.microbatches) for c in configs]
    assert pairs == [("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("1f1b", 2), ("1f1b", 4)]
    assert mp.decreasing([0.5, 0.3, 0.1]) and not mp.decreasing([0.5, 0.5]) and not mp.decreasing([0.4, None])


def test_weights_difference_ignores_wrapper_prefixes_and_flags_other_models(tmp_path):
    a = {"blocks.0.w": torch.zeros(3), "head.weight": torch.ones(2)}
    torch.save(a, tmp_path / "a.pt")
    torch.save({"module.blocks.0.w": torch.full((3,), 1e-3), "module.head.weight": torch.ones(2)}, tmp_path / "b.pt")
    torch.save({"blocks.0.w": torch.zeros(3)}, tmp_path / "c.pt")
    assert mp.weights_difference(tmp_path / "a.pt", tmp_path / "b.pt") == pytest.approx(1e-3)
    assert math.isinf(mp.weights_difference(tmp_path / "a.pt", tmp_path / "c.pt"))
    assert mp.weights_difference(tmp_path / "a.pt", tmp_path / "missing.pt") is None


def test_checkpointing_cuts_the_saved_activations_of_the_gpt():
    b = base().replace(batch_size=4)
    plain, checkpointed = mp.activation_bytes(b), mp.activation_bytes(b.replace(activation_checkpointing=True))
    assert 0 < checkpointed < 0.5 * plain
    held = mp.in_flight_activations(b, stages=2, microbatches=4)
    assert held["gpipe_mb"] == pytest.approx(2 * held["1f1b_mb"])


def test_seven_billion_and_tensor_parallel_traffic():
    rows = {(r["strategy"], r["n_gpu"]): r for r in mp.seven_billion()}
    assert rows[("ddp", 1)]["total_gb"] == pytest.approx(112) and not rows[("ddp", 1)]["fits_gpu"]
    assert rows[("zero3", 8)]["fits_gpu"]
    comm = mp.tp_allreduce_bytes(base())
    assert comm["allreduces_per_step"] == 4 * base().gpt_layers


def test_recording_absent_is_said_and_present_is_a_table(tmp_path, capsys):
    assert recorded.load_recording("model_parallel_gpu", tmp_path / "none.json") is None
    assert recorded.NO_GPU_FIGURES in capsys.readouterr().out
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"machine": {"gpus": 2, "device_name": "H100"}, "runs": [
        {"name": "big-ddp", "n_gpu": 2, "ok": False, "oom": True}, {"name": "big-zero3", "n_gpu": 2, "ok": True},
        {"name": "tensor", "n_gpu": 2, "ok": False, "skipped": True}]}))
    table = mp.recorded_table(recorded.load_recording("model_parallel_gpu", path))
    assert table.column("oom") == [True, None] and "H100" in table.title
    assert "tensor" not in table.column("name")  # a run the bench had no time for is not a failure


def test_benchmark_report_renders_a_smoke_result():
    spec = importlib.util.spec_from_file_location("report_model_parallel", BENCH / "report_model_parallel.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    text = report.render({"machine": {"gpus": 2, "device_name": "H100", "torch": "2.11"}, "command": "python x",
                          "big_model": {"num_parameters": 6e9, "ddp_state_gib": 91, "zero3_state_gib_per_gpu": 45},
                          "runs": [{"name": "big-ddp", "n_gpu": 2, "ok": False, "oom": True, "log_tail": "CUDA out of memory"},
                                   {"name": "big-zero3", "n_gpu": 2, "ok": True, "peak_mem_gb": 60.0},
                                   {"name": "gpipe m=4", "n_gpu": 2, "ok": True, "bubble_measured": 0.25,
                                    "bubble_theory": 0.2}]})
    assert "**out of memory**" in text and "0.250 / 0.200" in text and "Per strategy" in text


def test_tensor_parallel_formula_keeps_embeddings_norms_and_head_whole():
    """Per block of width 8: q, k, v 3 x 64 and fc1 256 + its bias 32 (column-wise), o 64 and fc2 256 (row-wise,
    their biases whole) = 800 split; 2 x H100 measured 649 MB per rank where splitting everything gave 516."""
    config = TrainConfig(model="gpt", dataset="tokens", gpt_layers=2, gpt_dim=8, gpt_heads=2, seq_len=4, vocab_size=16,
                         optimizer="adamw")
    split, whole = mp.tp_split_parameters(config)
    assert split == 2 * 800
    assert split + whole == mp.num_parameters(config)
    fp32_adamw = 16  # bytes per parameter: weights, gradients, m, v
    assert mp.formula_bytes(config, "tensor", 2, split + whole) == fp32_adamw * (split / 2 + whole)
    assert mp.formula_bytes(config, "zero3", 2, split + whole) == fp32_adamw * (split + whole) / 2


def test_benchmark_counts_the_tensor_parallel_split_as_the_lab_does():
    spec = importlib.util.spec_from_file_location("model_parallel_gpu", BENCH / "model_parallel_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    config = TrainConfig(model="gpt", dataset="tokens", gpt_layers=3, gpt_dim=16, gpt_heads=2, seq_len=8, vocab_size=32)
    split, whole = mp.tp_split_parameters(config)
    assert bench.tp_split_of(3, 16) == split
    assert bench.params_of(3, 16, 32, 8) == split + whole
