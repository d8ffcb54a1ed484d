"""Lab 05: profiler traces summarised, JPEG folders prepared once, loader labels."""

import json

import pytest

from coursekit.labs import lab05_data_loading as loading


def event(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def write_trace(folder, with_gpu):
    events = [
        event("ProfilerStep#2", 0, 100, "user_annotation"), event("ProfilerStep#3", 100, 100, "user_annotation"),
        event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 5, 40, "user_annotation"),
        event("aten::linear", 50, 40), event("aten::addmm", 55, 30),
        event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 105, 40, "user_annotation"),
        event("aten::linear", 150, 40), event("aten::addmm", 155, 30),
    ]
    if with_gpu:
        events += [event("gemm", 60, 30, "kernel", tid=7), event("gemm", 160, 30, "kernel", tid=7),
                   event("gemm", 170, 10, "kernel", tid=8),  # overlapping kernels count once
                   # the GPU's copy of each step annotation (seen in a torch 2.11 trace on an H100)
                   event("ProfilerStep#2", 58, 40, "gpu_user_annotation", tid=7),
                   event("ProfilerStep#3", 158, 40, "gpu_user_annotation", tid=7)]
    path = folder / "profile" / "host_1.123.pt.trace.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_trace_summary_without_gpu(tmp_path):
    path = write_trace(tmp_path, with_gpu=False)
    assert loading.trace_file(tmp_path) == path
    summary = loading.summarize_trace(path)
    assert summary["steps"] == 2 and summary["profiled_ms"] == pytest.approx(0.2)
    assert summary["dataloader_share"] == pytest.approx(0.4)
    assert summary["gpu_idle_share"] is None
    top = {row["operator"]: row["self_ms"] for row in summary["top_operators"]}
    assert top["aten::addmm"] == pytest.approx(0.06) and top["aten::linear"] == pytest.approx(0.02)  # self time


def test_trace_summary_with_gpu(tmp_path):
    summary = loading.summarize_trace(write_trace(tmp_path, with_gpu=True))
    assert summary["steps"] == 2  # each step once, not once more for its GPU timeline
    assert summary["gpu_busy_ms"] == pytest.approx(0.06)
    assert summary["gpu_idle_share"] == pytest.approx(0.7)


def test_missing_or_foreign_trace_is_explained(tmp_path):
    with pytest.raises(ValueError, match="--profile"):
        loading.trace_file(tmp_path)
    path = tmp_path / "x.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [event("aten::mm", 0, 1)]}))
    with pytest.raises(ValueError, match="ProfilerStep"):
        loading.summarize_trace(path)


def test_loader_label():
    assert loading.loader_label({"workers": 0}) == "workers=0"
    assert loading.loader_label({"workers": 8, "pin_memory": True, "persistent_workers": True,
                                 "prefetch_factor": 4}) == "workers=8 +pin +persistent +prefetch4"


def test_jpeg_tree_is_written_once(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.delenv("COURSEKIT_DATA_DIR", raising=False)
    root = loading.prepare_jpeg_tree(2, 2, (16, 12))
    assert root.parent == tmp_path / "data"
    files = sorted(root.glob("*/*/*.jpg"))
    assert len(files) == 2 * 2 + 2 * 1  # train + one val image per class
    stamp = files[0].stat().st_mtime_ns
    assert loading.prepare_jpeg_tree(2, 2, (16, 12)) == root
    assert files[0].stat().st_mtime_ns == stamp


def test_jpeg_tree_shared_by_the_room_is_reused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    monkeypatch.setenv("COURSEKIT_DATA_DIR", str(shared))
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "ada"))
    first = loading.prepare_jpeg_tree(2, 2, (16, 12))  # the instructor (or the first participant) writes it
    assert first.parent == shared and (first / ".complete").exists()
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "bob"))
    assert loading.prepare_jpeg_tree(2, 2, (16, 12)) == first  # everybody else reads the same tree
    assert not (tmp_path / "bob" / "data").exists()


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_the_profiled_run_fits_in_its_one_epoch(profile):
    from coursekit.train.profiling import PROFILER_WAIT_STEPS, PROFILER_WARMUP_STEPS

    s = loading.settings(profile)
    steps_per_epoch = s["jpeg_classes"] * s["jpeg_images_per_class"] // s["base"].batch_size
    assert PROFILER_WAIT_STEPS + PROFILER_WARMUP_STEPS + s["profile_steps"] <= steps_per_epoch


