"""Recorded GPU figures: a missing file is explained, a present one becomes labelled tables."""

import json

import pytest

from coursekit.labs.kit import recorded

RECORDING = {
    "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "12.8", "date": "2026-11-27T10:00:00+00:00",
    "command": "python bench/gpu_ladder.py --out bench/results/gpu_ladder.json",
    "ladder": [
        {"rung": "fp32", "engine_img_s": {"mean": 1000.0, "std": 5.0}, "bare_img_s": {"mean": 1010.0, "std": 4.0},
         "ratio": 0.99, "peak_mem_gb": 20.0, "tflops": 24.0},
        {"rung": "bf16", "engine_img_s": {"mean": 2500.0, "std": 9.0}, "bare_img_s": {"mean": 2520.0, "std": 8.0},
         "ratio": 0.992, "peak_mem_gb": 12.0, "tflops": 60.0},
    ],
    "batch_sweep": [{"batch_size": 32, "engine_img_s": {"mean": 2000.0, "std": 1.0}, "peak_mem_gb": 3.0},
                    {"batch_size": 1024, "oom": True}],
}


def test_missing_recording_says_where_it_comes_from(tmp_path, capsys):
    assert recorded.load_gpu_ladder(tmp_path / "none.json") is None
    assert "bench/gpu_ladder.py" in capsys.readouterr().out


def test_environment_variable_chooses_the_file(tmp_path, monkeypatch):
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps(RECORDING))
    monkeypatch.setenv(recorded.LADDER_ENV, str(path))
    assert recorded.default_ladder_path() == path
    assert recorded.load_gpu_ladder()["device"] == "NVIDIA H100 80GB HBM3"


def test_tables_are_labelled_and_relative_to_fp32(tmp_path):
    path = tmp_path / "gpu_ladder.json"
    path.write_text(json.dumps(RECORDING))
    jpeg = {"pil_cpu_img_s": {"mean": 3000.0, "std": 1.0}, "nvjpeg_gpu_img_s": {"mean": 9000.0, "std": 2.0}}
    older = {"device": "H100", "date": "2026-11-27T09:00", "command": "older", "jpeg": {"pil_cpu_img_s": 1.0}}
    newer = {"device": "H100", "date": "2026-11-27T11:00", "command": "bench --only jpeg", "jpeg": jpeg}
    (tmp_path / "gpu_jpeg_a.json").write_text(json.dumps(older))
    (tmp_path / "gpu_jpeg_b.json").write_text(json.dumps(newer))
    (tmp_path / "notes.json").write_text("[1, 2]")  # not a recording: ignored
    data = recorded.load_gpu_ladder(path)
    ladder = recorded.ladder_table(data)
    assert ladder.title.startswith("GPU ladder (recorded on NVIDIA H100 80GB HBM3, torch 2.11.0, CUDA 12.8, 2026-11-27")
    assert ladder.column("speedup") == [1.0, 2.5]
    sweep = recorded.batch_sweep_table(data)
    assert sweep.column("oom") == [False, True]
    assert sweep.column("img_s") == [2000.0, None]
    table = recorded.jpeg_table(data)  # found beside the ladder: the newest recording that has it
    assert table.column("img_s") == [3000.0, 9000.0]
    assert "bench --only jpeg" in table.title and data["sources"]["ladder"]["command"] == RECORDING["command"]


def test_malformed_recording_is_a_clear_error(tmp_path):
    path = tmp_path / "gpu_ladder.json"
    path.write_text(json.dumps({"device": "x", "ladder": [{"rung": "fp32"}]}))
    with pytest.raises(ValueError, match="engine_img_s"):
        recorded.load_gpu_ladder(path)
    path.write_text(json.dumps({"ladder": []}))
    with pytest.raises(ValueError, match="'device'"):
        recorded.load_gpu_ladder(path)
