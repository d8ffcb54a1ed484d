"""Recorded GPU figures: the packaged ones load, a missing file is explained, a present one becomes labelled
tables, and a benchmark's results are packaged explicitly (no file picked up from beside them)."""

import json

import pytest

from coursekit.labs.kit import recorded

RECORDING = {
    "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "12.8", "date": "2026-11-27T10:00:00+00:00",
    "command": "python bench/ladder_gpu.py --out bench/results/gpu_ladder.json",
    "ladder": [
        {"rung": "fp32", "engine_img_s": {"mean": 1000.0, "std": 5.0}, "bare_img_s": {"mean": 1010.0, "std": 4.0},
         "ratio": 0.99, "peak_mem_gb": 20.0, "tflops": 24.0},
        {"rung": "bf16", "engine_img_s": {"mean": 2500.0, "std": 9.0}, "bare_img_s": {"mean": 2520.0, "std": 8.0},
         "ratio": 0.992, "peak_mem_gb": 12.0, "tflops": 60.0},
    ],
    "batch_sweep": [{"batch_size": 32, "engine_img_s": {"mean": 2000.0, "std": 1.0}, "peak_mem_gb": 3.0},
                    {"batch_size": 1024, "oom": True}],
}


@pytest.mark.parametrize("name", sorted(recorded.RECORDINGS))
def test_every_recording_is_packaged_and_parses(name, monkeypatch):
    monkeypatch.delenv(recorded.RECORDINGS[name].env, raising=False)
    path = recorded.packaged_path(name)
    assert path.is_file() and path.parent.name == "recordings" and path.parent.parent.name == "labs"
    data = recorded.load_recording(name)
    assert data["_path"] == str(path) and data.get("date") and data.get("command")


def test_the_packaged_ladder_names_the_run_behind_each_part():
    data = recorded.load_recording("gpu_ladder")
    assert set(data["sources"]) == {"ladder", "batch_sweep", "jpeg"}
    assert "--only sweep" in data["sources"]["batch_sweep"]["command"]
    assert "--only jpeg" in data["sources"]["jpeg"]["command"]
    assert recorded.batch_sweep_table(data) and recorded.jpeg_table(data) and recorded.ladder_table(data)
    assert set(recorded.load_recording("ddp_gpu")["logs"]) == {"node", "task"}  # lab 06 shows NCCL's log


def test_missing_recording_is_said_once_and_says_where_it_comes_from(tmp_path, capsys, monkeypatch):
    assert recorded.load_recording("gpu_ladder", tmp_path / "none.json") is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and recorded.NO_GPU_FIGURES in out and "bench/ladder_gpu.py" in out
    monkeypatch.setenv(recorded.RECORDINGS["ddp_gpu"].env, str(tmp_path / "gone.json"))
    assert recorded.load_recording("ddp_gpu") is None
    assert "$COURSEKIT_DDP_GPU points there" in capsys.readouterr().out
    assert recorded.load_recording("ddp_gpu", verbose=False) is None and capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="'nope' is not a recording: use one of gpu_ladder"):
        recorded.load_recording("nope")


def test_environment_variable_chooses_the_file(tmp_path, monkeypatch):
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps(RECORDING))
    monkeypatch.setenv(recorded.RECORDINGS["gpu_ladder"].env, str(path))
    assert recorded.recording_path("gpu_ladder") == path
    assert recorded.load_recording("gpu_ladder")["device"] == "NVIDIA H100 80GB HBM3"


def test_tables_are_labelled_and_relative_to_fp32(tmp_path):
    path = tmp_path / "gpu_ladder.json"
    path.write_text(json.dumps(RECORDING))
    (tmp_path / "gpu_jpeg.json").write_text(json.dumps({"device": "H100", "jpeg": {"pil_cpu_img_s": 1.0}}))
    data = recorded.load_recording("gpu_ladder", path)
    ladder = recorded.ladder_table(data)
    assert ladder.title.startswith("GPU ladder (recorded on NVIDIA H100 80GB HBM3, torch 2.11.0, CUDA 12.8, 2026-11-27")
    assert ladder.column("speedup") == [1.0, 2.5]
    sweep = recorded.batch_sweep_table(data)
    assert sweep.column("oom") == [False, True]
    assert sweep.column("img_s") == [2000.0, None]
    assert recorded.jpeg_table(data) is None  # a recording beside it is not merged in: publish does that


def test_publish_merges_the_named_parts_and_logs(tmp_path):
    ladder = tmp_path / "gpu_ladder.json"
    ladder.write_text(json.dumps(RECORDING))
    jpeg = {"pil_cpu_img_s": {"mean": 3000.0, "std": 1.0}, "nvjpeg_gpu_img_s": {"mean": 9000.0, "std": 2.0}}
    part = tmp_path / "gpu_jpeg.json"
    part.write_text(json.dumps({"device": "H100", "date": "2026-11-27T11:00", "command": "bench --only jpeg",
                                "jpeg": jpeg}))
    log = tmp_path / "busbw.log"
    log.write_text("NCCL INFO hello\n")
    out = tmp_path / "packaged" / "gpu_ladder.json"
    out.parent.mkdir()
    assert recorded.main(["gpu_ladder", str(ladder), "--part", f"jpeg={part}", "--log", f"node={log}",
                          "--out", str(out)]) == 0
    data = recorded.load_recording("gpu_ladder", out)
    table = recorded.jpeg_table(data)
    assert table.column("img_s") == [3000.0, 9000.0] and "(recorded on H100, " in table.title  # the part's own machine
    assert "bench --only jpeg" not in table.title  # machine, versions and date; the command is in the report
    assert data["sources"]["ladder"]["command"] == RECORDING["command"] and data["logs"] == {"node": "NCCL INFO hello\n"}
    with pytest.raises(ValueError, match="has no 'batch_sweep'"):
        recorded.publish("gpu_ladder", ladder, parts={"batch_sweep": part}, out=out)


def test_malformed_recording_is_a_clear_error(tmp_path):
    path = tmp_path / "gpu_ladder.json"
    path.write_text(json.dumps({"device": "x", "ladder": [{"rung": "fp32"}]}))
    with pytest.raises(ValueError, match="engine_img_s"):
        recorded.load_recording("gpu_ladder", path)
    path.write_text(json.dumps({"ladder": []}))
    with pytest.raises(ValueError, match="'device'"):
        recorded.load_recording("gpu_ladder", path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        recorded.load_recording("large_batch_gpu", path)
