"""Measuring a run honestly without slowing it: step timing, torch.profiler traces, GPU power/utilisation.

``StepTimer`` splits wall time into *compute* (from "batch on the device" to "optimiser step done") and
*data wait* (everything else: waiting for the loader, host overhead). On a GPU it records two CUDA events
per step and synchronises only when a window is closed (when a metrics record is written), so the hot loop
never waits for the GPU; on a CPU it reads the clock.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

PROFILE_DIR = "profile"
TOP_OPERATORS_FILE = "top_operators.txt"
TOP_OPERATORS_ROWS = 25
TOP_OPERATORS_TITLE = "Top {rows} operators by self {device} time"  # rows: those the table shows
PROFILER_WAIT_STEPS = 1
PROFILER_WARMUP_STEPS = 1
NVML_SAMPLE_INTERVAL_S = 0.5
MILLIWATTS_PER_WATT = 1000.0
MILLIJOULES_PER_JOULE = 1000.0
MS_PER_S = 1000.0
MIB = 2**20
KINETO_QUIET = "5"


@dataclass
class WindowTimes:
    """Timing of the steps since the last record (seconds, totals over ``steps``)."""

    wall_s: float
    data_s: float
    compute_s: float
    steps: int
    cpu_s: float | None = None  # processor time this process got (CPU runs only): what a busy machine cannot inflate


class StepTimer:
    """Per-step data-wait vs compute time, closed in windows (one host sync per window on a GPU)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.begin_window()

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def begin_window(self) -> None:
        self._sync()
        self._start = time.perf_counter()
        self._cpu_start = time.process_time()
        self._steps = 0
        self._compute_host_s = 0.0

    def batch_ready(self) -> None:
        """The batch of this step is on the device (its copy enqueued)."""
        if self.cuda:
            if self._steps == len(self._events):
                self._events.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
            self._events[self._steps][0].record()
        else:
            self._ready = time.perf_counter()

    def step_done(self) -> None:
        if self.cuda:
            self._events[self._steps][1].record()
        else:
            self._compute_host_s += time.perf_counter() - self._ready
        self._steps += 1

    def end_window(self) -> WindowTimes:
        """Close the window (synchronising the GPU) and return its times; a new window begins."""
        self._sync()
        wall = time.perf_counter() - self._start
        if self.cuda:
            compute = sum(begin.elapsed_time(end) for begin, end in self._events[: self._steps]) / MS_PER_S
        else:
            compute = self._compute_host_s
        compute = min(compute, wall)
        cpu = None if self.cuda else time.process_time() - self._cpu_start
        times = WindowTimes(wall_s=wall, data_s=wall - compute, compute_s=compute, steps=self._steps, cpu_s=cpu)
        self.begin_window()
        return times


# ---------------------------------------------------------------- torch.profiler


def device_busy_s(averages: Any) -> float:
    """GPU time of the profiled kernels and copies (what torch's table prints as "Self CUDA time total")."""
    from torch.autograd import DeviceType

    busy_us = sum(getattr(e, "self_device_time_total", 0.0) for e in averages
                  if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False))
    return busy_us / 1e6


def top_operators_title(rows: int, cuda: bool) -> str:
    """The summary's first line: how many operators its table shows, ranked by self GPU or CPU time."""
    return TOP_OPERATORS_TITLE.format(rows=rows, device="GPU" if cuda else "CPU")


def write_top_operators(prof: torch.profiler.profile, path: Path, cuda: bool, profiled_wall_s: float | None) -> None:
    """A text table of the operators that took the most time, plus the GPU's busy share."""
    averages = prof.key_averages()
    sort_key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    try:
        table = averages.table(sort_by=sort_key, row_limit=TOP_OPERATORS_ROWS)
    except (AttributeError, KeyError, ValueError):
        table = averages.table(sort_by="self_cpu_time_total", row_limit=TOP_OPERATORS_ROWS)
    rows = min(TOP_OPERATORS_ROWS, len(averages))  # torch's table shows the first row_limit of them
    lines = [top_operators_title(rows, cuda), table]
    if cuda and profiled_wall_s:
        busy = min(device_busy_s(averages) / profiled_wall_s, 1.0)
        lines.append(f"GPU busy {100 * busy:.1f} % of the {profiled_wall_s:.4f} s of profiled steps "
                     f"(idle {100 * (1 - busy):.1f} %)")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class TraceRecorder:
    """A torch.profiler trace of ``active_steps`` optimiser steps (TensorBoard format in ``out/profile``)."""

    def __init__(self, run_dir: Path, active_steps: int, cuda: bool) -> None:
        self.folder = Path(run_dir) / PROFILE_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)  # no profiler chatter on stderr
        self.cuda = cuda
        self.summary_path = self.folder / TOP_OPERATORS_FILE
        self._wall_start: float | None = None
        self._profiled_wall_s: float | None = None
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._steps_seen = 0
        self._first_active = PROFILER_WAIT_STEPS + PROFILER_WARMUP_STEPS
        self._last_active = self._first_active + active_steps
        tensorboard = torch.profiler.tensorboard_trace_handler(str(self.folder))

        def on_ready(prof: torch.profiler.profile) -> None:
            tensorboard(prof)
            write_top_operators(prof, self.summary_path, cuda, self._profiled_wall_s)

        self.profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=PROFILER_WAIT_STEPS, warmup=PROFILER_WARMUP_STEPS,
                                             active=active_steps, repeat=1),
            on_trace_ready=on_ready)
        self.profiler.start()
        self.running = True

    def step(self) -> None:
        """Call after each optimiser step."""
        if not self.running:
            return
        self._steps_seen += 1
        if self._steps_seen == self._first_active:
            if self.cuda:
                torch.cuda.synchronize()
            self._wall_start = time.perf_counter()
        if self._steps_seen == self._last_active and self._wall_start is not None:
            if self.cuda:
                torch.cuda.synchronize()
            self._profiled_wall_s = time.perf_counter() - self._wall_start
        self.profiler.step()
        if self._steps_seen >= self._last_active:
            self.stop()

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.profiler.stop()


