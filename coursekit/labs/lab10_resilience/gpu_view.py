"""What the GPU is doing while it trains: a live view of a running job's GPU, a starving loader against a better-fed
one.

The engine samples its GPU with NVML every 0.5 s while it trains (utilisation, memory in use, power: what nvitop
shows) into ``<run>/gpu_samples.jsonl`` (``coursekit.metrics.read_gpu_samples``). :func:`run_and_watch` submits
the lab's engine jobs one after the other on the same GPU (never side by side: they would share it) and redraws
one view from those files while each runs: three small charts (utilisation %, memory GiB, power W) with a line per
job, and each job's latest values. :func:`gpu_table` then gives, per job, the mean utilisation, the mean power, the
energy per image (from the engine's energy counter, ``labs.kit.energy``) and the images per second, all four over
the same steps: the measured windows of ``coursekit.metrics.measured_windows`` (the warm-up left out), so that
power / images per second = energy per image; and the peak memory of the whole run. :func:`gpu_claims` checks that
the better-fed loader keeps the GPU busier and spends less energy per image.

On a CPU there is no NVML and no sample: the view says what it would show on a GPU, and the claims are reported
as not checked here. Its text is the same on every CPU (no timing, no job id), so a stored notebook keeps it.
"""

from __future__ import annotations

import bisect
import html
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coursekit.labs.kit.claims import ClaimResult, check_claim
from coursekit.labs.kit.energy import energy_per_image
from coursekit.labs.kit.experiments import engine_command
from coursekit.labs.kit.results import ResultsTable
from coursekit.metrics import measured_windows, read_gpu_samples, read_metrics, steps, throughput
from coursekit.train.config import TrainConfig

# the two jobs: a loader without workers, one with them (better fed, not fed: on an H200 its 8 workers resizing
# images on the CPU still leave the GPU waiting about half the time)
STARVING, FED = "starving", "better-fed"
REFRESH_S = 1.0  # the view is redrawn this often (the engine samples every 0.5 s: train/profiling.py)
MIB_PER_GIB = 1024.0
# The better-fed job's mean utilisation over its measured steps exceeds the starving one's by at least UTIL_MARGIN_PCT
# points and by UTIL_STANDARD_ERRORS standard errors of the difference (samples' spread / sqrt(n)). Measured on an
# H200 (ResNet-50, Fashion-MNIST at 224 px, 300 steps, 16 cores): 28 % busy without workers, 50 % with 8, +22
# points with a standard error of 4.9; a loader that changed nothing differs by a few points.
UTIL_MARGIN_PCT, UTIL_STANDARD_ERRORS = 10.0, 3.0
# The starving job's energy per image exceeds the better-fed one's by at least ENERGY_EXCESS (a relative excess): an idle
# H200 still draws ~120 W, spread over fewer images per second (measured: 0.181 against 0.142 J/image, +27 %;
# ResNet-18 in the same setting: +32 %).
ENERGY_EXCESS = 0.1
CHART_WIDTH, CHART_HEIGHT, CHART_MARGIN = 260, 110, 4  # pixels of one chart of the view
COLOURS = ("#d1242f", "#0969da", "#8250df", "#1a7f37")  # one per job, in submission order
CHARTS = (("util_pct", "GPU utilisation (%)", 1.0), ("mem_used_mib", "memory in use (GiB)", 1 / MIB_PER_GIB),
          ("power_w", "power (W)", 1.0))
NO_GPU_TEXT = ("No GPU samples: these jobs ran on a CPU, where NVML has nothing to measure. On a GPU this view "
               "draws, while each job runs, its GPU's utilisation (the share of time a kernel was running), the "
               "memory in use and the power, every 0.5 s, one line per job: the starving loader's GPU mostly idle "
               "near its idle power, the better-fed one's busier and drawing more watts, yet less energy per image.")
NO_GPU_WHY = "no GPU samples in these runs: NVML measures a GPU, and these jobs ran on a CPU"


@dataclass
class WatchedJob:
    """One job of the view: its label, configuration and handle (None until submitted)."""

    label: str
    config: TrainConfig
    job: Any = None

    def samples(self) -> list[dict[str, Any]]:
        return read_gpu_samples(self.job.run_dir) if self.job is not None else []

    def records(self) -> list[dict[str, Any]]:
        return read_metrics(self.job.run_dir) if self.job is not None else []


# ----------------------------------------------------------------- figures of one run


