"""Lab 08's helpers without jobs: configurations, the bubble theory, weights compared, activations counted.
(The strategies themselves are tested against serial training in coursekit/train/test_parallel_strategies.py; the
notebook runs them as jobs.)"""

import dataclasses
import importlib.util
import json
import math
import shlex
from pathlib import Path

import pytest
import torch

from coursekit.labs import lab08_model_parallel as mp
from coursekit.labs.kit import recorded
from coursekit.labs.lab08_model_parallel import plan
from coursekit.metrics import read_metrics, summary
from coursekit.train import sweep
from coursekit.train.config import TrainConfig, parse_args
from coursekit.train.sweep import run_folder, split_groups

BENCH = Path(__file__).resolve().parents[3] / "bench"


def base() -> TrainConfig:
    return mp.typed_settings("cpu").base


def test_data_parallel_strategies_split_the_global_batch_and_the_others_keep_it():
    b = base()
    assert mp.strategy_config(b, "zero3", n=2).batch_size == b.batch_size // 2
    assert mp.strategy_config(b, "fsdp_tp", n=4).batch_size == b.batch_size // 2
    assert mp.strategy_config(b, "tensor", n=2).batch_size == b.batch_size
    one_f = mp.strategy_config(b, "1f1b", "/tmp/w", n=2, microbatches=4)
    assert (one_f.parallel, one_f.pipeline_schedule, one_f.microbatches) == ("pipeline", "1f1b", 4)
    assert one_f.save_weights == str(Path("/tmp/w") / "1f1b.pt")


def test_strategy_runs_name_their_processes_and_checkpointing_is_a_one_process_run(tmp_path):
    runs = mp.strategy_runs(base(), ["serial", "naive", "zero3", "checkpointed"], 2, weights_dir=tmp_path,
                            options={"naive": {"pp": 2}}, naive_gpus=2)
    assert [(r.tags["strategy"], r.tags["n_gpu"]) for r in runs] == [("serial", 1), ("naive", 1), ("zero3", 2),
                                                                     ("checkpointed", 1)]
    assert runs[1].shape == {"n_gpu": 2, "n_gpu_per_task": 2} and runs[2].shape == {"n_gpu": 2}
    assert [r.tags["gpus"] for r in runs] == [1, 2, 2, 1]  # naive: one process, the GPUs it drives
    checkpointed = runs[3].config
    assert checkpointed.activation_checkpointing and checkpointed.batch_size == base().batch_size
    assert checkpointed.save_weights == str(tmp_path / "checkpointed.pt")
    bubbles = mp.bubble_runs(base(), [1, 2], stages=2)
    assert [(r.tags["schedule"], r.tags["microbatches"], r.shape) for r in bubbles] == [
        ("gpipe", 1, {"n_gpu": 2}), ("gpipe", 2, {"n_gpu": 2}), ("1f1b", 2, {"n_gpu": 2})]


def test_a_group_command_parses_back_to_the_configs():
    configs = [base(), mp.strategy_config(base(), "gpipe", "/tmp/w", n=2, microbatches=4)]
    words = shlex.split(mp.group_command(configs))
    assert words[:2] == ["-m", "coursekit.train.sweep"]  # the engine's sweep: one process group per job
    assert [parse_args(group) for group in split_groups(words[2:])] == configs


class FakeJob:
    def __init__(self, job_id, folder):
        self.job_id, self.run_dir, self.state = job_id, folder, "COMPLETED"

    def done(self):
        return True

    def metrics(self):
        return read_metrics(self.run_dir)


def test_one_job_puts_the_runs_of_a_shape_into_one_job_and_reads_each_run(tmp_path, monkeypatch):
    """cpu profile: one job per shape (submitted together, one wait), each run's row from its own folder."""
    import coursekit.jobs

    submitted = []

    def submit_jobs(command, name, n_gpu, n_gpu_per_task=1, **job):
        words = shlex.split(command)
        job = FakeJob(str(len(submitted)), tmp_path / str(len(submitted)))
        for index, group in enumerate(split_groups(words[2:])):  # what the sweep writes for each run
            folder = run_folder(job.run_dir, index)
            folder.mkdir(parents=True)
            record = {"kind": "summary", "status": "completed", "lr": parse_args(group).lr}
            (folder / "metrics.jsonl").write_text(json.dumps(record) + "\n")
        submitted.append((words[1], n_gpu, n_gpu_per_task))
        return [job]

    monkeypatch.setattr(coursekit.jobs, "submit_jobs", submit_jobs)
    runs = mp.strategy_runs(base(), ["serial", "ddp", "naive", "zero1"], 2, weights_dir=tmp_path / "w",
                            options={s: {"lr": lr} for s, lr in [("serial", 1.0), ("ddp", 2.0), ("naive", 3.0),
                                                                  ("zero1", 4.0)]})
    rows = mp.run_jobs(runs, name="t", one_job=True, timeout_s=10)
    assert submitted == [("coursekit.train.sweep", 1, 1), ("coursekit.train.sweep", 2, 1)]
    assert [(r["strategy"], r["job_id"], r["summary"]["lr"], r["state"]) for r in rows] == [
        ("serial", "0", 1.0, "COMPLETED"), ("ddp", "1", 2.0, "COMPLETED"), ("naive", "0", 3.0, "COMPLETED"),
        ("zero1", "1", 4.0, "COMPLETED")]