# ---------------------------------------------------------------- NVML (nvidia-ml-py)


class GpuMonitor:
    """Samples this rank's GPU utilisation and power in a thread; energy from the board's counter.

    Does nothing (``summary()`` returns {}) without CUDA or without ``pynvml`` (package nvidia-ml-py). With
    ``samples_path`` set before ``start()``, every sample is also appended there as one JSON line (``time``,
    ``util_pct``, ``mem_used_mib``, ``mem_total_mib``, ``power_w``: the board's, as nvitop shows them), so that a
    notebook can follow a running job (``coursekit.metrics.read_gpu_samples``, lab 10).
    """

    def __init__(self, device: torch.device, interval_s: float = NVML_SAMPLE_INTERVAL_S) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy_start: float | None = None
        self._latest_util: float | None = None  # the last sample, for the step records (the live queue view)
        self._interval_s = interval_s
        self.samples_path: Path | None = None  # where each sample goes as a JSON line (None: kept in memory only)
        self._samples_file: Any = None
        if device.type != "cuda":
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = self._find_handle(pynvml, device)
        except Exception:  # noqa: BLE001 - NVML missing or unusable: no GPU statistics
            self._nvml = None

    @staticmethod
    def _find_handle(pynvml: Any, device: torch.device) -> Any:
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else "GPU-" + text)
            except Exception:  # noqa: BLE001 - MIG or older driver: fall back to the index
                pass
        return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)

    def _read(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception:  # noqa: BLE001 - counter not supported on this board
            return None

    def start(self) -> GpuMonitor:
        if self._nvml is None:
            return self
        nvml, handle = self._nvml, self._handle
        self._energy_start = self._read(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        if self.samples_path is not None:
            self._samples_file = open(self.samples_path, "a", encoding="utf-8", buffering=1)

        def sample() -> None:
            while not self._stop.wait(self._interval_s):
                util = self._read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                power = self._read(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
                if util is not None:
                    self._latest_util = float(util)
                if util is not None and power is not None:
                    self._samples.append((float(util), power / MILLIWATTS_PER_WATT))
                if self._samples_file is not None:
                    self._write_sample(util, power, self._read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle)))

        self._thread = threading.Thread(target=sample, name="coursekit-nvml", daemon=True)
        self._thread.start()
        return self

    def _write_sample(self, util: Any, power: Any, memory: Any) -> None:
        """One line of ``samples_path``: what NVML answered now (None for a counter the board lacks)."""
        record = {"time": time.time(), "util_pct": None if util is None else float(util),
                  "mem_used_mib": None if memory is None else memory.used / MIB,
                  "mem_total_mib": None if memory is None else memory.total / MIB,
                  "power_w": None if power is None else power / MILLIWATTS_PER_WATT}
        try:
            self._samples_file.write(json.dumps(record) + "\n")
        except (OSError, ValueError):  # the disk is full, or the file was closed: the run goes on without it
            self._samples_file = None

    def latest_util_pct(self) -> float | None:
        """The GPU's utilisation (%) at the last sample; None without NVML or before the first sample."""
        return self._latest_util

    def energy_j(self) -> float | None:
        """Joules this GPU used since ``start()``, read from the board's counter now (None: not supported)."""
        if self._nvml is None or self._energy_start is None:
            return None
        now = self._read(lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        return None if now is None else (now - self._energy_start) / MILLIJOULES_PER_JOULE

    def summary(self) -> dict[str, float]:
        """Stop sampling; mean utilisation %, mean and peak power W, energy J (what the board supports)."""
        if self._nvml is None:
            return {}
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._samples_file is not None:
            self._samples_file.close()
            self._samples_file = None
        result: dict[str, float] = {}
        if self._samples:
            utils, powers = zip(*self._samples, strict=True)
            result.update(gpu_util_mean_pct=sum(utils) / len(utils), power_mean_w=sum(powers) / len(powers),
                          power_peak_w=max(powers))
        energy_end = self._read(lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        if self._energy_start is not None and energy_end is not None:
            result["energy_j"] = (energy_end - self._energy_start) / MILLIJOULES_PER_JOULE
        return result