def measured_spans(records: Sequence[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) in Unix seconds of each measured step window (``coursekit.metrics.measured_windows``: the
    warm-up left out), in time order; [] before the first measured step record. Every column of :func:`gpu_table`
    but the peak memory covers these spans and nothing else."""
    spans = []
    for window in measured_windows(steps(records)):
        seconds = window.get("window_time_s")
        if isinstance(seconds, (int, float)) and seconds > 0 and isinstance(window.get("time"), (int, float)):
            spans.append((window["time"] - seconds, window["time"]))
    return sorted(spans)


def samples_in(samples: Sequence[dict[str, Any]], spans: Sequence[tuple[float, float]]) -> list[dict[str, Any]]:
    """The samples taken within any of ``spans`` (sorted, as :func:`measured_spans` gives them)."""
    starts = [start for start, _ in spans]
    inside = []
    for sample in samples:
        at = sample.get("time")
        if not isinstance(at, (int, float)):
            continue
        index = bisect.bisect_right(starts, at) - 1  # the last span that starts at or before the sample
        if index >= 0 and at <= spans[index][1]:
            inside.append(sample)
    return inside


def _values(samples: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(s[key]) for s in samples if isinstance(s.get(key), (int, float))]


def gpu_figures(samples: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One run's figures over its measured step windows (:func:`measured_spans`): mean utilisation % (± its standard
    error) of the NVML samples taken in them; mean power W = the energy counter's joules in them over their seconds
    (the samples' mean power there on a board without the counter); energy per image J; images/s. Power / images
    per second is then the energy per image. Peak memory in use: MiB, whole run. None where not measured."""
    timed = measured_windows(steps(records))
    during = samples_in(samples, measured_spans(records))
    util, sampled_power = _values(during, "util_pct"), _values(during, "power_w")
    memory = _values(samples, "mem_used_mib")
    per_image = energy_per_image(timed)
    rate = throughput(timed)[0]  # images / wall time over the same windows: the one definition (coursekit/metrics.py)
    if per_image is not None and rate is not None:
        power = per_image * rate  # the counter's joules over the windows' seconds
    else:
        power = statistics.fmean(sampled_power) if sampled_power else None
    return {
        "samples": len(during),
        "util_mean_pct": statistics.fmean(util) if util else None,
        "util_se_pct": statistics.stdev(util) / math.sqrt(len(util)) if len(util) > 1 else None,
        "mem_peak_mib": max(memory) if memory else None,
        "power_mean_w": power,
        "energy_per_image_j": per_image,
        "images_per_s": rate,
    }


def gpu_table(watched: Sequence[WatchedJob]) -> ResultsTable:
    """One row per job: its loader, mean utilisation, peak memory, mean power, energy per image (see gpu_figures)."""
    rows = []
    for item in watched:
        figures = gpu_figures(item.samples(), item.records())
        rows.append({"job": item.label, "loader": loader_text(item.config), **figures})
    return ResultsTable(rows, columns=["job", "loader", "util_mean_pct", "mem_peak_mib", "power_mean_w",
                                       "energy_per_image_j", "images_per_s"],
                        title="the GPU while each job trained (NVML samples and energy counter)")


def loader_text(config: TrainConfig) -> str:
    """The loader options of a configuration in words: ``workers=8 +pin +persistent +prefetch4``."""
    parts = [f"workers={config.workers}"]
    for name, short in (("pin_memory", "pin"), ("non_blocking", "non_blocking"), ("persistent_workers", "persistent")):
        if getattr(config, name):
            parts.append("+" + short)
    if config.prefetch_factor:
        parts.append(f"+prefetch{config.prefetch_factor}")
    return " ".join(parts)


# ----------------------------------------------------------------- the claims


def gpu_claims(table: ResultsTable | None, starving: str = STARVING, fed: str = FED) -> dict[str, ClaimResult]:
    """The better-fed job keeps the GPU busier and spends less energy per image than the starving one (thresholds
    above); not checked where a job has no GPU samples or no energy counter (a CPU), or where no job ran (``table``
    None)."""
    rows = {row["job"]: row for row in table} if table is not None else {}
    for label in (starving, fed) if table is not None else ():
        if label not in rows:
            raise ValueError(f"table has no job {label!r}; its jobs are {sorted(rows)}: pass starving= and fed=")
    slow, quick = rows.get(starving, {}), rows.get(fed, {})
    measured = table is not None and all(r.get(k) is not None for r in (slow, quick)
                                         for k in ("util_mean_pct", "energy_per_image_j"))
    results: dict[str, ClaimResult] = {}
    if not measured:
        for name, statement in (("busier", busier_statement()), ("energy", energy_statement())):
            results[name] = check_claim(statement, False, "", applies=False, why_not=NO_GPU_WHY)
        return results
    gap = quick["util_mean_pct"] - slow["util_mean_pct"]
    se = math.hypot(slow.get("util_se_pct") or 0.0, quick.get("util_se_pct") or 0.0)
    results["busier"] = check_claim(
        busier_statement(), gap >= UTIL_MARGIN_PCT and gap >= UTIL_STANDARD_ERRORS * se,
        f"mean utilisation {quick['util_mean_pct']:.0f} % ({fed}) against {slow['util_mean_pct']:.0f} % ({starving}): "
        f"{gap:+.0f} points, standard error {se:.1f}")
    excess = slow["energy_per_image_j"] / quick["energy_per_image_j"] - 1 if quick["energy_per_image_j"] > 0 else -1
    results["energy"] = check_claim(
        energy_statement(), excess >= ENERGY_EXCESS,
        f"{slow['energy_per_image_j']:.3g} J/image ({starving}) against {quick['energy_per_image_j']:.3g} ({fed}): "
        f"{100 * excess:+.0f} %")
    return results


def busier_statement() -> str:
    return (f"the better-fed loader keeps the GPU busier: its mean utilisation while training exceeds the starving "
            f"one's by {UTIL_MARGIN_PCT:.0f} points and {UTIL_STANDARD_ERRORS:.0f} standard errors or more")


def energy_statement() -> str:
    return (f"the starving loader spends more energy per image: at least {100 * ENERGY_EXCESS:.0f} % more than the "
            "better-fed one (an idle GPU still draws power)")


# ----------------------------------------------------------------- the view


def _chart(series: Sequence[tuple[str, list[tuple[float, float]]]], title: str, top: float | None) -> str:
    """One SVG chart: a polyline per job, x = seconds since that job's first sample, y from 0 to ``top``."""
    points = [p for _, line in series for p in line]
    x_max = max((x for x, _ in points), default=1.0) or 1.0
    y_max = top or max((y for _, y in points), default=1.0) * 1.1 or 1.0
    width, height, margin = CHART_WIDTH, CHART_HEIGHT, CHART_MARGIN
    lines = []
    for index, (_, line) in enumerate(series):
        coords = " ".join(f"{margin + (width - 2 * margin) * x / x_max:.1f},"
                          f"{height - margin - (height - 2 * margin) * min(y, y_max) / y_max:.1f}" for x, y in line)
        lines.append(f"<polyline fill='none' stroke='{COLOURS[index % len(COLOURS)]}' stroke-width='1.5' "
                     f"points='{coords}'/>")
    return (f"<div style='display:inline-block;margin-right:12px'><div style='font-size:85%'>{html.escape(title)} "
            f"<span style='color:#57606a'>(0–{y_max:.0f}, {x_max:.0f} s)</span></div>"
            f"<svg width='{width}' height='{height}' style='border:1px solid #d0d7de'>{''.join(lines)}</svg></div>")


def render_view(watched: Sequence[WatchedJob], states: Mapping[str, str] | None = None) -> str:
    """The view's HTML: the three charts and a line per job (a running job's latest sample, an ended job's figures
    over its measured steps as in :func:`gpu_table`, its state); the fixed NO_GPU_TEXT when
    no job has a sample (a CPU). ``states``: each label's job state (shown in the lines)."""
    states = states or {}
    samples = {item.label: item.samples() for item in watched}
    if not any(samples.values()):
        started = [item.label for item in watched if item.job is not None]
        ended = all(states.get(label) for label in started) and len(started) == len(watched)
        head = "the jobs have ended." if ended else "waiting for the jobs' samples..."
        return f"<p><b>GPU view</b>: {html.escape(head)}</p><p>{html.escape(NO_GPU_TEXT)}</p>"
    charts = []
    for key, title, scale in CHARTS:
        series = []
        for item in watched:
            runs = samples[item.label]
            start = runs[0]["time"] if runs else 0.0
            series.append((item.label, [(s["time"] - start, float(s[key]) * scale) for s in runs
                                        if isinstance(s.get(key), (int, float))]))
        total = _memory_total_gib(samples) if key == "mem_used_mib" else None
        charts.append(_chart(series, f"{title[:-1]} of {total:.0f})" if total else title,
                             100.0 if key == "util_pct" else None))
    legend = []
    for index, item in enumerate(watched):
        runs = samples[item.label]
        last = runs[-1] if runs else {}
        if states.get(item.label) and runs:  # ended: the table's figures, not the last sample
            fig = gpu_figures(runs, item.records())
            now = (f"over its measured steps {_number(fig['util_mean_pct'], '.0f')} % busy, "
                   f"{_number(fig['power_mean_w'], '.0f')} W; peak "
                   f"{_number((fig['mem_peak_mib'] or 0) / MIB_PER_GIB, '.1f')} GiB")
        else:
            now = (f"now {_number(last.get('util_pct'), '.0f')} % busy, "
                   f"{_number((last.get('mem_used_mib') or 0) / MIB_PER_GIB if last else None, '.1f')} GiB, "
                   f"{_number(last.get('power_w'), '.0f')} W" if last else "no sample yet")
        state = states.get(item.label) or ("running" if item.job is not None else "waiting to be submitted")
        legend.append(f"<div><span style='color:{COLOURS[index % len(COLOURS)]}'>&#9632;</span> "
                      f"<b>{html.escape(item.label)}</b> ({html.escape(loader_text(item.config))}): "
                      f"{html.escape(now)} — {html.escape(state.lower())}, {len(runs)} samples</div>")
    return "<div><b>GPU view</b> (NVML inside each job, every 0.5 s)</div>" + "".join(charts) + "".join(legend)


def _memory_total_gib(samples: Mapping[str, list[dict[str, Any]]]) -> float | None:
    totals = [s["mem_total_mib"] for runs in samples.values() for s in runs if s.get("mem_total_mib")]
    return max(totals) / MIB_PER_GIB if totals else None


def _number(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def render_text(watched: Sequence[WatchedJob]) -> str:
    """The view in plain text (a terminal, a test): the table's figures per job, or NO_GPU_TEXT on a CPU."""
    if not any(item.samples() for item in watched):
        return NO_GPU_TEXT
    return str(gpu_table(watched))


class _View:
    """An HTML widget in a notebook (redrawn in place), nothing elsewhere (the text is printed at the end)."""

    def __init__(self) -> None:
        from coursekit.jobs.queue_view import in_kernel

        self.widget = None
        if in_kernel():
            import ipywidgets
            from IPython.display import display

            self.widget = ipywidgets.HTML(value="<p><b>GPU view</b>: submitting...</p>")
            display(self.widget)

    def show(self, watched: Sequence[WatchedJob], states: Mapping[str, str]) -> None:
        if self.widget is not None:
            self.widget.value = render_view(watched, states)


def run_and_watch(configs: Mapping[str, TrainConfig], *, name: str = "gpu-view", refresh_s: float = REFRESH_S,
                  timeout_s: float = 600.0, **submit_options: Any) -> list[WatchedJob]:
    """Submit one engine job per configuration (label -> config), each after the previous one ended, and redraw the
    view every ``refresh_s`` while they run; the watched jobs, in order. ``submit_options`` go to ``submit_jobs``
    (the lab's ``s.job``). RuntimeError naming the job when one fails; TimeoutError after ``timeout_s`` in all."""
    from coursekit.jobs import submit_jobs

    if not configs:
        raise ValueError("configs is empty: give {label: TrainConfig}, e.g. {'starving': ..., 'better-fed': ...}")
    if isinstance(refresh_s, bool) or not isinstance(refresh_s, (int, float)) or refresh_s <= 0:
        raise ValueError(f"refresh_s={refresh_s!r}: give the view's refresh period in seconds, a number > 0")
    watched = [WatchedJob(label, config) for label, config in configs.items()]
    view, states = _View(), {}
    deadline = time.monotonic() + timeout_s
    for item in watched:  # one after the other: side by side they would share the GPU
        (item.job,) = submit_jobs(engine_command(item.config), n_gpu=1, name=f"{name}-{item.label}",
                                  **submit_options)
        while not item.job.done():
            view.show(watched, states)
            if time.monotonic() > deadline:
                item.job.cancel()
                raise TimeoutError(f"job {item.label!r} ({item.job.job_id}) still runs after the {timeout_s:.0f} s "
                                   "given to all the jobs; give a larger timeout_s")
            time.sleep(refresh_s)
        states[item.label] = item.job.state
        view.show(watched, states)
        if states[item.label] != "COMPLETED":
            raise RuntimeError(f"job {item.label!r} ({item.job.job_id}) ended {states[item.label]}; last lines of "
                               f"its stderr:\n{item.job.tail(10, stream='err')}")
    if view.widget is None:
        print(render_text(watched))
    return watched


def loader_configs(base: TrainConfig, loaders: Mapping[str, Mapping[str, Any]]) -> dict[str, TrainConfig]:
    """``base`` with each label's loader options (``{"starving": {"workers": 0}, "better-fed": {"workers": 8, ...}}``)."""
    if not loaders:
        raise ValueError("loaders is empty: give {label: loader options}, e.g. {'starving': {'workers': 0}}")
    return {label: base.replace(**dict(options)) for label, options in loaders.items()}
