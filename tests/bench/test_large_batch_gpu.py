"""bench/large_batch_gpu.py --cpu-smoke and its report: the GPU command must work the first time it runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import large_batch_gpu  # noqa: E402
import report_large_batch  # noqa: E402

pytestmark = pytest.mark.xdist_group("large_batch_smoke")


def test_cpu_smoke_of_two_parts_writes_the_record_and_the_report(tmp_path: Path) -> None:
    out = tmp_path / "large_batch_gpu.json"
    assert large_batch_gpu.main(["--cpu-smoke", "--parts", "BD", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["smoke"] and {r["part"] for r in record["runs"]} == {"B", "D"}
    spikes = [r for r in record["runs"] if r["part"] == "B"]
    assert spikes and all(r["losses"] and r["losses"][0][0] == 1 for r in spikes)  # every step's loss
    assert "no analysis" in (tmp_path / "REPORT-large-batch.md").read_text()


def test_the_report_of_a_full_record_has_every_part_and_the_claims() -> None:
    record = {"device": "H100", "date": "2026-11-27", "command": "python bench/large_batch_gpu.py", "total_s": 300.0,
              "model": "airbench", "target_acc": 0.9, "base_lr": 0.1, "base_batch": 256,
              "cells_a": [{"arm": "reference B=256", "batch_size": 256, "lr": 0.1, "steps": 2340, "val_acc": 0.9426,
                           "val_acc_std": 0.0006}],
              "cells_b": [{"arm": "lr 12.8, no warm-up", "batch_size": 4096, "early_peak_loss": 12.0, "val_acc": 0.80,
                           "val_acc_std": 0.01}],
              "curve": [{"batch_size": 64, "steps_to_target": 1135, "samples_to_target": 72640, "best_lr": 0.0125,
                         "lrs_reaching": 3, "lrs": 3}],
              "fit": {"s_min": 120.0, "e_min": 90000.0, "b_crit": 750.0}, "reference_steps_to_target": 363,
              "b_simple_at_target": 900.0, "claims": [{"statement": "a gap", "holds": True, "evidence": "+0.04"}]}
    text = report_large_batch.report_text(record)
    for part in ("## A.", "## B.", "## C.", "## D.", "## Claims"):
        assert part in text
    assert "| reference B=256 | 256 | 0.1 | 2340 | 0.9426 ± 0.0006 |" in text and "B_crit 750" in text
    assert "**holds**: a gap" in text and "at step 363" in text


def test_no_gpu_and_no_smoke_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    if large_batch_gpu.torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert large_batch_gpu.main([]) == 2
    assert "--cpu-smoke" in capsys.readouterr().err