def test_gpu_idle_claim_needs_a_share_in_range_that_agrees_with_the_engine():
    assert loading.gpu_idle_agrees(0.86, 0.83)  # shaped like the H200 run: the engine's 83 % waiting with workers=0
    assert not loading.gpu_idle_agrees(None, 0.83)  # no GPU events in the trace
    assert not loading.gpu_idle_agrees(0.05, 0.83)  # host events counted as the GPU's
    assert not loading.gpu_idle_agrees(1.0, 0.83)  # no kernel inside the profiled steps
    assert not loading.gpu_idle_agrees(0.55, 0.83)  # in range, but not the idleness the engine measured


def rows(shares, gpu_share):
    from coursekit.train.config import TrainConfig

    made = [{"config": TrainConfig(workers=0), "data_fraction": 0.83}]
    made += [{"config": TrainConfig(workers=8), "data_fraction": share} for share in shares]
    made += [{"config": TrainConfig(workers=8, gpu_decode=True), "data_fraction": gpu_share}]
    return made


def test_the_feeding_lesson_holds_only_where_the_data_holds_it():
    assert loading.feeding(rows([0.34, 0.47, 0.36, 0.35], 0.01))["holds"]  # an H200 run's shares before drop_last (2026-11-29: 70-75 %)
    assert not loading.feeding(rows([0.34, 0.02, 0.36], 0.01))["holds"]  # one CPU loader fed the step
    assert not loading.feeding(rows([0.34, 0.47], 0.20))["holds"]  # GPU decoding did not stop the waiting
    # the H200 run of 2026-11-30 beside lab 07: 8 % against 59-72 %, under a quarter of the least (14.8 %)
    assert loading.feeding(rows([0.69, 0.59, 0.72, 0.72], 0.08))["holds"]
    assert not loading.feeding(rows([0.69, 0.59, 0.72, 0.72], 0.16))["holds"]  # more than a quarter of 59 %
    assert not loading.feeding(rows([0.34], None))["holds"] and not loading.feeding([])["holds"]


# the H200 run of 2026-11-29: (loader options, data_fraction, compute_time_mean_s, data_time_s, epoch_time_s)
H200_RUN = [({"workers": 0}, 0.952, 0.055, 1.1, 22.8), ({"workers": 4}, 0.857, 0.0549, 0.0569, 8.02),
            ({"workers": 8}, 0.729, 0.0549, 0.0636, 4.81), ({"workers": 8, "pin_memory": True}, 0.697, 0.0554, 0.00355, 4.85),
            ({"workers": 8, "pin_memory": True, "non_blocking": True}, 0.739, 0.0546, 0.00375, 4.67),
            ({"workers": 8, "pin_memory": True, "non_blocking": True, "persistent_workers": True, "prefetch_factor": 4},
             0.754, 0.0546, 0.0036, 5.17),
            ({"workers": 8, "pin_memory": True, "non_blocking": True, "persistent_workers": True, "prefetch_factor": 4,
              "gpu_decode": True}, 0.0156, 0.0601, 0.000905, 1.35)]
# a run of the cpu profile (two cores): no GPU decoding, no loader with 8 workers
CPU_RUN = [({"workers": 0}, 0.733, 0.0167, 0.0456, 0.25), ({"workers": 1}, 0.73, 0.0142, 0.0366, 0.24),
           ({"workers": 2}, 0.514, 0.0163, 0.00165, 0.202),
           ({"workers": 1, "persistent_workers": True, "prefetch_factor": 4}, 0.736, 0.0126, 0.0351, 0.202)]


def measured(run, **changes):
    """Rows shaped like the sweep's table; ``changes``: {row index: {column: value}}."""
    from coursekit.train.config import TrainConfig

    made = []
    for i, (options, share, compute, wait, epoch) in enumerate(run):
        row = {"config": TrainConfig(**options), "loader": loading.loader_label(options), "data_fraction": share,
               "compute_time_mean_s": compute, "data_time_s": wait, "epoch_time_s": epoch}
        made.append({**row, **changes.get(f"row{i}", {})})
    return made


def test_the_workers_claims_rest_on_cpu_decoding_alone():
    effect = loading.workers_effect(measured(H200_RUN))
    assert effect["cuts_wait"] and effect["faster_epoch"]
    assert effect["least"]["loader"] == "workers=8 +pin" and effect["fastest"]["epoch_time_s"] == 4.67  # not nvjpeg
    assert loading.workers_effect(measured(CPU_RUN))["cuts_wait"]  # the cpu profile's numbers do not contradict it
    # CPU workers that did nothing: only the GPU-decoding loader waits less and finishes its epoch sooner
    idle = {f"row{i}": {"data_fraction": 0.95, "epoch_time_s": 23.0} for i in range(1, 6)}
    effect = loading.workers_effect(measured(H200_RUN, **idle))
    assert not effect["cuts_wait"] and not effect["faster_epoch"]
    near = {f"row{i}": {"data_fraction": 0.93} for i in range(1, 6)}  # 2 points: the runs' noise, not a cut
    assert not loading.workers_effect(measured(H200_RUN, **near))["cuts_wait"]
    assert not loading.workers_effect(measured(H200_RUN[:1]))["cuts_wait"]  # no loader with workers