def test_the_labs_job_command_runs_each_group_and_checkpointing_keeps_the_weights_training_moves(tmp_path):
    """The engine's sweep on the lab's job command, one process (no process group): serial and checkpointed training end with the same weights, and those
    moved far more than the cpu profile's tolerance (a strategy that skipped updates could not pass)."""
    s = mp.typed_settings("cpu")
    serial, checkpointed = (mp.strategy_config(s.base, name, tmp_path) for name in ("serial", "checkpointed"))
    words = shlex.split(mp.group_command([serial.replace(out=str(tmp_path / "runs")), checkpointed]))[2:]
    assert sweep.main(words) == 0
    for index in (0, 1):
        assert summary(read_metrics(run_folder(tmp_path / "runs", index)))["status"] == "completed"
    assert mp.weights_difference(serial.save_weights, checkpointed.save_weights) <= s.tolerance
    assert mp.weights_moved(serial) > 10 * s.tolerance
    assert sweep.main([*words, "--next", "--lr", "-1"]) == 2  # checked before any run


@pytest.mark.parametrize("call, word", [
    (lambda: mp.strategy_config(base(), "zero4"), "strategy"),
    (lambda: mp.strategy_config(base().replace(batch_size=3), "ddp", n=2), "batch_size"),
    (lambda: mp.bubble_configs(base(), [3], stages=2), "microbatches"),
    (lambda: mp.bubble_theory(0, 4), "stages"),
])
def test_bad_input_names_the_parameter(call, word):
    with pytest.raises(ValueError, match=word):
        call()


def test_bubble_theory_and_1f1b_needs_as_many_microbatches_as_stages():
    assert mp.bubble_theory(2, 1) == 0.5 and mp.bubble_theory(4, 8) == pytest.approx(3 / 11)
    configs = mp.bubble_configs(base(), [1, 2, 4], stages=2)
    pairs = [(c.pipeline_schedule, c.microbatches) for c in configs]
    assert pairs == [("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("1f1b", 2), ("1f1b", 4)]
    assert mp.decreasing([0.5, 0.3, 0.1]) and not mp.decreasing([0.5, 0.5]) and not mp.decreasing([0.4, None])


def test_weights_difference_ignores_wrapper_prefixes_and_flags_other_models(tmp_path):
    a = {"blocks.0.w": torch.zeros(3), "head.weight": torch.ones(2)}
    torch.save(a, tmp_path / "a.pt")
    torch.save({"module.blocks.0.w": torch.full((3,), 1e-3), "module.head.weight": torch.ones(2)}, tmp_path / "b.pt")
    torch.save({"blocks.0.w": torch.zeros(3)}, tmp_path / "c.pt")
    assert mp.weights_difference(tmp_path / "a.pt", tmp_path / "b.pt") == pytest.approx(1e-3)
    assert math.isinf(mp.weights_difference(tmp_path / "a.pt", tmp_path / "c.pt"))
    assert mp.weights_difference(tmp_path / "a.pt", tmp_path / "missing.pt") is None


def test_checkpointing_cuts_the_saved_activations_of_the_gpt():
    b = base().replace(batch_size=4)
    plain, checkpointed = mp.activation_bytes(b), mp.activation_bytes(b.replace(activation_checkpointing=True))
    assert 0 < checkpointed < 0.5 * plain
    held = mp.in_flight_activations(b, stages=2, microbatches=4)
    assert held["gpipe_mib"] == pytest.approx(2 * held["1f1b_mib"])


def test_seven_billion_and_tensor_parallel_traffic():
    rows = {(r["strategy"], r["n_gpu"]): r for r in mp.seven_billion()}
    assert rows[("ddp", 1)]["total_gb"] == pytest.approx(112) and not rows[("ddp", 1)]["fits_gpu"]
    assert rows[("zero3", 8)]["fits_gpu"]
    comm = mp.tp_allreduce_bytes(base())
    assert comm["allreduces_per_step"] == 4 * base().gpt_layers


def test_recording_absent_is_said_and_present_is_a_table(tmp_path, capsys):
    assert recorded.load_recording("model_parallel_gpu", tmp_path / "none.json") is None
    assert recorded.NO_GPU_FIGURES in capsys.readouterr().out
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"machine": {"gpus": 2, "device_name": "H100"}, "runs": [
        {"name": "big-ddp", "n_gpu": 2, "ok": False, "oom": True}, {"name": "big-zero3", "n_gpu": 2, "ok": True},
        {"name": "tensor", "n_gpu": 2, "ok": False, "skipped": True}]}))
    table = mp.recorded_table(recorded.load_recording("model_parallel_gpu", path))
    assert table.column("oom") == [True, None] and "H100" in table.title
    assert "tensor" not in table.column("name")  # a run the bench had no time for is not a failure


