"""Lab 07: the plan follows the design, the analysis recovers planted numbers, every claim can fail."""

import math

import pytest

from coursekit.labs import lab07_large_batch as lb
from coursekit.labs.kit.results import ResultsTable


class S(dict):
    __getattr__ = dict.__getitem__


def gpu_settings(**changes):
    values = lb.settings("gpu")
    return S({**values, "train_images": 60_000, **changes})


def test_scaled_lr_is_a_function_of_numbers_and_names_a_bad_one():
    assert lb.scaled_lr(0.1, 256, 8192, "linear") == pytest.approx(3.2)
    assert lb.scaled_lr(0.1, 256, 1024, "sqrt") == pytest.approx(0.2)
    assert lb.scaled_lr(0.1, 256, 4096, "none") == 0.1
    for kwargs, name in (({"rule": "cubic"}, "rule"), ({"base_lr": 0}, "base_lr"), ({"batch": 0}, "batch")):
        with pytest.raises(ValueError, match=name):
            lb.scaled_lr(**{"base_lr": 0.1, "base_batch": 256, "batch": 512, "rule": "linear", **kwargs})
    assert lb.steps_per_epoch(60_000, 4096) == 14
    with pytest.raises(ValueError, match="batch"):
        lb.steps_per_epoch(100, 256)


def test_the_gpu_plan_is_the_measured_design():
    s = gpu_settings()
    runs = lb.plan(s)
    a = [r for r in runs if r.tags["part"] == "A"]
    assert len(a) == 6 * 3 and {r.config.schedule for r in a} == {"linear"}
    seed0 = {r.tags["arm"]: r.config for r in a if r.tags["seed"] == 0}
    assert seed0["reference B=256"].lr == 0.1 and seed0["reference B=256"].warmup_steps == 0
    assert seed0["linear 4x + warm-up B=1024"].lr == pytest.approx(0.4)
    assert seed0["linear 4x + warm-up B=1024"].warmup_steps == 116
    assert seed0["linear 16x + warm-up B=4096"].lr == pytest.approx(1.6)
    assert seed0["linear 16x + warm-up B=4096"].warmup_steps == 28
    assert all(c.model == "airbench" and c.device_data and c.epochs == 10 and c.nesterov for c in seed0.values())
    b = [r.config for r in runs if r.tags["part"] == "B"]
    assert len(b) == 4 * 3 and all(c.log_every == 1 and c.batch_size == 4096 for c in b)
    assert sorted({(c.lr, c.warmup_steps) for c in b}) == [(6.4, 0), (6.4, 28), (12.8, 0), (12.8, 28)]
    c = [r.config for r in runs if r.tags["part"] == "C"]
    assert sorted({x.batch_size for x in c}) == [64, 128, 256, 512, 1024, 2048, 4096] and len(c) == 21
    assert all(x.holdout_samples == 10_000 and x.target_acc == 0.9 and x.schedule == "constant" for x in c)
    assert sorted(x.lr for x in c if x.batch_size == 1024) == pytest.approx([0.1, 0.2, 0.4])
    assert {x.epochs for x in c if x.batch_size == 64} == {2} and {x.epochs for x in c if x.batch_size == 4096} == {16}
    (d,) = [r.config for r in runs if r.tags["part"] == "D"]
    assert d.batch_size == 256 and d.accumulation_steps == 4 and d.noise_every >= 1 and d.target_acc is None


def test_submit_names_bad_input():
    with pytest.raises(ValueError, match="jobs"):
        lb.submit(lb.plan(gpu_settings()), name="x", jobs=0)
    with pytest.raises(ValueError, match="runs"):
        lb.submit([], name="x")


# ----------------------------------------------------------------------------- planted tables

ARMS = {"reference B=256": 0.94, "naive B=1024": 0.93, "linear 4x + warm-up B=1024": 0.938, "naive B=4096": 0.90,
        "4x + warm-up B=4096": 0.915, "linear 16x + warm-up B=4096": 0.905}
PLANTED_STEPS = {64: 1200, 128: 600, 256: 320, 512: 180, 1024: 130, 2048: 120, 4096: 115}


def _steps(peak, n=60):
    return [{"step": i, "loss": peak if i == 3 else 2.3} for i in range(1, n + 1)]


