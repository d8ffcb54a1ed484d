"""bench/publish.py and the --publish option of the benchmarks that feed a lab's recording."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import publish  # noqa: E402

FEEDS_A_LAB = {"ladder_gpu.py": "gpu_ladder", "ddp_gpu.py": "ddp_gpu", "large_batch_gpu.py": "large_batch_gpu",
               "model_parallel_gpu.py": "model_parallel_gpu"}


@pytest.mark.parametrize("name", ["large_batch_gpu", "model_parallel_gpu"])
def test_publish_writes_the_record_as_the_labs_recording(tmp_path: Path, name: str) -> None:
    record = ROOT / "bench" / "results" / f"{name}.json"
    target = publish.publish(record, name, recordings=tmp_path / "recordings")
    assert target == tmp_path / "recordings" / f"{name}.json"
    assert json.loads(target.read_text()) == json.loads(record.read_text())


def test_ddp_publishes_the_nccl_logs_of_both_bindings(tmp_path: Path) -> None:
    import ddp_gpu

    result = json.loads((Path(__file__).parent / "data" / "ddp_gpu_cpu_smoke.json").read_text())
    names = {binding: row["busbw"]["log"] for binding, row in result["binding"].items() if isinstance(row, dict)}
    assert set(names) == {"node", "task"}
    (tmp_path / names["node"]).write_text("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    assert ddp_gpu.binding_logs(result, tmp_path) == {"node": tmp_path / names["node"]}  # the missing one left out


def test_the_default_recordings_are_the_package_data_the_labs_read() -> None:
    assert publish.RECORDINGS == ROOT / "coursekit" / "labs" / "recordings"


@pytest.mark.parametrize(("script", "name"), FEEDS_A_LAB.items())
def test_each_benchmark_that_feeds_a_lab_offers_publish_to_its_recording(script: str, name: str) -> None:
    text = (ROOT / "bench" / script).read_text()
    assert f'RECORDING = "{name}"' in text and '"--publish"' in text and "publish(" in text


def test_publish_refuses_a_smoke_run(capsys: pytest.CaptureFixture[str]) -> None:
    import large_batch_gpu

    with pytest.raises(SystemExit):
        large_batch_gpu.main(["--cpu-smoke", "--publish"])
    assert "--publish" in capsys.readouterr().err