def test_benchmark_report_renders_a_smoke_result():
    spec = importlib.util.spec_from_file_location("report_model_parallel", BENCH / "report_model_parallel.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    text = report.render({"machine": {"gpus": 2, "device_name": "H100", "torch": "2.11"}, "command": "python x",
                          "big_model": {"num_parameters": 6e9, "ddp_state_gib": 91, "zero3_state_gib_per_gpu": 45},
                          "runs": [{"name": "big-ddp", "n_gpu": 2, "ok": False, "oom": True, "log_tail": "CUDA out of memory"},
                                   {"name": "big-zero3", "n_gpu": 2, "ok": True, "peak_mem_gb": 60.0},
                                   {"name": "gpipe m=4", "n_gpu": 2, "ok": True, "bubble_measured": 0.25,
                                    "bubble_theory": 0.2}]})
    assert "**out of memory**" in text and "0.250 / 0.200" in text and "Per strategy" in text


def test_tensor_parallel_formula_keeps_embeddings_norms_and_head_whole():
    """Per block of width 8: q, k, v 3 x 64 and fc1 256 + its bias 32 (column-wise), o 64 and fc2 256 (row-wise,
    their biases whole) = 800 split; 2 x H100 measured 649 MB per rank where splitting everything gave 516."""
    config = TrainConfig(model="gpt", dataset="tokens", gpt_layers=2, gpt_dim=8, gpt_heads=2, seq_len=4, vocab_size=16,
                         optimizer="adamw")
    split, whole = mp.tp_split_parameters(config)
    assert split == 2 * 800
    assert split + whole == mp.num_parameters(config)
    fp32_adamw = 16  # bytes per parameter: weights, gradients, m, v
    assert mp.formula_bytes(config, "tensor", 2, split + whole) == fp32_adamw * (split / 2 + whole)
    assert mp.formula_bytes(config, "zero3", 2, split + whole) == fp32_adamw * (split + whole) / 2


