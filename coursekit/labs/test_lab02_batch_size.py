"""Lab 02: time to accuracy within an epoch budget."""

import pytest

from coursekit.labs import lab02_batch_size as bs
from coursekit.labs.kit.results import ResultsTable


def test_time_to_accuracy_sums_epoch_times():
    epochs = [{"epoch": 1, "epoch_time_s": 2.0, "val_acc": 0.4}, {"epoch": 2, "epoch_time_s": 3.0, "val_acc": 0.7},
              {"epoch": 3, "epoch_time_s": 3.0, "val_acc": 0.8}]
    table = bs.add_time_to_accuracy(ResultsTable([{"batch_size": 8, "epochs": epochs},
                                                  {"batch_size": 64, "epochs": epochs[:1]}]), target=0.6)
    assert table.column("time_to_target_s") == [5.0, None]
    assert table.column("epochs_to_target") == [2, None]
    assert table.column("train_time_s") == [8.0, 2.0]


def test_peak_memory_in_gib():
    table = bs.add_peak_memory_gib(ResultsTable([{"peak_mem_mb": 2048.0}, {"peak_mem_mb": None}]))
    assert table.column("peak_mem_gib") == [2.0, None]


def test_cpu_sweep_steps_are_full_batches():
    s = bs.settings("cpu")
    train = round(s["base"].num_samples * (1 - s["base"].val_fraction))
    assert all(train % batch == 0 for batch in s["batch_sizes"])  # no partial batch in the throughput medians
    assert train // max(s["batch_sizes"]) >= 2 and s["reference_batch"] in s["batch_sizes"]  # the exercise's
    assert bs.settings("gpu")["reference_batch"] in bs.settings("gpu")["batch_sizes"]


def test_the_gpu_target_follows_the_data_set():
    """Fashion-MNIST is easier than CIFAR-10: at CIFAR-10's 75 % every batch passed in its first epoch and the
    largest got there first, so the target that separates the batches is set per data set."""
    values = bs.settings("gpu")
    assert values["target_acc"] == bs.GPU_TARGET_ACC.get(values["base"].dataset, bs.GPU_TARGET_ACC["cifar10"])
    assert bs.GPU_TARGET_ACC["fashion-mnist"] > bs.GPU_TARGET_ACC["cifar10"]


# --- the claims on rows shaped like the GPU run (H100/H200, Fashion-MNIST, 2026-11-27/28) ------------------

GPU_ROWS = [  # batch, images/s, final val_acc, time to 85 % (None: never)
    (128, 8_000, 0.905, 25.0), (256, 15_000, 0.895, 20.8), (512, 26_000, 0.870, 13.7),
    (1024, 34_000, 0.840, None), (2048, 42_000, 0.801, None)]
MEMORY_ROWS = [(64, 10.2, False), (256, 27.3, False), (512, 50.1, False), (1024, 96.0, False), (2048, None, True)]
OPTIONS = {"rate": "images_per_s_median", "target_acc": 0.85, "gpu": True, "standin": False}


def sweep(rows):
    return ResultsTable([{"batch_size": b, "images_per_s_median": r, "val_acc": a, "time_to_target_s": t}
                         for b, r, a, t in rows])


def memory(rows):
    return ResultsTable([{"batch_size": b, "peak_mem_gib": m, "oom": o} for b, m, o in rows])


def claims(rows=GPU_ROWS, memory_rows=MEMORY_ROWS):
    s = bs.settings("gpu")
    return bs.check_claims(sweep(rows), memory(memory_rows) if memory_rows is not None else None,
                           acc_gap_min=s["acc_gap_min"], slope_drop_min=s["slope_drop_min"], **OPTIONS)


def test_the_claims_hold_on_rows_like_the_gpu_run():
    assert [c.holds for c in claims()] == [True, True, True, True]


@pytest.mark.parametrize("planted, claim", [
    # images/s keep growing in proportion to the batch: no bending toward saturation
    ([(b, 60 * b, a, t) for b, _, a, t in GPU_ROWS], "ever more slowly"),
    # the largest batch ends within the run-to-run spread of the best
    ([*GPU_ROWS[:-1], (2048, 42_000, 0.880, None)], "below the best"),
    # the largest batch gets to the target first
    ([*GPU_ROWS[:-1], (2048, 42_000, 0.801, 9.0)], "not the fastest"),
    # the fastest per image is batch 1024, not the largest, and it gets to the target first
    ([*GPU_ROWS[:3], (1024, 50_000, 0.840, 9.0), GPU_ROWS[4]], "not the fastest"),
])
def test_a_planted_wrong_sweep_fails_its_claim(planted, claim):
    with pytest.raises(AssertionError, match=claim):
        claims(planted)