def planted(arms=ARMS, spike=(2.6, 9.0), spike_acc=(0.85, 0.80), critical=PLANTED_STEPS, b_simple=600.0):
    rows = []
    for seed in (0, 1, 2):
        for arm, acc in arms.items():
            batch = int(arm.rsplit("=", 1)[1])
            rows.append({"part": "A", "arm": arm, "batch_size": batch, "lr": 0.1, "seed": seed, "status": "completed",
                         "val_acc": acc + 0.001 * seed, "total_time_s": 1.0, "steps": [], "summary": {"steps": 10}})
        for name, peak, acc in (("lr 12.8, 28 warm-up steps", spike[0], spike_acc[0]),
                                ("lr 12.8, no warm-up", spike[1], spike_acc[1])):
            rows.append({"part": "B", "arm": name, "batch_size": 4096, "lr": 12.8, "seed": seed,
                         "status": "completed", "val_acc": acc, "total_time_s": 1.0, "steps": _steps(peak),
                         "summary": {"steps": 140}})
    for batch, steps in critical.items():
        for factor in (0.25, 0.5, 1.0):
            reached = steps if factor == 0.5 else (int(steps * 1.3) if factor == 1.0 else None)
            rows.append({"part": "C", "arm": f"{factor:g} x linear", "batch_size": batch, "lr": factor * batch / 2560,
                         "seed": 0, "status": "completed", "val_acc": 0.9, "total_time_s": 1.0, "steps": [],
                         "summary": {"steps": reached or 999, "steps_to_target": reached}})
    rows.append({"part": "D", "arm": "noise scale", "batch_size": 256, "lr": 0.1, "seed": 0, "status": "completed",
                 "val_acc": 0.9, "total_time_s": 1.0, "summary": {},
                 "steps": [{"step": s, "loss": 1.0, "b_simple": b_simple * s / 300} for s in range(10, 710, 10)]})
    return ResultsTable(rows)


def test_the_critical_fit_recovers_a_planted_knee():
    curve = ResultsTable([{"batch_size": b, "steps_to_target": 100 * (1 + 512 / b)} for b in (64, 256, 1024, 4096)])
    fit = lb.fit_critical_batch(curve)
    assert fit["b_crit"] == pytest.approx(512) and fit["s_min"] == pytest.approx(100)
    assert fit["e_min"] == pytest.approx(51_200)
    assert lb.fit_critical_batch(curve.where(batch_size=64)) is None


def test_the_analysis_reads_the_planted_table():
    table = planted()
    curve = lb.critical_curve(table)
    assert curve.one(batch_size=256)["steps_to_target"] == 320 and curve.one(batch_size=256)["lrs_reaching"] == 2
    a = lb.cells(table, "A")
    assert a.one(arm="naive B=4096")["val_acc"] == pytest.approx(0.901) and a.one(arm="naive B=4096")["seeds"] == 3
    b = lb.cells(table, "B")
    assert b.one(arm="lr 12.8, no warm-up")["early_peak_loss"] == 9.0
    assert lb.b_simple_at(lb.noise_series(table), 320) == pytest.approx(600 * 320 / 300)
    rec = lb.recovery(table, "reference B=256", "naive B=4096", "4x + warm-up B=4096")
    assert rec["gap"] == pytest.approx(0.04) and rec["share"] == pytest.approx(0.375)


def test_every_claim_holds_on_a_table_planted_to_show_them():
    results = lb.check_claims(planted(), gpu_settings())
    assert len(results) == 7 and all(r.holds for r in results), [str(r) for r in results if not r.holds]


@pytest.mark.parametrize(("change", "message"), [
    ({"arms": {**ARMS, "naive B=4096": 0.935}}, "ends at least"),
    ({"arms": {**ARMS, "linear 4x + warm-up B=1024": 0.931}}, "below the knee"),
    ({"arms": {**ARMS, "linear 16x + warm-up B=4096": 0.94}}, "beyond the knee"),
    ({"spike": (2.6, 3.0)}, "early loss spikes"),
    ({"spike_acc": (0.80, 0.85)}, "early loss spikes"),
    ({"critical": {b: 300 for b in PLANTED_STEPS}}, "doubling the smallest batch"),
    ({"critical": {b: 100 * (1 + 20_000 / b) for b in PLANTED_STEPS}}, "a knee shows"),
])
def test_each_strict_claim_fails_on_planted_data(change, message):
    with pytest.raises(AssertionError, match=message):
        lb.check_claims(planted(**change), gpu_settings())


def test_b_simple_far_from_b_crit_is_reported_not_seen():
    results = lb.check_claims(planted(b_simple=1e6), gpu_settings())
    noise = results[-1]
    assert "B_simple" in noise.statement and noise.holds is False and not noise.strict


def test_cpu_claims_are_printed_not_asserted():
    s = S(lb.settings("cpu"))
    assert s.strict_claims is False
    results = lb.check_claims(planted(arms={**ARMS, "naive B=4096": 0.94}), gpu_settings(strict_claims=False))
    assert results[0].holds is False


def test_the_figures_draw_what_the_table_holds():
    table = planted()
    curve = lb.critical_curve(table)
    fit = lb.fit_critical_batch(curve)
    figures = [lb.accuracy_figure(lb.cells(table, "A")), lb.spike_figure(table),
               lb.critical_figure(curve, fit, 600.0), lb.noise_figure(lb.noise_series(table), fit["b_crit"], 320)]
    assert [len(f.axes) for f in figures] == [1, 2, 2, 1]
    assert len(figures[0].axes[0].patches) == len(ARMS)
    assert len(figures[1].axes[0].lines) == 2 and max(figures[1].axes[0].lines[1].get_ydata()) == 9.0
    assert math.isfinite(fit["b_crit"])
