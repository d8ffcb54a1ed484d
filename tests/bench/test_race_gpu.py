"""bench/race_gpu.py: the --cpu-smoke race end to end in one process, and the report from its JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import race_gpu  # noqa: E402

# the bench's own budget, far above the smoke's few CPU-minutes: a limit that load can reach skips seeds
# (120 s did beside other work: 139 s, one seed of the tuned entry skipped, the entry rightly not counted)
SMOKE_TIME_LIMIT_S = 1800
SMOKE_RESULT = ROOT / "bench" / "results" / "race_cpu_smoke.json"  # a full --cpu-smoke run (a section of REPORT-race.md)


def test_report_from_the_smoke_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(race_gpu, "REPORT", tmp_path / "REPORT-race.md")
    race_gpu.write_report([json.loads(SMOKE_RESULT.read_text())])
    text = (tmp_path / "REPORT-race.md").read_text()
    assert "| baseline/baseline | 3/3 |" in text and "| bench/tuned | 3/3 |" in text and "counts" in text
    assert "smoke test of the plumbing" in text and "python -m coursekit.train" in text


def smaller_race(original: Any) -> Any:
    """Lab 09's cpu settings on half the training images to an easier target: the race's plumbing (four engine
    processes, posted, verified) at a lower cost per run; the real settings' numbers are tested in the lab's tests."""
    def settings(profile: str) -> dict[str, Any]:
        values = original(profile)
        values["baseline"] = values["baseline"].replace(num_samples=1000, target_acc=0.5)
        return values
    return settings


def test_a_short_cpu_race_runs_and_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.labs import lab09_race

    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))  # run_race would set it for the bench's process
    monkeypatch.setenv("COURSEKIT_SITE", "local")  # its runs are local processes: no Slurm accounting to ask,
    # wherever Slurm is up (a whole run had it set by notebooks/conftest.py; this file alone did not)
    monkeypatch.setattr(lab09_race, "settings", smaller_race(lab09_race.settings))
    result = race_gpu.run_race("cpu", seeds=2, time_limit_s=SMOKE_TIME_LIMIT_S, work=tmp_path)
    assert [e["participant"] for e in result["entries"]] and all(e["counts"] for e in result["entries"]), \
        [(e["participant"], e.get("marks"), e.get("time_to_target_s")) for e in result["entries"]]
    assert {e["seeds"] for e in result["entries"]} == {2}
    assert "lab 09 (cpu)" in result["rules"]


def test_multi_gpu_entries_run_under_torchrun(tmp_path: Path) -> None:
    one = race_gpu.engine_command(["--epochs", "1"], tmp_path)
    four = race_gpu.engine_command(["--epochs", "1"], tmp_path, processes=4)
    assert one[1:3] == ["-m", "coursekit.train"] and one[-2:] == ["--out", str(tmp_path)]
    assert four[1:7] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", "-m"]
    assert four[7] == "coursekit.train" and four[-4:] == ["--epochs", "1", "--out", str(tmp_path)]


def test_a_multi_gpu_only_section_is_compared_with_the_one_gpu_record(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(race_gpu, "REPORT", tmp_path / "REPORT-race.md")
    one_gpu = json.loads(SMOKE_RESULT.read_text())
    tuned = next(e for e in one_gpu["entries"] if e["submission"] == "tuned")
    multi = {**one_gpu, "gpus": 2, "entries": [{**tuned, "submission": "tuned-2gpu",
                                                 "time_to_target_s": tuned["time_to_target_s"] / 4}]}
    race_gpu.write_report([one_gpu, multi])
    text = (tmp_path / "REPORT-race.md").read_text()
    assert "| bench/tuned-2gpu | 3/3 |" in text
    assert "tuned-2gpu against the tuned entry on one GPU (the one-GPU section above)" in text and "(x4.00)" in text
    with pytest.raises(ValueError, match="gpus > 1"):
        race_gpu.run_race("cpu", seeds=2, time_limit_s=1, work=tmp_path, gpus=1, multi_gpu_only=True)


def test_the_multi_gpu_entry_keeps_or_splits_the_tuned_batch() -> None:
    from coursekit.labs import lab_settings

    s = lab_settings("09", "gpu")
    tuned = s.baseline.replace(**s.tuned)
    each = race_gpu.race_entries(s, 2)
    assert list(each) == [("bench", "tuned-2gpu"), ("baseline", "baseline"), ("bench", "tuned")]  # multi-GPU first
    config, processes = each[("bench", "tuned-2gpu")]
    assert processes == 2 and config.batch_size == tuned.batch_size and config.base_batch == tuned.batch_size
    split = race_gpu.race_entries(s, 2, multi_gpu_only=True, same_global_batch=True)
    (name, (config, processes)), = split.items()
    assert name == ("bench", "tuned-2gpu-same-batch") and config.batch_size * 2 == tuned.batch_size
    assert config.lr_scaling == "linear" and config.base_batch == tuned.batch_size  # the global batch: the same LR
