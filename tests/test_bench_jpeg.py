"""bench/gpu_jpeg_decode.py --cpu-smoke: the GPU command's code paths (rows, decoding alone, the synthetic run
beside a decoding thread) run the first time on a GPU machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_jpeg_decode  # noqa: E402


def test_cpu_smoke_measures_the_rows_and_the_decoding_beside_training(tmp_path: Path) -> None:
    out = tmp_path / "jpeg.json"
    assert gpu_jpeg_decode.main(["--cpu-smoke", "--jpeg-dir", str(tmp_path / "tree"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["cpu_smoke"] and result["rows"]["synthetic"]["ratio_to_synthetic"] == 1.0
    assert result["rows"]["jpeg, PIL workers (stand-in)"]["decode_alone"]["img_s"] > 0
    beside = result["diagnostics"]["synthetic beside torchvision decoding"]
    assert beside["status"] == "completed" and beside["img_s"] > 0 and beside["decoding_img_s"] > 0
    process = result["diagnostics"]["synthetic beside a torchvision decoding process"]
    assert process["status"] == "completed" and process["decoding_img_s"] > 0, process
