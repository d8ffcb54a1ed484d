"""bench/large_batch_gpu.py --cpu-smoke and its report: the GPU command must work the first time it runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import large_batch_gpu  # noqa: E402

from coursekit.labs.lab07_large_batch import load_recorded  # noqa: E402

pytestmark = pytest.mark.xdist_group("large_batch_smoke")  # one worker: the smoke record below is made once


@pytest.fixture(scope="module")
def smoke_record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One --cpu-smoke run (about 25 s on 2 cores), shared by the tests below."""
    out = tmp_path_factory.mktemp("large-batch") / "large_batch_gpu.json"
    assert large_batch_gpu.main(["--cpu-smoke", "--out", str(out)]) == 0
    return out


def test_cpu_smoke_writes_the_record_the_report_and_what_the_notebook_reads(smoke_record: Path) -> None:
    out, tmp_path = smoke_record, smoke_record.parent
    result = json.loads(out.read_text())
    methods = len(result["methods"])
    assert len(result["runs"]) == methods * 2 * len(large_batch_gpu.SEEDS)
    assert all(c["seeds"] == len(large_batch_gpu.SEEDS) for c in result["cells"])
    assert [r["batch_size"] for r in result["throughput"]] == [result["small_batch"], result["large_batch"]]
    assert all(r["images_per_s"] > 0 for r in result["throughput"])  # the runs had timed windows
    report = (tmp_path / "REPORT-large-batch.md").read_text()
    assert "not a measurement" in report and "stand-in" in report and "not CIFAR-10's" in report
    table, where = load_recorded(out)
    assert len(table) == 2 * methods and "not CIFAR-10" in where


def test_without_a_gpu_the_real_run_refuses(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        return
    assert large_batch_gpu.main([]) == 2
    assert "--cpu-smoke" in capsys.readouterr().err


def test_report_of_a_cut_run_counts_seeds_against_the_plan_and_names_what_did_not_start() -> None:
    import report_large_batch

    record = json.loads((ROOT / "bench" / "results" / "large_batch_gpu.json").read_text())
    cut = {**record, "runs": [r for r in record["runs"] if not (r["method"] == "sgd" and r["seed"] == 2)],
           "throughput": []}
    cut["cells"] = [{**c, "seeds": 2, "completed": 2} if c["method"] == "sgd" else c for c in record["cells"]]
    text = report_large_batch.report_text(cut)
    planned = len(record["seeds"])
    assert f"| 2/{planned}, 2/{planned} |" in text
    assert f"sgd batch {record['small_batch']} seed 2; sgd batch {record['large_batch']} seed 2" in text
    assert "images/s |" not in text and "not measured" in text


def test_complete_keeps_an_earlier_records_runs_and_throughput_and_runs_the_rest(smoke_record: Path,
                                                                                 tmp_path: Path) -> None:
    record = json.loads(smoke_record.read_text())
    # a record whose time budget ran out: the last seed's runs of one method and the large batch's rate missing
    missing = [(r["method"], r["batch_size"], r["seed"]) for r in record["runs"]
               if r["method"] == "sgd" and r["seed"] == large_batch_gpu.SEEDS[-1]]
    cut = {**record, "runs": [r for r in record["runs"] if (r["method"], r["batch_size"], r["seed"]) not in missing],
           "throughput": record["throughput"][:1]}
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    whole = tmp_path / "whole.json"
    assert large_batch_gpu.main(["--cpu-smoke", "--complete", str(tmp_path / "cut.json"), "--out", str(whole)]) == 0
    second = json.loads(whole.read_text())
    assert second["completed_from"] == str(tmp_path / "cut.json") and "--complete" in second["command"]
    assert [r["batch_size"] for r in second["throughput"]] == [r["batch_size"] for r in record["throughput"]]
    assert second["throughput"][0] == record["throughput"][0]  # kept, not measured again
    kept = [r for r in second["runs"] if (r["method"], r["batch_size"], r["seed"]) not in missing]
    assert kept == cut["runs"] and len(second["runs"]) == len(record["runs"])  # only the missing ones ran
