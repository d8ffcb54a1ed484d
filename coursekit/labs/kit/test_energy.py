"""Energy beside speed: J/image and J/epoch from step records that carry energy, absent on CPUs."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import torch

from coursekit.labs.kit import energy
from coursekit.labs.kit.experiments import summarize_run
from coursekit.train.loop import Trainer
from coursekit.train.profiling import GpuMonitor

IMAGES_PER_EPOCH = 50_000


def _step(step: int, joules: float | None, images: int = 256) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "step", "step": step, "epoch": 1, "loss": 1.0, "images_per_s_global": 1000.0,
                              "data_time_s": 0.01, "compute_time_s": 0.1}
    if joules is not None:
        record.update(window_energy_j=joules, window_images=images)
    return record


def _run(joules: list[float | None]) -> list[dict[str, Any]]:
    records = [{"kind": "start", "config": {}}]
    records += [_step(10 * (i + 1), j) for i, j in enumerate(joules)]
    return [*records, {"kind": "summary", "status": "completed", "images_per_epoch": IMAGES_PER_EPOCH}]


def test_joules_per_image_over_the_timed_steps_only():
    """The first step record (warm-up) is left out, as for images/s: (60 + 66) J over 2 × 256 images."""
    row = summarize_run(_run([500.0, 60.0, 66.0]))
    assert row["energy_per_image_j"] == pytest.approx(126.0 / 512)
    assert row["energy_per_epoch_j"] == pytest.approx(126.0 / 512 * IMAGES_PER_EPOCH)
    assert energy.energy_columns([row]) == ["energy_per_image_j", "energy_per_epoch_j"]
    assert energy.energy_columns([row], per_epoch=False) == ["energy_per_image_j"]
    assert energy.energy_note([row]) == ""


def test_cpu_runs_have_no_energy_and_say_so():
    row = summarize_run(_run([None, None, None]))
    assert row["energy_per_image_j"] is None and row["energy_per_epoch_j"] is None
    assert energy.energy_columns([row]) == []
    assert "GPUs only" in energy.energy_note([row])


def test_a_record_without_energy_makes_the_figure_unknown_not_smaller():
    """One window without the counter would undercount the joules: no figure rather than a wrong one."""
    assert energy.energy_per_image([_step(20, 60.0), _step(30, None)]) is None
    assert energy.energy_per_image([_step(20, 0.0, images=0)]) is None
    assert energy.energy_figures([_step(20, 64.0)], None) == {"energy_per_image_j": 0.25, "energy_per_epoch_j": None}


class _FakeNvml:
    """pynvml's few calls: the energy counter in mJ rises by 1 J per read; utilisation 87 %, 250 W."""

    def __init__(self) -> None:
        self.energy_mj = 10_000.0

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> float:  # noqa: N802 - pynvml's name
        self.energy_mj += 1000.0
        return self.energy_mj

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:  # noqa: N802 - pynvml's name
        return type("Rates", (), {"gpu": 87})()

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> float:  # noqa: N802 - pynvml's name
        return 250_000.0


def test_monitor_gives_energy_since_start_and_the_latest_utilisation():
    monitor = GpuMonitor(torch.device("cpu"), interval_s=0.001)
    assert monitor.energy_j() is None and monitor.latest_util_pct() is None  # no CUDA: nothing, no error
    monitor._nvml, monitor._handle = _FakeNvml(), object()
    monitor.start()
    assert monitor.energy_j() == pytest.approx(1.0)
    for _ in range(1000):
        if monitor.latest_util_pct() is not None:
            break
        threading.Event().wait(0.001)
    assert monitor.latest_util_pct() == 87.0
    assert monitor.summary()["power_mean_w"] == pytest.approx(250.0)


def test_trainer_windows_split_the_energy_between_step_records():
    trainer = Trainer.__new__(Trainer)  # only the energy bookkeeping, no model
    trainer.gpu_monitor, trainer._energy_mark = None, None
    assert math.isnan(trainer._window_energy_j())
    readings = iter([5.0, 12.5])
    trainer.gpu_monitor = type("Monitor", (), {"energy_j": lambda self: next(readings)})()
    assert trainer._window_energy_j() == 5.0  # no window began yet: since the monitor started
    trainer._energy_mark = 5.0  # what _reset_window reads when the next window begins
    assert trainer._window_energy_j() == 7.5


class _CountingMonitor:
    """The engine's GpuMonitor as on a GPU with NVML: 2 J per read of the counter, 90 % busy."""

    def __init__(self, device: torch.device) -> None:
        self.joules = 0.0

    def start(self) -> _CountingMonitor:
        return self

    def energy_j(self) -> float:
        self.joules += 2.0
        return self.joules

    def latest_util_pct(self) -> float:
        return 90.0

    def summary(self) -> dict[str, float]:
        return {"gpu_util_mean_pct": 90.0, "energy_j": self.joules}


def test_engine_writes_energy_and_utilisation_where_the_monitor_measures(tmp_path, monkeypatch):
    """A real (tiny, CPU) run with the monitor of a GPU: each step record carries its window's joules
    and images, and the lab's row turns them into J/image and J/epoch."""
    from coursekit.metrics import read_metrics, steps
    from coursekit.train import engine
    from coursekit.train.config import TrainConfig

    monkeypatch.setattr(engine, "GpuMonitor", _CountingMonitor)
    engine.train(TrainConfig(dataset="generated", model="mlp", num_samples=64, image_size=8, batch_size=16,
                             num_classes=4, progress="off", epochs=1, log_every=1, out=str(tmp_path / "run")))
    records = read_metrics(tmp_path / "run")
    step_records = steps(records)
    assert all(r["window_energy_j"] == 2.0 and r["gpu_util_pct"] == 90.0 for r in step_records)
    images = [r["window_images"] for r in step_records]
    assert images == [16, 16, 16, 4]  # 52 training images (the rest validates): 3 full batches and 4
    train_images = records[-1]["images_per_epoch"]
    assert train_images == 52
    row = summarize_run(records)  # the first step record is left out (warm-up)
    assert row["energy_per_image_j"] == pytest.approx(2.0 * 3 / sum(images[1:]))
    assert row["energy_per_epoch_j"] == pytest.approx(row["energy_per_image_j"] * train_images)
