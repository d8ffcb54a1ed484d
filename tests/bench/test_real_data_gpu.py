"""bench/real_data_gpu.py: the runs are the labs' gpu settings on Fashion-MNIST, and its report quotes them."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("real_data_gpu", ROOT / "bench" / "real_data_gpu.py")
real_data_gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real_data_gpu)


def test_the_runs_are_the_labs_gpu_settings():
    from coursekit.labs import lab_settings

    lab04, lab02 = lab_settings("04", "gpu").base, lab_settings("02", "gpu").base
    runs = {label: args for _, label, args in real_data_gpu.RUNS}
    assert set(runs) == {"precision fp32", "precision bf16", "precision fp16", "batch 128", "batch 2048"}
    for args, base in ((runs["precision bf16"], lab04), (runs["batch 2048"], lab02)):
        values = dict(zip(args[::2], args[1::2], strict=False))
        assert values["--model"] == base.model and float(values["--lr"]) == base.lr
        assert int(values["--epochs"]) == base.epochs
        assert values["--schedule"] == base.schedule
        assert ("--device-data" in args) == base.device_data
    batches = lab_settings("02", "gpu").batch_sizes
    assert real_data_gpu.LAB02_BATCHES == (min(batches), max(batches))


def test_the_report_quotes_the_committed_record():
    record = json.loads((ROOT / "bench" / "results" / "real_data_gpu.json").read_text())
    text = real_data_gpu.report(record)
    for run in record["runs"]:
        assert f"| {run['lab']} | {run['label']} | {run['val_acc']:.3f} |" in text
    assert (ROOT / "bench" / "REPORT-real-data.md").read_text().startswith(text.split("\n## ")[0].rstrip("\n")[:200])
