"""Engine tests on a CPU: metrics, bad input, NaN, precision paths, lab-01 probes, accumulation, savers."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from coursekit.metrics import epochs, of_kind, read_metrics, steps, summary
from coursekit.train import engine
from coursekit.train.checkpoint import load_checkpoint
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig, build_parser
from coursekit.train.engine import ConfigError, main, train
from coursekit.train.precision import precision_problem, setup_precision
from coursekit.train.profiling import StepTimer

SMALL = {"dataset": "generated", "model": "mlp", "num_samples": 160, "image_size": 8, "batch_size": 16,
         "progress": "off", "num_classes": 4}


def run(tmp_path: Path, name: str = "run", **changes: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cfg = TrainConfig(**{**SMALL, "out": str(tmp_path / name), **changes})
    result = train(cfg)
    return result, read_metrics(tmp_path / name)


def test_records_are_complete_and_sane(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result, records = run(tmp_path, epochs=3, log_every=2, lr=0.05)
    printed = capsys.readouterr().out
    assert f"metrics -> {tmp_path / 'run' / 'metrics.jsonl'}" in printed and printed.count("\nepoch ") == 3
    assert records[0]["kind"] == "start" and records[-1]["kind"] == "summary"
    assert summary(records) == {**result, "kind": "summary", "time": records[-1]["time"]}
    step_records = steps(records)
    assert [r["step"] for r in step_records] == list(range(2, 25, 2))  # 8 steps per epoch, 3 epochs
    for record in step_records:
        assert math.isfinite(record["loss"]) and record["lr"] == pytest.approx(0.05)
        assert record["images_per_s"] > 0 and record["images_per_s_global"] == pytest.approx(record["images_per_s"])
        assert record["compute_time_s"] > 0 and record["data_time_s"] >= 0
        assert record["images_per_cpu_s"] > 0  # a CPU run: per second of its processor time as well
        assert "loss_scale" not in record and "params" not in record
    epoch_records = epochs(records)
    assert [r["epoch"] for r in epoch_records] == [1, 2, 3]
    assert epoch_records[-1]["train_loss"] < epoch_records[0]["train_loss"]  # it learns
    assert all(0 <= r["val_acc"] <= 1 and 0 <= r["train_acc"] <= 1 for r in epoch_records)
    assert epoch_records[-1]["train_acc"] > 1 / SMALL["num_classes"]
    assert result["status"] == "completed" and result["steps"] == 24 and result["epochs_completed"] == 3
    assert result["val_acc"] == epoch_records[-1]["val_acc"]
    assert result["device_name"].startswith("CPU") and result["torch_version"] == torch.__version__
    assert result["images_per_s"] > 0 and result["images_per_s_std"] >= 0
    assert result["memory_estimate"]["total_bytes"] > 4 * result["num_parameters"]
    assert result["memory_estimate_total_mb"] == pytest.approx(result["memory_estimate"]["total_bytes"] / 2**20)
    assert result["config"]["lr"] == 0.05 and result["world_size"] == 1


def test_processor_time_leaves_out_the_time_other_processes_took() -> None:
    timer = StepTimer(torch.device("cpu"))
    timer.batch_ready()
    time.sleep(0.3)  # as if the processor served another process meanwhile
    timer.step_done()
    times = timer.end_window()
    assert times.wall_s >= 0.3 and times.cpu_s is not None and times.cpu_s < 0.1


def test_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for action in build_parser()._actions[1:]:
        assert action.option_strings[0] in text


def test_run_dir_comes_from_the_job_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_RUN_ROOT", str(tmp_path / "jobs" / "lab"))
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    assert engine.resolve_run_dir(None) == tmp_path / "jobs" / "lab" / "123"
    assert engine.resolve_run_dir("x") == Path("x")
    monkeypatch.delenv("COURSEKIT_RUN_ROOT")
    assert engine.resolve_run_dir(None).parent == Path(engine.RUNS_FOLDER)


BAD_INPUTS = [
    ({"model": "vgg"}, "model='vgg'"),
    ({"dataset": "mnist"}, "dataset='mnist'"),
    ({"batch_size": 0}, "batch_size=0"),
    ({"accumulation_steps": 3}, "accumulation_steps=3 does not divide batch_size=16"),
    ({"dataset": "cifar10"}, "needs --data-dir"),
    ({"dataset": "imagefolder", "data_dir": "/no/such/folder"}, "does not exist"),
    ({"precision": "tf32"}, "tf32"),
    ({"channels_last": True}, "channels_last"),
    ({"model": "resnet18", "dataset": "line"}, "image dataset"),
    ({"model": "pointnet"}, "pointclouds"),
    ({"prefetch_factor": 2}, "workers"),
    ({"ghost_batch_size": 32}, "ghost_batch_size=32"),
    ({"num_samples": 1}, "every process needs at least one"),
    ({"lr": -1.0}, "lr=-1.0"),
    ({"gpu_decode": True}, "gpu_decode"),
    ({"log_params": True}, "log_params"),  # 35k parameters: too many for step records
]


@pytest.mark.parametrize(("changes", "message"), BAD_INPUTS)
def test_bad_input_is_a_clear_error_before_any_work(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        run(tmp_path, **changes)
    if "log_params" not in changes:  # found by looking at the model: after the run folder exists
        assert not (tmp_path / "run").exists()


def test_unsupported_compile_and_resume_without_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ConfigError, match="C\\+\\+ compiler"):
        run(tmp_path, compile=True)
    monkeypatch.delenv("COURSEKIT_RUN_ROOT", raising=False)
    with pytest.raises(ConfigError, match="resume needs"):
        train(TrainConfig(**{**SMALL, "resume": True}))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device='cuda'"):
            run(tmp_path, device="cuda")


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", "mlp", "--accumulation-steps", "5", "--out", str(tmp_path / "bad")]) == 2
    assert "accumulation_steps=5" in capsys.readouterr().err
    args = ["--dataset", "line", "--model", "linear", "--lr", "1e4", "--batch-size", "8", "--epochs", "3",
            "--progress", "off", "--out", str(tmp_path / "nan")]
    assert main(args) == 3
    assert "training diverged" in capsys.readouterr().err
    records = read_metrics(tmp_path / "nan")
    event = of_kind(records, "event")[0]
    assert event["event"] == "nan_loss" and event["step"] < 13
    final = summary(records)
    assert final["status"] == "nan" and "lower --lr" in final["message"]
    assert not epochs(records)  # it stopped inside the first epoch


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_precision_paths(tmp_path: Path, precision: str) -> None:
    problem = precision_problem(precision, torch.device("cpu"))
    if problem:  # this torch cannot do it on a CPU: the run must say so
        with pytest.raises(ConfigError, match=precision):
            run(tmp_path, precision=precision, test_steps=3)
        return
    result, records = run(tmp_path, precision=precision, test_steps=3)
    _, reference = run(tmp_path, "fp32", precision="fp32", test_steps=3)
    losses = [r["loss"] for r in steps(records)]
    assert result["status"] == "completed" and all(math.isfinite(x) for x in losses)
    if precision != "fp32":  # autocast really ran in half precision: the losses move a little
        assert losses != [r["loss"] for r in steps(reference)]
        assert losses == pytest.approx([r["loss"] for r in steps(reference)], rel=0.05)
    if precision == "fp16":
        assert all(r["loss_scale"] > 0 and r["skipped_steps"] == 0 for r in steps(records))
        assert result["loss_scale"] > 0 and result["skipped_steps"] == 0


def test_half_precision_refused_where_autocast_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_autocast(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("float16 autocast is not supported on this device")

    monkeypatch.setattr("coursekit.train.precision.torch.autocast", no_autocast)
    with pytest.raises(ConfigError, match="precision='fp16' is not supported on cpu"):
        run(tmp_path, precision="fp16")
    assert not (tmp_path / "run").exists()


def test_fp16_scaler_counts_skipped_steps() -> None:
    if precision_problem("fp16", torch.device("cpu")):
        pytest.skip("no fp16 autocast on this CPU (the engine refuses it: test_precision_paths)")
    prec = setup_precision("fp16", torch.device("cpu"))
    weight = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for factor in (1.0, 1e38, 1.0):  # the middle gradient overflows once scaled: that step is skipped
        prec.backward((weight * factor).sum())
        prec.step(optimizer)
        optimizer.zero_grad()
    assert prec.skipped_steps() == 1
    assert prec.loss_scale() == 2.0**16 / 2  # halved once
    assert weight.item() == pytest.approx(1 - 2 * 0.1)  # two real steps


def test_regression_probes_params_and_gradient_noise(tmp_path: Path) -> None:
    """Lab 01: (w, b) in every step record; the mini-batch gradient variance falls like 1/B."""
    variance = {}
    for batch in (4, 32):
        _, records = run(tmp_path, f"b{batch}", dataset="line", model="linear", num_samples=4000, batch_size=batch,
                         lr=1e-6, weight_decay=0.0, test_steps=1, log_params=True, grad_noise_batches=60)
        record = steps(records)[0]
        assert set(record["params"]) == {"weight", "bias"} and len(record["params"]["weight"]) == 1
        variance[batch] = record["grad_noise_var"]
    ratio = variance[4] / variance[32]
    assert 8 / 2 < ratio < 8 * 2, f"variance ratio {ratio:.2f} for an 8x larger batch (expected ~8)"


def test_regression_fits_the_line(tmp_path: Path) -> None:
    result, records = run(tmp_path, dataset="line", model="linear", batch_size=10, lr=0.3, momentum=0.5,
                          weight_decay=0.0, epochs=15, log_params=True, log_every=10)
    weight, bias = steps(records)[-1]["params"]["weight"][0], steps(records)[-1]["params"]["bias"][0]
    assert result["train_acc"] is None and result["val_loss"] < 2.0
    assert weight == pytest.approx(10, abs=1.5) and bias == pytest.approx(2, abs=1.0)


def test_accumulation_gives_the_same_step(tmp_path: Path) -> None:
    weights = {}
    for parts in (1, 4):
        run(tmp_path, f"a{parts}", accumulation_steps=parts, test_steps=3, checkpoint_every=100)
        weights[parts] = load_checkpoint(tmp_path / f"a{parts}")["model"]
    for name, value in weights[1].items():
        assert torch.allclose(value, weights[4][name], atol=1e-6), name


def test_resnet_with_memory_savers_and_channels_last(tmp_path: Path) -> None:
    result, records = run(tmp_path, model="resnet18", num_samples=48, batch_size=8, test_steps=2,
                          channels_last=True, activation_checkpointing=True, ghost_batch_size=4)
    assert result["status"] == "completed" and all(math.isfinite(r["loss"]) for r in steps(records))
    assert result["memory_estimate"]["activations_bytes"] > 0


def test_profiler_trace_and_top_operators(tmp_path: Path) -> None:
    result, _ = run(tmp_path, test_steps=5, profile=True, profile_steps=2)
    folder = Path(result["profile_dir"])
    assert list(folder.glob("*.pt.trace.json"))
    text = Path(result["profile_summary"]).read_text()
    assert "Top" in text and "aten::" in text


@pytest.mark.parametrize(("changes", "validated"), [
    ({"epochs": 4, "val_every_epochs": 3}, [3, 4]),  # every 3rd epoch and the last
    ({"epochs": 4, "steps": 10, "val_every_epochs": 4}, [2]),  # the step budget ends epoch 2: still validated
    ({"epochs": 2}, [1, 2]),  # the default: every epoch
])
def test_validation_every_n_epochs(tmp_path: Path, changes: dict[str, Any], validated: list[int]) -> None:
    result, records = run(tmp_path, **changes)
    epoch_records = [r for r in records if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epoch_records if r["val_acc"] is not None] == validated
    assert all(r["val_loss"] is None for r in epoch_records if r["epoch"] not in validated)
    assert result["val_acc"] is not None


def test_validation_every_n_epochs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="val_every_epochs"):
        validate(TrainConfig(**{**SMALL, "val_every_epochs": 0}))