def test_benchmark_counts_the_tensor_parallel_split_as_the_lab_does():
    spec = importlib.util.spec_from_file_location("model_parallel_gpu", BENCH / "model_parallel_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    config = TrainConfig(model="gpt", dataset="tokens", gpt_layers=3, gpt_dim=16, gpt_heads=2, seq_len=8, vocab_size=32)
    split, whole = mp.tp_split_parameters(config)
    assert bench.tp_split_of(3, 16) == split
    assert bench.params_of(3, 16, 32, 8) == split + whole


def test_the_equality_claim_is_relative_to_serial_trainings_own_move() -> None:
    """Issue 23: on GPU every strategy was within 1.1e-3 of serial while a fixed 2e-2 tolerance also passed a
    strategy that never updated (off by serial's whole move, ~3e-3)."""
    moved = 3e-3
    holds, detail = mp.equal_to_serial({"ddp": 7.3e-4, "tensor": 1.1e-3}, moved, 0.5)
    assert holds and "tensor 1.1e-03 (0.37×)" in detail and "3.0e-03" in detail
    assert not mp.equal_to_serial({"ddp": 7.3e-4, "frozen": moved}, moved, 0.5)[0]  # never updated: 1×
    assert not mp.equal_to_serial({"ddp": 7.3e-4, "zero1": None}, moved, 0.5)[0]
    assert not mp.equal_to_serial({"ddp": 0.0}, None, 0.5)[0]  # serial's weights missing: nothing to compare


def _bubble_rows(measured: dict[tuple[str, int], float], speeds: dict[tuple[str, int], float] | None = None):
    return [{"schedule": sc, "microbatches": m, "bubble_measured": b, "bubble_theory": mp.bubble_theory(2, m),
             "tokens_per_s": (speeds or {}).get((sc, m))} for (sc, m), b in measured.items()]


# the gpu profile's run on H200s: GPipe 0.538 / 0.416 / 0.324 at m = 1 / 2 / 4, 1F1B 0.417 / 0.333
GPU_BUBBLES = {("gpipe", 1): 0.538, ("gpipe", 2): 0.416, ("gpipe", 4): 0.324, ("1f1b", 2): 0.417, ("1f1b", 4): 0.333}


def test_the_bubble_claim_is_a_relative_excess_that_fails_a_doubled_bubble():
    limit = mp.typed_settings("gpu").bubble_excess_rel
    holds, detail = mp.bubble_excess(_bubble_rows(GPU_BUBBLES), limit)
    assert holds and "gpipe m=1: +8%" in detail and "1f1b m=4: +66%" in detail
    # planted: at m = 4 a bubble twice the theory (0.4 against 0.2) passed the old absolute 0.2; it fails now
    assert not mp.bubble_excess(_bubble_rows({**GPU_BUBBLES, ("gpipe", 4): 0.4}), limit)[0]
    assert not mp.bubble_excess(_bubble_rows({**GPU_BUBBLES, ("1f1b", 2): None}), limit)[0]  # a row unmeasured
    cpu = mp.typed_settings("cpu").bubble_excess_rel
    assert mp.bubble_excess(_bubble_rows({("gpipe", 1): 0.503, ("gpipe", 4): 0.218}), cpu)[0]
    # no overlap at all: every stage idles half of the step whatever m is
    assert not mp.bubble_excess(_bubble_rows({("gpipe", 1): 0.5, ("gpipe", 4): 0.5}), cpu)[0]
    assert not mp.bubble_excess([], cpu)[0]


def test_the_tokens_per_s_gain_must_miss_the_bubbles_prediction_by_more_than_the_spread():
    # tokens/s of the H200 run: x1.06 at m = 4 over m = 1, where the bubble predicts x1.60
    speeds = {("gpipe", 1): 1.00e6, ("gpipe", 2): 1.08e6, ("gpipe", 4): 1.06e6, ("1f1b", 2): 1.07e6, ("1f1b", 4): 1.09e6}
    rows = _bubble_rows(GPU_BUBBLES, speeds)
    assert mp.schedule_spread(rows) == pytest.approx((0.01 / 1.075 + 0.03 / 1.075) / 2)
    holds, detail = mp.pipeline_gain(rows)
    assert holds and "x1.06 at m = 4 over m = 1 (a gain), against x1.60" in detail
    # the claim is "tokens/s stay below the bubble's prediction", not "they rise": the 2xH200 run's x1.00 holds,
    # and the detail says there was no gain
    flat = {**speeds, ("gpipe", 4): 1.00e6}
    holds, detail = mp.pipeline_gain(_bubble_rows(GPU_BUBBLES, flat))
    assert holds and "x1.00 at m = 4 over m = 1 (no gain)" in detail
    # planted: micro-batches that cost nothing give what the bubble predicts: the claim fails
    free = {**speeds, ("gpipe", 4): 1.58e6, ("1f1b", 4): 1.60e6}
    assert not mp.pipeline_gain(_bubble_rows(GPU_BUBBLES, free))[0]
    # planted: a gain below the prediction but within 2 spreads of it (noisy runs: GPipe and 1F1B 19 % apart at m = 4)
    noisy = {**speeds, ("gpipe", 4): 1.45e6, ("1f1b", 4): 1.20e6}
    assert not mp.pipeline_gain(_bubble_rows(GPU_BUBBLES, noisy))[0]
    # nothing to judge the spread with (no m where both schedules ran), or no m = 1 row
    assert not mp.pipeline_gain([r for r in rows if r["schedule"] == "gpipe"])[0]
    assert not mp.pipeline_gain([r for r in rows if r["microbatches"] != 1])[0]


def _train(optimizer_class, gradient_scale: float, steps: int = 5, **options) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = optimizer_class(model.parameters(), **options)
    data, target = torch.randn(32, 8), torch.randn(32, 4)
    for _ in range(steps):
        optimizer.zero_grad()
        (torch.nn.functional.mse_loss(model(data), target) * gradient_scale).backward()
        optimizer.step()
    return model.weight.detach().clone()


def test_the_equality_claim_sees_a_missing_one_over_n_with_sgd_and_not_with_adamw():
    """A strategy that sums its N = 2 ranks' gradients without dividing by N: the lab trains with SGD because
    Adam, invariant to the gradient's scale, would end with serial training's weights all the same."""
    start = _train(torch.optim.SGD, 1.0, steps=0, lr=0.05, momentum=0.9)
    for optimizer, options, caught in ((torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}, True),
                                       (torch.optim.AdamW, {"lr": 1e-2}, False)):
        serial, summed = _train(optimizer, 1.0, **options), _train(optimizer, 2.0, **options)
        moved = (serial - start).abs().max().item()
        holds, _ = mp.equal_to_serial({"forgot_1/N": (summed - serial).abs().max().item()}, moved, 0.5)
        assert holds != caught
    assert mp.typed_settings("cpu").base.optimizer == mp.typed_settings("gpu").base.optimizer == "sgd"


