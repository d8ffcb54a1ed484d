"""Lab 10's GPU view: figures from planted samples, the claims failing on planted runs, the view's text on a CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coursekit.labs.kit.claims import ClaimResult
from coursekit.labs.lab10_resilience import gpu_view as gv
from coursekit.metrics import GPU_SAMPLES_FILE, METRICS_FILE, WARMUP_STEPS
from coursekit.train.config import TrainConfig

BASE = TrainConfig(dataset="generated", model="mlp", num_samples=64, image_size=8, batch_size=16, progress="off")
LOADERS = {gv.STARVING: {"workers": 0}, gv.FED: {"workers": 8, "pin_memory": True, "persistent_workers": True,
                                                  "prefetch_factor": 4}}
T0 = 1_000.0  # the planted runs' clock


class _Job:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.job_id, self.state = run_dir, "1", "COMPLETED"


def _plant(folder: Path, utils: list[float], power_w: float, joules_per_image: float | None, step_s: float = 0.5,
           warmup_util: float | None = None, warmup_power_w: float | None = None) -> Path:
    """A run: 2 s of start-up at 0 % and 60 W, then one sample every 0.5 s during the steps (one record a step).

    Each step trains the images that cost ``joules_per_image`` at ``power_w``, and its record's energy is what the
    counter reads over it: ``power_w`` x ``step_s``. ``warmup_util`` / ``warmup_power_w``: the samples and the
    energy of the warm-up steps (the first WARMUP_STEPS), where they differ from the rest."""
    folder.mkdir(parents=True)
    start = T0 + 2.0
    images_per_step = power_w * step_s / joules_per_image if joules_per_image else 100.0
    warm = [i < WARMUP_STEPS for i in range(len(utils))]
    samples = [{"time": T0 + 0.5 * i, "util_pct": 0.0, "mem_used_mib": 500.0, "mem_total_mib": 8192.0,
                "power_w": 60.0} for i in range(4)]
    samples += [{"time": start + step_s * i + step_s / 2,
                 "util_pct": warmup_util if warm[i] and warmup_util is not None else u,
                 "mem_used_mib": 3000.0 + i, "mem_total_mib": 8192.0,
                 "power_w": warmup_power_w if warm[i] and warmup_power_w is not None else power_w}
                for i, u in enumerate(utils)]
    records: list[dict[str, Any]] = [{"kind": "start", "time": T0}]
    for i in range(len(utils)):
        record = {"kind": "step", "time": start + step_s * (i + 1), "step": i + 1, "window_steps": 1,
                  "window_time_s": step_s, "images_per_s_global": images_per_step / step_s}
        if joules_per_image is not None:
            watts = warmup_power_w if warm[i] and warmup_power_w is not None else power_w
            record.update(window_energy_j=watts * step_s, window_images=images_per_step)
        records.append(record)
    records.append({"kind": "summary", "time": start + step_s * len(utils) + 0.1, "status": "completed"})
    (folder / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / GPU_SAMPLES_FILE).write_text("".join(json.dumps(s) + "\n" for s in samples))
    return folder


def _watched(tmp_path: Path, starving: dict[str, Any], fed: dict[str, Any]) -> list[gv.WatchedJob]:
    configs = gv.loader_configs(BASE, LOADERS)
    return [gv.WatchedJob(gv.STARVING, configs[gv.STARVING], _Job(_plant(tmp_path / "s", **starving))),
            gv.WatchedJob(gv.FED, configs[gv.FED], _Job(_plant(tmp_path / "f", **fed)))]


# a better-fed loader that helps: ~20 % busy against ~65 %, 0.078 against 0.055 J/image (ResNet-18 on an H200)
STARVING_RUN = {"utils": [0.0, 40.0, 10.0, 30.0, 20.0, 0.0, 35.0, 25.0, 15.0, 25.0] * 3, "power_w": 190.0,
                "joules_per_image": 0.078}
FED_RUN = {"utils": [60.0, 70.0, 75.0, 55.0, 65.0, 70.0, 60.0, 65.0, 70.0, 60.0] * 3, "power_w": 380.0,
           "joules_per_image": 0.055}


def test_figures_leave_out_the_start_up_and_read_every_column(tmp_path: Path) -> None:
    table = gv.gpu_table(_watched(tmp_path, STARVING_RUN, FED_RUN))
    starving, fed = table.one(job=gv.STARVING), table.one(job=gv.FED)
    # the 4 start-up samples (0 %, 60 W) are outside the steps, the 5 of the warm-up steps outside the measured ones
    assert starving["samples"] == 30 - WARMUP_STEPS
    assert starving["util_mean_pct"] == pytest.approx(20.0) and fed["util_mean_pct"] == pytest.approx(65.0)
    assert fed["power_mean_w"] == pytest.approx(380.0) and fed["mem_peak_mib"] == pytest.approx(3029.0)
    assert fed["energy_per_image_j"] == pytest.approx(0.055)
    assert fed["loader"] == "workers=8 +pin +persistent +prefetch4" and starving["loader"] == "workers=0"
    assert fed["images_per_s"] == pytest.approx(380.0 / 0.055)


def test_every_column_covers_the_same_measured_steps(tmp_path: Path) -> None:
    """Planted: warm-up steps at 5 % and 120 W, then 380 W and 65 %. Power / images per second must be the energy
    per image, and the mean utilisation that of the measured steps only: averaged over the warm-up too, the power
    would read 337 W (0.049 J/image at this throughput against the 0.055 counted)."""
    run = {**FED_RUN, "warmup_util": 5.0, "warmup_power_w": 120.0}
    fed = gv.gpu_table(_watched(tmp_path, STARVING_RUN, run)).one(job=gv.FED)
    assert fed["power_mean_w"] / fed["images_per_s"] == pytest.approx(fed["energy_per_image_j"], rel=1e-6)
    assert fed["energy_per_image_j"] == pytest.approx(0.055) and fed["power_mean_w"] == pytest.approx(380.0)
    assert fed["util_mean_pct"] == pytest.approx(65.0) and fed["samples"] == 30 - WARMUP_STEPS


def test_power_comes_from_the_samples_of_the_same_steps_without_an_energy_counter(tmp_path: Path) -> None:
    """A board without the energy counter: the samples' mean power over the measured steps, the warm-up left out."""
    run = {**FED_RUN, "joules_per_image": None, "warmup_power_w": 120.0}
    fed = gv.gpu_table(_watched(tmp_path, STARVING_RUN, run)).one(job=gv.FED)
    assert fed["energy_per_image_j"] is None and fed["power_mean_w"] == pytest.approx(380.0)
    assert fed["images_per_s"] == pytest.approx(200.0)  # the records' 100 images a 0.5 s step: no counter needed


