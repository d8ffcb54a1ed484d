"""The benchmarks run where they are run: a missing optional part (nvImageCodec, CUDA, an input file, a folder that
cannot be written) is said in one line, what was measured is written before anything is printed from it, and a
figure that was not measured prints as n/a, never a traceback that loses the results (issue: jpeg_decode_gpu.py
ended with ``TypeError: unsupported format string passed to NoneType.__format__`` on a GPU machine without
nvImageCodec, after its measurements and before writing them)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import jpeg_decode_gpu  # noqa: E402
import report_gpu  # noqa: E402
import robust  # noqa: E402

NVIMGCODEC_ERROR = ("ValueError: $COURSEKIT_JPEG_DECODER=nvimgcodec but nvImageCodec is not usable here: pip install "
                    "nvidia-nvimgcodec-cu13 (CUDA 13) or unset it")


@pytest.fixture
def no_nvimgcodec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jpeg_decode_gpu, "nvimgcodec_problem", lambda: "nvImageCodec not installed")


def test_a_row_without_a_rate_prints_as_not_available_and_why(no_nvimgcodec: None) -> None:
    not_run = {"status": "not run", "img_s": None, "error": NVIMGCODEC_ERROR}
    line = jpeg_decode_gpu.row_line("nvimgcodec hardware", not_run)
    assert "n/a (nvImageCodec not installed)" in line and line.startswith("nvimgcodec hardware")
    # the diagnostic that crashed: the decoding process never said "ready", its row has img_s None
    process = {"status": "not run", "img_s": None, "decoder": "nvimgcodec", "decoding_img_s": None,
               "decoder_stderr": "decoding process: nvImageCodec is not usable here"}
    assert "n/a (nvImageCodec not installed)" in jpeg_decode_gpu.diagnostic_line("synthetic beside a process", process)
    assert "n/a (RuntimeError: no answer)" in jpeg_decode_gpu.diagnostic_line("x", {"status": "failed", "img_s": None,
                                                                      "error": "Trace\nRuntimeError: no answer"})
    measured = {"status": "completed", "img_s": 4243.2, "decoder": "torchvision",
                "decode_alone": {"status": "not run", "error": "nvImageCodec is not usable here"}}
    line = jpeg_decode_gpu.row_line("torchvision nvjpeg", measured)  # no ratio (synthetic failed), no decode rate
    assert "4243 img/s" in line and "xn/a" in line and "decoding alone n/a (nvImageCodec not installed)" in line


def fake_gpu_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """jpeg_decode_gpu's GPU path on this CPU, each measurement faked: the rows and diagnostics of a GPU machine
    without nvImageCodec, the decoding process of one diagnostic failing."""
    def run(cfg: Any, decoder: str | None = None) -> dict[str, Any]:
        rate = 4700.0 if cfg.dataset == "synthetic" else 4250.0
        return {"status": "completed", "img_s": rate, "img_s_std": 1.0, "window_img_s": [rate], "decoder": decoder}

    monkeypatch.setattr(jpeg_decode_gpu, "require_cuda", lambda *args: None)
    monkeypatch.setattr(jpeg_decode_gpu, "run", run)
    monkeypatch.setattr(jpeg_decode_gpu, "decode_alone", lambda *args, **kwargs: {"decoder": "torchvision",
                                                                                  "img_s": 13000.0})
    monkeypatch.setattr(jpeg_decode_gpu, "synthetic_beside_decoding", lambda *args, **kwargs: {
        **run(type("C", (), {"dataset": "synthetic"})()), "decoding_img_s": 6000.0})
    monkeypatch.setattr(jpeg_decode_gpu, "synthetic_beside_decoding_process", lambda *args, **kwargs: {
        "status": "not run", "img_s": None, "decoder": "torchvision", "decoding_img_s": None,
        "decoder_stderr": "RuntimeError: CUDA error: out of memory"})


def test_without_nvimgcodec_the_gpu_run_writes_every_row_and_prints_na(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, no_nvimgcodec: None) -> None:
    fake_gpu_run(monkeypatch)
    (tmp_path / "tree" / "train").mkdir(parents=True)  # a JPEG tree "already there"
    out = tmp_path / "gpu_jpeg_decode.json"
    assert jpeg_decode_gpu.main(["--jpeg-dir", str(tmp_path / "tree"), "--out", str(out), "--repeats", "2"]) == 0
    result = json.loads(out.read_text())
    assert result["rows"]["torchvision nvjpeg"]["ratio_to_synthetic"] == pytest.approx(4250 / 4700)
    assert result["rows"]["nvimgcodec hardware"]["img_s"] is None and result["nvimgcodec"] == "nvImageCodec not installed"
    done = capsys.readouterr()
    assert "nvImageCodec is missing: its rows and diagnostics are reported as n/a" in done.err
    assert "pip install nvidia-nvimgcodec-cu13" in done.err and len(done.err.strip().splitlines()) == 1
    assert re.search(r"^nvimgcodec hardware +n/a \(nvImageCodec not installed\)$", done.out, re.M), done.out
    assert re.search(r"^synthetic beside a torchvision decoding process +n/a \(RuntimeError: CUDA error: out of "
                     r"memory\)  \{", done.out, re.M), done.out
    assert re.search(r"^nvimgcodec CUDA only +n/a \(nvImageCodec not installed\)  \{", done.out, re.M), done.out
    assert "best JPEG / synthetic = 0.90" in done.out
    report = "\n".join(report_gpu.hardware_jpeg_section({**result, "earlier_runs_note": None}))  # and its report
    assert "| nvimgcodec hardware | – | n/a (nvImageCodec not installed) |" in report


def test_the_results_are_written_before_anything_is_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            no_nvimgcodec: None) -> None:
    fake_gpu_run(monkeypatch)

    def broken(*args: Any) -> str:
        raise TypeError("unsupported format string passed to NoneType.__format__")

    monkeypatch.setattr(jpeg_decode_gpu, "diagnostic_line", broken)
    (tmp_path / "tree" / "train").mkdir(parents=True)
    out = tmp_path / "gpu_jpeg_decode.json"
    with pytest.raises(TypeError):
        jpeg_decode_gpu.main(["--jpeg-dir", str(tmp_path / "tree"), "--out", str(out), "--repeats", "1"])
    assert set(json.loads(out.read_text())["rows"]) == {"synthetic", "torchvision nvjpeg", "nvimgcodec hardware"}


def test_an_output_that_cannot_be_written_stops_before_measuring_or_goes_elsewhere(tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    with pytest.raises(SystemExit, match="cannot write .*afile/out.json .*nothing was measured; give --out"):
        robust.check_writable(afile / "out.json")
    robust.check_writable(tmp_path / "new" / "out.json")  # writable: nothing left behind
    assert not (tmp_path / "new" / "out.json").exists()
    spare = robust.save_text(afile / "out.json", '{"rows": 1}\n', script="bench/x.py")
    assert spare != afile / "out.json" and json.loads(spare.read_text()) == {"rows": 1}
    assert f"the results are in {spare} instead" in capsys.readouterr().err
    spare.unlink()


def test_a_missing_input_file_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    import race_gpu
    import report_ddp
    import report_large_batch
    import report_model_parallel

    missing = tmp_path / "missing.json"
    for main, argv in ((report_ddp.main, ["--json", str(missing), "--out", str(tmp_path / "r.md")]),
                       (report_model_parallel.main, ["--json", str(missing), "--out", str(tmp_path / "r.md")]),
                       (report_large_batch.main, ["--json", str(missing), "--out", str(tmp_path / "r.md")]),
                       (race_gpu.main, ["--report", str(missing)])):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert isinstance(stopped.value.code, str) and f"{missing}: no such" in stopped.value.code
        assert "\n" not in stopped.value.code
    missing.write_text('{"cut": ')  # a run stopped while writing it
    with pytest.raises(SystemExit, match="is not a JSON"):
        report_ddp.main(["--json", str(missing), "--out", str(tmp_path / "r.md")])


def test_no_cuda_stops_a_gpu_benchmark_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(robust, "cuda_devices", lambda: 0)
    with pytest.raises(SystemExit) as stopped:
        robust.require_cuda()
    said = capsys.readouterr().err
    assert stopped.value.code == 2 and len(said.strip().splitlines()) == 1
    assert re.search("no CUDA GPU here .*nothing to measure.*--cpu-smoke", said)
    assert robust.number(None, ".2f") == "n/a" and robust.number(0.904, ".2f") == "0.90"
    assert robust.number(None, why="nvImageCodec not installed") == "n/a (nvImageCodec not installed)"
