"""The one definition of throughput and data share (coursekit/metrics.py, "Throughput and the data share")."""

import statistics

import pytest

from coursekit.metrics import WARMUP_STEPS, measured_windows, step_figures


def window(step, steps, seconds, images, data_share):
    """A step record as the engine writes it: per-step means of data and compute over a window of ``steps``."""
    return {"step": step, "window_steps": steps, "window_time_s": seconds, "images_per_s_global": images / seconds,
            "images_per_s": images / seconds, "data_time_s": data_share * seconds / steps,
            "compute_time_s": (1 - data_share) * seconds / steps}


def unequal_run():
    # warm-up window, then a short fast window and a long slow one (the first epoch's end, the second's start)
    return [window(WARMUP_STEPS, WARMUP_STEPS, 2.0, 5 * 100, 0.9),
            window(WARMUP_STEPS + 1, 1, 0.01, 100, 0.0),
            window(WARMUP_STEPS + 51, 50, 4.99, 50 * 100, 0.5)]


def test_throughput_is_images_over_wall_time_not_a_mean_of_window_rates():
    figures = step_figures(unequal_run())
    images, seconds = 100 + 5000, 0.01 + 4.99
    assert figures["images_per_s"] == pytest.approx(images / seconds)  # 1,020 img/s
    old_definition = statistics.fmean([100 / 0.01, 5000 / 4.99])  # 5,501 img/s: what the summary used to say
    assert abs(figures["images_per_s"] - old_definition) > 0.5 * figures["images_per_s"]
    assert figures["images_per_s_std"] == pytest.approx(statistics.stdev([100 / 0.01, 5000 / 4.99]))
    assert figures["measured_steps"] == 51 and figures["measured_time_s"] == pytest.approx(5.0)


def test_data_share_equals_the_ratio_of_the_per_step_means_of_the_same_steps():
    figures = step_figures(unequal_run())
    assert figures["data_fraction"] == pytest.approx(0.5 * 4.99 / 5.0)
    assert figures["data_fraction"] == pytest.approx(
        figures["data_time_mean_s"] / (figures["data_time_mean_s"] + figures["compute_time_mean_s"]))
    # the medians are the typical window, reported beside: here they differ from the means on purpose
    assert figures["data_time_s"] == pytest.approx(statistics.median([0.0, 0.5 * 4.99 / 50]))


def test_the_median_window_rate_is_its_own_figure_beside_the_throughput():
    figures = step_figures(unequal_run())
    assert figures["images_per_s_median"] == pytest.approx(statistics.median([100 / 0.01, 5000 / 4.99]))
    assert abs(figures["images_per_s_median"] - figures["images_per_s"]) > 0.5 * figures["images_per_s"]
    cpu = [{**r, "images_per_cpu_s": r["images_per_s_global"] / 2} for r in unequal_run()]
    assert step_figures(cpu)["images_per_cpu_s_median"] == pytest.approx(figures["images_per_s_median"] / 2)
    assert figures["images_per_cpu_s_median"] is None  # no processor time recorded: not measured


def test_records_without_window_fields_get_them_from_step_numbers_and_times():
    new = unequal_run()
    old = [{k: v for k, v in r.items() if k not in ("window_steps", "window_time_s")} for r in new]
    assert step_figures(old)["images_per_s"] == pytest.approx(step_figures(new)["images_per_s"])
    assert [w["window_steps"] for w in measured_windows(old)] == [1, 50]


def test_a_run_shorter_than_the_warm_up_drops_its_first_record_only():
    short = [window(1, 1, 1.0, 10, 0.5), window(2, 1, 0.5, 10, 0.5), window(3, 1, 0.5, 10, 0.5)]
    assert [w["step"] for w in measured_windows(short)] == [2, 3]
    assert step_figures(short)["images_per_s"] == pytest.approx(20 / 1.0)
    assert step_figures([])["images_per_s"] is None and step_figures([])["data_fraction"] is None


def test_read_gpu_samples_skips_a_half_written_line_and_a_missing_file(tmp_path):
    from coursekit.metrics import GPU_SAMPLES_FILE, read_gpu_samples

    assert read_gpu_samples(tmp_path) == []  # a CPU run: no file
    (tmp_path / GPU_SAMPLES_FILE).write_text('{"time": 1.0, "util_pct": 50.0}\n{"time": 1.5, "util')
    assert read_gpu_samples(tmp_path) == [{"time": 1.0, "util_pct": 50.0}]