def test_claims_hold_on_a_fed_loader_that_keeps_the_gpu_busy(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = gv.gpu_claims(gv.gpu_table(_watched(tmp_path, STARVING_RUN, FED_RUN)))
    assert all(r.holds for r in results.values())


def test_busier_claim_fails_when_the_fed_loader_changed_nothing(tmp_path: Path) -> None:
    """Planted: the fed run as busy as the starving one plus 8 points (a loader that did not help: under 10)."""
    same = {**FED_RUN, "utils": [u + 8.0 for u in STARVING_RUN["utils"]]}
    with pytest.raises(AssertionError, match="keeps the GPU busier"):
        gv.gpu_claims(gv.gpu_table(_watched(tmp_path, STARVING_RUN, same)))


def test_busier_claim_fails_within_its_noise(tmp_path: Path) -> None:
    """Planted: a 20-point gap in means but samples swinging 0-100 %: fewer than 3 standard errors."""
    noisy = {**FED_RUN, "utils": [0.0, 100.0, 0.0, 100.0, 20.0]}
    short = {**STARVING_RUN, "utils": [0.0, 100.0, 0.0, 0.0, 0.0]}
    with pytest.raises(AssertionError, match="standard error"):
        gv.gpu_claims(gv.gpu_table(_watched(tmp_path, short, noisy)))


def test_energy_claim_fails_when_the_fed_loader_spends_as_much_per_image(tmp_path: Path) -> None:
    costly = {**FED_RUN, "joules_per_image": 0.074}  # 0.078 / 0.074: +5 %, under the 10 % asked
    with pytest.raises(AssertionError, match="energy per image"):
        gv.gpu_claims(gv.gpu_table(_watched(tmp_path, STARVING_RUN, costly)))


def test_on_a_cpu_the_claims_are_not_checked_and_the_view_says_what_it_would_show(tmp_path: Path) -> None:
    configs = gv.loader_configs(BASE, LOADERS)
    watched = []
    for label in (gv.STARVING, gv.FED):
        folder = tmp_path / label
        folder.mkdir()
        (folder / METRICS_FILE).write_text(json.dumps({"kind": "step", "time": T0, "step": 1}) + "\n")
        watched.append(gv.WatchedJob(label, configs[label], _Job(folder)))
    results = gv.gpu_claims(gv.gpu_table(watched))
    assert all(isinstance(r, ClaimResult) and r.holds is None for r in results.values())
    done = gv.render_view(watched, {gv.STARVING: "COMPLETED", gv.FED: "COMPLETED"})
    assert "the jobs have ended" in done and "GPU&#x27;s utilisation" in done and "<svg" not in done
    assert gv.render_text(watched) == gv.NO_GPU_TEXT


def test_the_view_draws_a_line_per_job_and_chart(tmp_path: Path) -> None:
    page = gv.render_view(_watched(tmp_path, STARVING_RUN, FED_RUN), {gv.STARVING: "COMPLETED"})
    assert page.count("<svg") == 3 and page.count("<polyline") == 6
    assert "completed" in page and "running" in page and "380 W" in page


def test_an_ended_jobs_line_shows_the_tables_means_not_its_last_sample(tmp_path: Path) -> None:
    """The fed run's last sample reads 60 % busy; its measured steps average 65 %, which the table shows."""
    watched = _watched(tmp_path, STARVING_RUN, FED_RUN)
    running = gv.render_view(watched, {gv.STARVING: "COMPLETED"})
    assert "now 60 % busy" in running and "over its measured steps 20 % busy, 190 W" in running
    ended = gv.render_view(watched, {gv.STARVING: "COMPLETED", gv.FED: "COMPLETED"})
    assert "over its measured steps 65 % busy, 380 W" in ended and "now " not in ended


def test_bad_arguments_name_the_parameter(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="starving="):
        gv.gpu_claims(gv.gpu_table(_watched(tmp_path, STARVING_RUN, FED_RUN)), starving="slow")
    with pytest.raises(ValueError, match="refresh_s"):
        gv.run_and_watch(gv.loader_configs(BASE, LOADERS), refresh_s=0)
    with pytest.raises(ValueError, match="configs is empty"):
        gv.run_and_watch({})
    with pytest.raises(ValueError, match="loaders is empty"):
        gv.loader_configs(BASE, {})


def test_jobs_run_one_after_the_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    """The second job is submitted only once the first has ended (they would share the GPU)."""
    import coursekit.jobs

    events: list[str] = []

    class FakeJob(_Job):
        def __init__(self, label: str) -> None:
            super().__init__(_plant(tmp_path / label, **(FED_RUN if label == gv.FED else STARVING_RUN)))
            self.label, self.polls = label, 0

        def done(self) -> bool:
            self.polls += 1
            if self.polls == 2:
                events.append(f"end {self.label}")
            return self.polls >= 2

    def submit_jobs(command: str, n_gpu: int, name: str, **options: Any) -> list[FakeJob]:
        label = name.removeprefix("gv-")
        events.append(f"submit {label}")
        return [FakeJob(label)]

    monkeypatch.setattr(coursekit.jobs, "submit_jobs", submit_jobs)
    watched = gv.run_and_watch(gv.loader_configs(BASE, LOADERS), name="gv", refresh_s=0.001)
    assert events == ["submit starving", "end starving", f"submit {gv.FED}", f"end {gv.FED}"]
    assert [w.label for w in watched] == [gv.STARVING, gv.FED]
    assert "workers=8" in capsys.readouterr().out  # outside a notebook: the table, printed at the end


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_the_settings_label_the_jobs_as_the_claims_name_them(profile: str) -> None:
    from coursekit.labs.lab10_resilience.settings import settings

    assert list(settings(profile)["gpu_view_loaders"]) == [gv.STARVING, gv.FED] == ["starving", "better-fed"]