def test_the_transfer_questions_of_the_exit_ticket():
    assert mp.bubble_theory(4, 12) == pytest.approx(0.2)  # (p - 1) / (m + p - 1) = 3 / 15
    # 13B, AdamW bf16 on 8 x 80 GB, a fifth kept free (64 GB): DP 208 GB, ZeRO-1 71.5 GB, ZeRO-2 48.75 GB per GPU
    assert mp.lowest_fitting_stage(13_000_000_000, 8, gpu_bytes=80e9, headroom=0.2) == 2
    assert mp.lowest_fitting_stage(13_000_000_000, 8, gpu_bytes=80e9) == 1  # without headroom ZeRO-1 fits
    assert mp.lowest_fitting_stage(1_000_000_000, 8, gpu_bytes=80e9) == 0  # 16 GB: plain DDP fits
    assert mp.lowest_fitting_stage(700_000_000_000, 8, gpu_bytes=80e9) is None


def test_start_jobs_collects_what_run_jobs_returns_or_raises(monkeypatch):
    seen = {}

    def fake_run_jobs(runs, *, name, bar=True, **options):
        seen.update(name=name, bar=bar, **options)
        if name == "broken":
            raise TimeoutError("the jobs did not end")
        return mp.ResultsTable([{"run": len(runs)}])

    monkeypatch.setattr(plan, "run_jobs", fake_run_jobs)  # start_jobs runs it from its module
    pending = mp.start_jobs([], name="mp", one_job=True, timeout_s=5)
    assert pending.results()[0]["run"] == 0
    assert seen == {"name": "mp", "bar": False, "one_job": True, "timeout_s": 5}  # no bar from the background
    with pytest.raises(TimeoutError):
        mp.start_jobs([], name="broken").results()


@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_the_memory_claim_fails_a_zero1_that_kept_the_whole_optimizer_state(profile):
    s = mp.typed_settings(profile)
    psi = 1_000_000
    unsharded, zero1 = (mp.formula_bytes(s.base, strategy, 2, psi) for strategy in ("ddp", "zero1"))
    assert unsharded / zero1 == pytest.approx(12 / 10)  # SGD with momentum, fp32: 4 + 4 + 4 against 4 + 4 + 4/2
    assert abs(unsharded / zero1 - 1) > s.memory_tolerance  # planted: the claim's test fails it
    assert abs(1.002 - 1) <= s.memory_tolerance  # the largest ratio measured on GPUs passes


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_the_settings_are_one_frozen_dataclass_and_its_dict_keeps_their_order(profile):
    typed = mp.typed_settings(profile)
    assert isinstance(typed, mp.ModelParallelSettings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.n_processes = 4
    names = [f.name for f in dataclasses.fields(typed)]
    values = mp.settings(profile)
    assert list(values) == [n for n in names if n != "budget" or profile == "gpu"]  # cpu: no budget to show
    assert all(values[n] == getattr(typed, n) for n in values) and isinstance(typed.base, TrainConfig)


def test_the_checkpointing_cost_is_read_against_the_flops():
    assert mp.checkpointing_cost([705_614, 576_226]) == " (-18.3 %). About what the added FLOPs predict."
    assert mp.checkpointing_cost([100.0, 97.4]).startswith(" (-2.6 %). That costs less than the FLOPs predict")
    assert mp.checkpointing_cost([100.0, 50.0]).startswith(" (-50.0 %). More than")
    assert mp.checkpointing_cost([None, 50.0]) == ""