def test_no_out_of_memory_error_fails_the_oom_claim():
    with pytest.raises(AssertionError, match="out-of-memory"):
        claims(memory_rows=[row for row in MEMORY_ROWS if not row[2]])
    with pytest.raises(AssertionError, match="out-of-memory"):  # nothing fitted: no bracket either
        claims(memory_rows=[(b, None, True) for b, _, _ in MEMORY_ROWS])
    with pytest.raises(AssertionError, match="out-of-memory"):  # a small batch failed, a larger one fitted
        claims(memory_rows=[(64, None, True), *MEMORY_ROWS[1:-1]])


def test_memory_line_and_the_transfer_answer():
    table = memory(MEMORY_ROWS)
    fixed, per_image = bs.memory_fit(table)  # through 512 and 1024
    assert per_image == pytest.approx((96.0 - 50.1) / 512)
    assert bs.largest_batch_in(table, 40) == int((40 - fixed) // per_image)
    assert bs.largest_batch_in(memory(MEMORY_ROWS[:1]), 40) is None


def test_the_exercise_verdict_follows_the_rows():
    reference = {"batch_size": 128, "val_acc": 0.905, "train_time_s": 40.0, "time_to_target_s": 25.0,
                 "summary": {"steps": 2345}}
    faster = {"batch_size": 2048, "val_acc": 0.893, "train_time_s": 22.8, "time_to_target_s": 12.5,
              "summary": {"steps": 500}}
    text = bs.longer_verdict(faster, reference, acc_tie=0.01, target=0.85)
    assert "0.012 less accuracy" in text and "1.8× less training time" in text and "capped from 2,345" in text
    assert "Training time to 85%: 12.5 s against 25.0 s." in text  # to the target, not only to the end
    slower = {**faster, "val_acc": 0.90, "train_time_s": 80.0, "time_to_target_s": None}
    text = bs.longer_verdict(slower, reference, acc_tie=0.01)
    assert "the same accuracy" in text and "2.0× more training time" in text
    assert "Training time to the target accuracy: never against 25.0 s." in text


def test_the_gains_per_batch_step_skip_runs_without_a_rate():
    table = ResultsTable([{"batch_size": 512, "img_s": 110.0}, {"batch_size": 256, "img_s": 100.0},
                          {"batch_size": 1024, "img_s": 111.1}, {"batch_size": 2048, "img_s": None}])
    assert bs.rate_gains(table, "img_s") == "images/s gained from one batch to the next: 256 → 512: +10.0%, 512 → 1024: +1.0%"
    assert bs.rate_gains(None, "img_s") == ""


def test_the_memory_figure_labels_its_peaks():
    figure = bs.memory_figure(memory(MEMORY_ROWS), "peaks")
    labels = [tick.get_text() for tick in figure.axes[0].get_yticklabels()]
    assert labels == ["10.2", "27.3", "50.1", "96"]


def test_on_a_shared_cpu_only_the_direction_of_the_slope_is_checked():
    s = bs.settings("cpu")
    assert s["slope_drop_min"] == 0.0 < bs.settings("gpu")["slope_drop_min"]
    flat = [(b, 60 * b, a, t) for b, _, a, t in GPU_ROWS]  # no saturation at all still fails
    with pytest.raises(AssertionError, match="ever more slowly"):
        bs.check_claims(sweep(flat), None, acc_gap_min=0.1, slope_drop_min=0.0, **{**OPTIONS, "gpu": False})


def test_the_memory_sweep_goes_up_to_the_oom_in_ascending_order():
    """The notebook runs the memory sweep after the batch sweep in one job where jobs share a GPU: the batches
    ascend, so the runs that fit come before the one that runs out of memory."""
    s = bs.settings("gpu")
    sizes = s["memory_batch_sizes"]
    assert sizes == sorted(sizes) and len(sizes) >= 3 and s["memory_base"].test_steps
    assert bs.settings("cpu")["memory_base"] is None  # no memory sweep without a GPU: the notebook shows a recording
