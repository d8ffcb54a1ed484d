"""The engine's GPU samples file (``<run>/gpu_samples.jsonl``) and the environment its summary records (lab 10)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from coursekit.metrics import GPU_SAMPLES_FILE, read_gpu_samples, read_metrics, summary
from coursekit.train import engine
from coursekit.train.config import TrainConfig
from coursekit.train.profiling import GpuMonitor
from coursekit.train.report import system_info


class _FakeNvml:
    """pynvml's calls the monitor makes, answering as a busy board would: 87 %, 250 W, 3 of 8 GiB in use."""

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> float:  # noqa: N802 - pynvml's name
        return 10_000.0

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:  # noqa: N802 - pynvml's name
        return type("Rates", (), {"gpu": 87})()

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> float:  # noqa: N802 - pynvml's name
        return 250_000.0

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # noqa: N802 - pynvml's name
        return type("Memory", (), {"used": 3 * 2**30, "total": 8 * 2**30})()


def _gpu_like_monitor(device: torch.device) -> GpuMonitor:
    monitor = GpuMonitor(device, interval_s=0.005)
    monitor._nvml, monitor._handle = _FakeNvml(), object()
    return monitor


def _wait_for_lines(path: Path, count: int) -> None:
    for _ in range(2000):
        if len(read_gpu_samples(path.parent)) >= count:
            return
        threading.Event().wait(0.005)


def test_monitor_appends_every_sample_to_the_samples_file(tmp_path: Path) -> None:
    monitor = _gpu_like_monitor(torch.device("cpu"))
    monitor.samples_path = tmp_path / GPU_SAMPLES_FILE
    monitor.start()
    _wait_for_lines(monitor.samples_path, 3)
    monitor.summary()  # stops the thread and closes the file
    samples = read_gpu_samples(tmp_path)
    assert len(samples) >= 3
    assert samples[0]["util_pct"] == 87.0 and samples[0]["power_w"] == 250.0
    assert samples[0]["mem_used_mib"] == 3 * 1024 and samples[0]["mem_total_mib"] == 8 * 1024
    assert samples == sorted(samples, key=lambda s: s["time"])
    count = len(samples)
    threading.Event().wait(0.05)
    assert len(read_gpu_samples(tmp_path)) == count  # nothing after summary()


def test_a_cpu_monitor_writes_no_samples_file(tmp_path: Path) -> None:
    monitor = GpuMonitor(torch.device("cpu"))
    monitor.samples_path = tmp_path / GPU_SAMPLES_FILE
    monitor.start()
    assert monitor.summary() == {}
    assert not (tmp_path / GPU_SAMPLES_FILE).exists() and read_gpu_samples(tmp_path) == []


def test_the_engine_writes_the_samples_beside_its_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real (tiny, CPU) run whose monitor answers as NVML would: the run folder gets gpu_samples.jsonl."""
    monkeypatch.setattr(engine, "GpuMonitor", _gpu_like_monitor)
    engine.train(TrainConfig(dataset="generated", model="mlp", num_samples=64, image_size=8, batch_size=16,
                             num_classes=4, progress="off", epochs=1, out=str(tmp_path / "run")))
    assert summary(read_metrics(tmp_path / "run"))["status"] == "completed"
    assert (tmp_path / "run" / GPU_SAMPLES_FILE).exists()
    assert all(s["util_pct"] == 87.0 for s in read_gpu_samples(tmp_path / "run"))


def test_system_info_names_the_python_and_the_container(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER"):
        monkeypatch.delenv(name, raising=False)
    info = system_info(torch.device("cpu"))
    assert info["python_executable"] == sys.executable and info["container"] is None
    monkeypatch.setenv("SINGULARITY_CONTAINER", "/images/coursekit.sif")
    assert system_info(torch.device("cpu"))["container"] == "/images/coursekit.sif"


def test_a_window_counts_the_joules_of_its_steps_not_the_evaluation_between_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The board's counter jumps by 1 MJ during each evaluation: no step window may carry that jump (its time and
    images do not include the evaluation's)."""
    jump = 1e6
    counter = {"mj": 0.0}

    class _CountingNvml(_FakeNvml):
        def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> float:  # noqa: N802 - pynvml's name
            counter["mj"] += 1_000.0  # 1 J per read: every window uses a little
            return counter["mj"]

    def monitor(device: torch.device) -> GpuMonitor:
        made = GpuMonitor(device, interval_s=0.005)
        made._nvml, made._handle = _CountingNvml(), object()
        return made

    evaluate = engine.Trainer.evaluate

    def evaluate_with_a_jump(self: Any, *args: Any, **kwargs: Any) -> Any:
        counter["mj"] += jump * 1_000.0
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(engine, "GpuMonitor", monitor)
    monkeypatch.setattr(engine.Trainer, "evaluate", evaluate_with_a_jump)
    engine.train(TrainConfig(dataset="generated", model="mlp", num_samples=64, image_size=8, batch_size=16,
                             num_classes=4, progress="off", epochs=3, log_every=2, out=str(tmp_path / "run")))
    steps = [r for r in read_metrics(tmp_path / "run") if r.get("kind", r.get("type")) == "step"]
    energies = [r["window_energy_j"] for r in steps if "window_energy_j" in r]
    assert len(energies) >= 5, steps
    assert counter["mj"] > 2 * jump * 1_000.0, "the evaluations did not run"
    assert max(energies) < jump, energies
