"""bench/jpeg_decode_gpu.py --cpu-smoke: the GPU command's code paths (rows, decoding alone, the synthetic run
beside a decoding thread) run the first time on a GPU machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import jpeg_decode_gpu  # noqa: E402


def test_cpu_smoke_measures_the_rows_and_the_decoding_beside_training(tmp_path: Path) -> None:
    out = tmp_path / "jpeg.json"
    assert jpeg_decode_gpu.main(["--cpu-smoke", "--jpeg-dir", str(tmp_path / "tree"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["cpu_smoke"] and result["rows"]["synthetic"]["ratio_to_synthetic"] == 1.0
    assert result["rows"]["jpeg, PIL workers (stand-in)"]["decode_alone"]["img_s"] > 0
    beside = result["diagnostics"]["synthetic beside torchvision decoding"]
    assert beside["status"] == "completed" and beside["img_s"] > 0 and beside["decoding_img_s"] > 0
    process = result["diagnostics"]["synthetic beside a torchvision decoding process"]
    assert process["status"] == "completed" and process["decoding_img_s"] > 0, process


def test_the_probes_knobs_reach_the_decoding_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/probes/jpeg_pipeline_gpu.py patches the prefetch depth, running into the next epoch and a wait per batch
    into GpuDecodedBatches: each must take effect (on the CPU here), or the GPU call measures one pipeline
    several times over."""
    sys.path.insert(0, str(ROOT / "bench" / "probes"))
    import jpeg_pipeline_gpu
    from torch.utils.data import DataLoader, DistributedSampler

    from coursekit.train.data import jpeg

    batches_class = jpeg.GpuDecodedBatches
    for name in ("__init__", "_decode", "_original_init", "_original_decode"):  # all undone after the test
        monkeypatch.setattr(batches_class, name, batches_class.__dict__.get(name), raising=False)
    jpeg.write_synthetic_jpeg_tree(tmp_path, 2, 4, size=(40, 30))
    files = jpeg.image_folder(tmp_path / "train", 16, train=True, raw_bytes=True)
    sampler = DistributedSampler(files, num_replicas=1, rank=0)
    loader = DataLoader(files, batch_size=3, sampler=sampler, collate_fn=jpeg.collate_bytes)
    assert batches_class(loader, "cpu", 16, train=True).run_ahead
    jpeg_pipeline_gpu.with_pipeline(prefetch=1, run_ahead=False, sync=True)
    batches = batches_class(loader, "cpu", 16, train=True)
    assert batches.prefetch == 1 and not batches.run_ahead
    assert [tuple(images.shape) for images, _ in batches] == [(3, 3, 16, 16), (3, 3, 16, 16), (2, 3, 16, 16)]
    assert batches._producer is None  # one epoch at a time: its thread stopped at the epoch's end
    from coursekit.train import data

    monkeypatch.setattr(data, "make_loader", data.make_loader)  # undone after the test
    monkeypatch.setattr(data, "_original_make_loader", None, raising=False)
    jpeg_pipeline_gpu.with_endless(False)
    loader, _ = data.make_loader(files, SimpleNamespace(seed=0, workers=0, persistent_workers=False, pin_memory=False,
                                                        prefetch_factor=None, batch_size=3, drop_last=False),
                                 SimpleNamespace(rank=0, world_size=1), train=True, endless=True)
    assert not isinstance(loader.batch_sampler, jpeg.EndlessEpochs)


def test_repeated_runs_make_one_row_of_mean_and_spread() -> None:
    runs = [{"status": "completed", "img_s": rate, "window_img_s": [rate - 1, rate + 1], "decoder": "torchvision"}
            for rate in (3600.0, 3700.0, 3650.0)]
    row = jpeg_decode_gpu.repeated([*runs, {"status": "not run", "error": "gone"}])
    assert row["img_s"] == 3650.0 and row["img_s_std"] == 50.0 and row["runs_img_s"] == [3600.0, 3700.0, 3650.0]
    assert len(row["window_img_s"]) == 6 and row["decoder"] == "torchvision"
    assert jpeg_decode_gpu.repeated([{"status": "not run", "error": "gone"}])["error"] == "gone"