def test_the_other_settings_are_explained_only_where_the_table_shows_it():
    others = loading.other_settings(measured(H200_RUN))
    assert others["alike"] and others["pinning_shows"]
    assert len(others["shares"]) == 4 and others["unpinned_s"] == [0.0636]  # the 8-worker CPU rows only
    assert max(others["pinned_s"]) == 0.00375
    # persistent workers that saved a visible share: not alike
    assert not loading.other_settings(measured(H200_RUN, row5={"data_fraction": 0.40}))["alike"]
    # pinning that did not shorten the typical wait
    assert not loading.other_settings(measured(H200_RUN, row3={"data_time_s": 0.060}))["pinning_shows"]
    cpu = loading.other_settings(measured(CPU_RUN))  # no loader with 8 workers: nothing to say
    assert not cpu["alike"] and not cpu["pinning_shows"]


def test_gpu_decoding_computes_longer_only_where_it_did():
    decoded = loading.decode_compute(measured(H200_RUN))
    assert decoded["longer"] and decoded["extra"] == pytest.approx(0.0601 / 0.0549 - 1)
    assert not loading.decode_compute(measured(H200_RUN, row6={"compute_time_mean_s": 0.0552}))["longer"]
    assert loading.decode_compute(measured(CPU_RUN)) is None


def test_transfer_question_rounds_up():
    assert loading.workers_needed(300, 50) == 6 and loading.workers_needed(310, 50) == 7
    assert loading.workers_needed(loading.TRANSFER_DECODE_MS, loading.TRANSFER_COMPUTE_MS) == 6


def test_a_ladder_of_loader_settings_is_labelled_by_what_each_rung_adds():
    labels = ["workers=0", "workers=8", "workers=8 +pin", "workers=8 +pin +persistent +prefetch4",
              "workers=8 +pin +persistent +nvjpeg +prefetch4", "workers=4 +pin"]
    assert loading.ladder_labels(labels) == ["workers=0", "workers=8", "… +pin", "… +persistent +prefetch4", "… +nvjpeg",
                                        "workers=4 +pin"]  # fewer workers: not the one before plus something


TOP_OPERATORS_GPU = """Top 25 operators by self GPU time
-------------------------------------------------------  ------------  ------------
                                                   Name    Self CPU %   Self CUDA %
-------------------------------------------------------  ------------  ------------
                                          ProfilerStep*         0.00%      2912.55%
                                            aten::copy_        17.61%        30.33%
                       Memcpy HtoD (Pageable -> Device)         0.00%        29.66%
                                aten::native_batch_norm         0.10%        17.67%
-------------------------------------------------------  ------------  ------------
Self CPU time total: 11.112s
Self CUDA time total: 377.893ms
GPU busy 3.4 % of the 11.0264 s of profiled steps (idle 96.6 %)
"""


def test_the_operator_table_leaves_out_the_profiled_steps_row_and_rounds_seconds(tmp_path):
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "top_operators.txt").write_text(TOP_OPERATORS_GPU)
    text = loading.top_operators_text(tmp_path, rows=2)
    assert "ProfilerStep" not in text and "2912" not in text  # the steps' own row: not an operator
    lines = text.splitlines()
    assert lines[0] == "Top 2 operators by self GPU time"  # the rows shown, not the engine's 25
    assert loading.top_operators_text(tmp_path).splitlines()[0] == "Top 3 operators by self GPU time"  # all there are
    assert lines[4].strip().startswith("aten::copy_") and lines[5].strip().startswith("Memcpy HtoD")  # 2 operators
    assert "native_batch_norm" not in text
    assert lines[-2:] == ["Self CPU time total: 11.112s",
                          "GPU busy 3.4 % of the 11.03 s of profiled steps (idle 96.6 %)"]



def test_the_title_the_engine_writes_is_the_one_the_lab_counts():
    from coursekit.train.profiling import top_operators_title

    assert TOP_OPERATORS_GPU.splitlines()[0] == top_operators_title(25, cuda=True)
    assert loading.TOP_COUNT.sub("Top 7", top_operators_title(25, cuda=False)) == top_operators_title(7, cuda=False)
