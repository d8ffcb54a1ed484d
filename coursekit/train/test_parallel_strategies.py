"""Every --parallel strategy on CPU processes (gloo) equals serial training: loss and weights after a few steps.

One fork of 2 processes runs every 2-process strategy in turn (one port each), then probes DDP's wrapper on a
2-process mesh (buckets, bucket overlap, SyncBatchNorm's refusal); one of 4 runs the 2-D mesh; the serial
references run in this process. DDP is held to serial with gradient accumulation too, with and without a
gradient all-reduce per micro-batch (its options change when gradients travel, never the result), and on
validation: the ranks' validation is reduced to the serial run's, and only rank 0 writes the metrics. These
are the repository's only 2-process DDP runs. Weights come from ``--save-weights`` (gathered, the
serial model's keys), losses from the step records. SGD with momentum (one state tensor per parameter):
Adam would turn the rounding differences of near-zero gradients (a different summation order) into
lr-sized steps, beyond any tight tolerance, in serial-vs-serial comparisons too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo  # noqa: F401 - imported once here, the forked workers start at once
import torch.multiprocessing as mp

from coursekit.launch import LOCALHOST, held_ports
from coursekit.metrics import epochs, of_kind, read_metrics, steps
from coursekit.train.config import TrainConfig
from coursekit.train.engine import train
from coursekit.train.parallel import build_context, ddp
from coursekit.train.parallel import process_group as pg
from coursekit.train.parallel.overlap import measure_bucket_overlap

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

PER_RANK_BATCH = 8
STEPS = 4
WEIGHT_ATOL = 1e-5
LOSS_RTOL = 1e-5
STAGE_DELAY_MS = 200.0  # emulated stage compute per batch: forward 50 ms, backward 100 ms per micro-batch; long beside a
# rank's real work, which a busy 2-core machine delays (measured there: 10 ms gave a bubble of 0.40-0.55)
BUBBLE_MICROBATCHES = 4
BUBBLE_OVERHEAD = 0.15  # measured minus theory may reach this (a few ms of gloo send/recv per micro-batch)
BASE = {"model": "gpt", "dataset": "tokens", "gpt_layers": 2, "gpt_dim": 32, "gpt_heads": 4, "seq_len": 16,
        "vocab_size": 32, "num_samples": 256, "steps": STEPS, "test_steps": None, "optimizer": "sgd", "lr": 0.1,
        "device": "cpu", "progress": "off", "val_fraction": 0.0}
# name -> (changes, data-parallel size): the serial reference has batch dp x PER_RANK_BATCH
TWO = {
    "ddp": ({"parallel": "ddp"}, 2),
    "zero1": ({"parallel": "zero1"}, 2),
    "zero2": ({"parallel": "zero2"}, 2),
    "zero3": ({"parallel": "zero3", "activation_checkpointing": True}, 2),
    "tensor": ({"parallel": "tensor", "activation_checkpointing": True}, 1),
    "gpipe": ({"parallel": "pipeline", "microbatches": 2, "activation_checkpointing": True}, 1),
    "1f1b": ({"parallel": "pipeline", "pipeline_schedule": "1f1b", "microbatches": 4, "accumulation_steps": 2}, 1),
    "gpipe_delayed": ({"parallel": "pipeline", "microbatches": BUBBLE_MICROBATCHES, "stage_delay_ms": STAGE_DELAY_MS}, 1),
}
# DDP with 2 micro-batches per step against serial training with the same (serial-2-accumulation); with validation
# (a quarter of the samples) reduced over the ranks; per micro-batch all-reduces in buckets of 1 kB: the same result
DDP_VAL = {"parallel": "ddp", "accumulation_steps": 2, "val_fraction": 0.25}
TWO.update({"ddp_accumulation": (DDP_VAL, 2),
            "ddp_sync_every_micro_batch": ({**DDP_VAL, "sync_every_micro_batch": True, "bucket_cap_mb": 0.001}, 2)})
# the probe of DDP's wrapper after the runs (_ddp_probe): layers of 1 MiB of weight gradients, buckets of 0.5 MiB
LAYERS, BUCKET_MB = 3, 0.5
# sharded checkpoints (torch.distributed.checkpoint): stop after half the steps, resume, end as if never stopped
RESUMED = {f"{name}_resume{part}": ({**changes, "checkpoint_every": STEPS // 2, "out_name": f"{name}_resume",
                                     **({"steps": STEPS // 2} if part == "_a" else {"resume": True})}, dp)
           for name, (changes, dp) in (("zero3", TWO["zero3"]), ("gpipe", TWO["gpipe"])) for part in ("_a", "_b")}
FOUR = {"fsdp_tp": ({"parallel": "fsdp_tp", "tp": 2}, 2),
        "pipeline_dp": ({"parallel": "pipeline", "pp": 2, "microbatches": 2}, 2),
        "tensor_dp": ({"parallel": "tensor", "tp": 2}, 2)}


def _config(root: Path, name: str, changes: dict[str, Any], batch: int) -> TrainConfig:
    changes = dict(changes)
    name = changes.pop("out_name", name)
    return TrainConfig(**{**BASE, **changes}, batch_size=batch, out=str(root / name),
                       save_weights=str(root / name / "weights.pt"))


def _ddp_probe(ctx: pg.DistContext) -> tuple:
    """DDP's wrapper on the 2-process mesh: the context, the bucket cap and buckets, the gradient size, the refusal
    of SyncBatchNorm on CPU, and a measure of the bucket overlap."""
    pctx = build_context(ctx)
    layers = [torch.nn.Linear(512, 512) for _ in range(LAYERS)]  # 1 MiB of weight gradients each
    model = ddp.apply(torch.nn.Sequential(*layers), pctx, TrainConfig(bucket_cap_mb=BUCKET_MB))
    seen = ddp.watch_buckets(model)
    buckets_per_step = []
    for _ in range(2):  # DDP rebuilds its buckets at the second step, in the order gradients came
        model(torch.randn(8, 512)).sum().backward()
        buckets_per_step.append(len(seen))
        seen.clear()
    try:
        ddp.apply(torch.nn.BatchNorm1d(4), pctx, TrainConfig(sync_batchnorm=True))
        sync_bn_error = ""
    except ValueError as error:
        sync_bn_error = str(error)
    overlap = measure_bucket_overlap(ctx, grad_mb=4, compute_ms=20, layers=4, bucket_mbs=(4, 1), repeats=1)
    return (pctx.dp_rank, pctx.dp_size, pctx.holds_value, pctx.data_shard().rank, type(model).__name__,
            model.bucket_bytes_cap, buckets_per_step, round(ddp.gradient_megabytes(model), 3), sync_bn_error, overlap)


def _worker(rank: int, world: int, ports: list[int], root: str, runs: dict, results: Any) -> None:
    torch.set_num_threads(1)
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": LOCALHOST})
    for port, (name, (changes, _)) in zip(ports, runs.items(), strict=False):
        os.environ["MASTER_PORT"] = str(port)
        results[(rank, name)] = train(_config(Path(root), name, changes, PER_RANK_BATCH))
    if world == 2:  # the last port: the probe of DDP's wrapper
        os.environ["MASTER_PORT"] = str(ports[-1])
        ctx = pg.init_distributed("cpu")
        try:
            results[(rank, "ddp_probe")] = _ddp_probe(ctx)
        finally:
            pg.cleanup()


def _launch(world: int, root: Path, runs: dict) -> dict:
    """Every run of ``runs`` on ``world`` processes, each on a port held until the last run ends."""
    with mp.Manager() as manager, held_ports(len(runs) + 1) as ports:
        results = manager.dict()
        mp.start_processes(_worker, args=(world, ports, str(root), runs, results), nprocs=world, join=True,
                           start_method="fork")
        return dict(results)


@pytest.fixture(scope="module")
def strategy_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("strategies")
    results = {**_launch(2, root, {**TWO, **RESUMED}), **_launch(4, root, FOUR)}
    serial_changes = {"activation_checkpointing": False}
    for dp in (1, 2):  # the serial references: one process, the global batch
        cfg = _config(root, f"serial-{dp}", serial_changes, dp * PER_RANK_BATCH)
        results[(0, f"serial-{dp}")] = train(cfg)
    accumulated = _config(root, "serial-accumulation", {"accumulation_steps": 2}, PER_RANK_BATCH)
    results[(0, "serial-accumulation")] = train(accumulated)
    ddp_reference = _config(root, "serial-2-accumulation", {**DDP_VAL, "parallel": "ddp"}, 2 * PER_RANK_BATCH)
    results[(0, "serial-2-accumulation")] = train(ddp_reference)  # one process: ddp is plain training there
    return root, results


def _serial_name(name: str, dp: int) -> str:
    if name.startswith("ddp_"):
        return "serial-2-accumulation"
    return "serial-accumulation" if name == "1f1b" else f"serial-{dp}"


@pytest.mark.parametrize("name", [*TWO, *FOUR, "zero3_resume", "gpipe_resume"])
def test_strategy_equals_serial_training(strategy_runs: tuple[Path, dict], name: str) -> None:
    root, results = strategy_runs
    dp = {**TWO, **FOUR, **RESUMED}.get(name, RESUMED.get(name + "_b", (None, 1)))[1]
    serial = _serial_name(name, dp)
    mine, reference = torch.load(root / name / "weights.pt"), torch.load(root / serial / "weights.pt")
    assert mine.keys() == reference.keys()
    worst = max((mine[k] - reference[k]).abs().max().item() for k in reference)
    assert worst < WEIGHT_ATOL, f"{name}: max |w - w_serial| = {worst:.2e}"
    losses = [r["loss"] for r in steps(read_metrics(root / name))]
    serial_losses = [r["loss"] for r in steps(read_metrics(root / serial))]
    assert len(losses) == STEPS and losses == pytest.approx(serial_losses, rel=LOSS_RTOL)
    if name.endswith("_resume"):
        assert (root / name / "checkpoint_dcp").is_dir()  # every rank wrote its shards
        return
    block = results[(0, name)]["parallel"]
    assert block["strategy"] == results[(0, name)]["config"]["parallel"]
    assert block["final_loss"] == pytest.approx(results[(0, serial)]["train_loss"], rel=LOSS_RTOL)


def _bytes(results: dict, name: str, key: str) -> list[int]:
    return [r[key] for r in results[(0, name)]["parallel"]["ranks"]]


def test_sharded_strategies_hold_the_expected_fraction(strategy_runs: tuple[Path, dict]) -> None:
    _, results = strategy_runs
    full = _bytes(results, "ddp", "param_bytes")[0]
    assert _bytes(results, "ddp", "grad_bytes") == [full, full]
    assert _bytes(results, "ddp", "optimizer_bytes")[0] == full  # SGD: one momentum buffer
    for name in ("zero2", "zero3"):  # FSDP2: every tensor split in half along dim 0 (all dims are even here)
        assert _bytes(results, name, "param_bytes") == [full // 2] * 2
        assert _bytes(results, name, "grad_bytes") == [full // 2] * 2
        assert _bytes(results, name, "optimizer_bytes") == [full // 2] * 2
    zero1 = _bytes(results, "zero1", "optimizer_bytes")  # partitioned parameter by parameter: about half
    assert sum(zero1) == full and max(zero1) < 0.6 * full
    assert _bytes(results, "zero1", "param_bytes") == [full, full]
    tensor = _bytes(results, "tensor", "param_bytes")
    assert tensor[0] == tensor[1] and full / 2 < tensor[0] < full
    # 2-D: the blocks split over tp and sharded over dp, the rest sharded over dp: half of a tp rank's bytes
    assert _bytes(results, "fsdp_tp", "param_bytes") == [tensor[0] // 2] * 4
    for (_, name), summary in results.items():
        if name != "ddp_probe":
            assert all(r["peak_memory_bytes"] is None for r in summary["parallel"]["ranks"])  # CPU


def test_pipeline_reports_bubble_and_mesh(strategy_runs: tuple[Path, dict]) -> None:
    _, results = strategy_runs
    for name, m in (("gpipe", 2), ("1f1b", 4)):
        block = results[(0, name)]["parallel"]
        assert block["mesh"] == {"dp": 1, "pp": 2} and block["microbatches"] == m
        assert block["bubble_fraction_theory"] == pytest.approx(1 / (m + 1))
        assert 0 <= block["bubble_fraction"] < 1 and len(block["stage_busy_s"]) == 2
    delayed = results[(0, "gpipe_delayed")]["parallel"]
    theory = 1 / (BUBBLE_MICROBATCHES + 1)
    assert delayed["bubble_fraction_theory"] == pytest.approx(theory)
    assert theory - 0.05 < delayed["bubble_fraction"] < theory + BUBBLE_OVERHEAD, delayed
    assert results[(0, "pipeline_dp")]["parallel"]["mesh"] == {"dp": 2, "pp": 2}
    assert results[(0, "fsdp_tp")]["parallel"]["mesh"] == {"dp": 2, "tp": 2}
    assert results[(0, "tensor_dp")]["parallel"]["mesh"] == {"dp": 2, "tp": 2}
    for rank in range(2):  # every rank returns the same summary (values reduced, ranks gathered)
        assert results[(rank, "gpipe")]["parallel"]["ranks"] == results[(0, "gpipe")]["parallel"]["ranks"]
    assert math.isfinite(results[(1, "gpipe")]["train_loss"])


@pytest.mark.parametrize("name", ["ddp_accumulation", "ddp_sync_every_micro_batch"])
def test_ddp_validation_is_reduced_to_the_serial_runs(strategy_runs: tuple[Path, dict], name: str) -> None:
    root, results = strategy_runs
    mine, serial = epochs(read_metrics(root / name)), epochs(read_metrics(root / "serial-2-accumulation"))
    assert [r["val_loss"] for r in mine] == pytest.approx([r["val_loss"] for r in serial], rel=LOSS_RTOL)
    assert mine[-1]["val_loss"] is not None
    assert results[(0, name)]["val_loss"] == results[(1, name)]["val_loss"]  # every rank sees the reduced value
    assert results[(0, name)]["val_acc"] == results[(1, name)]["val_acc"]


def test_only_rank_zero_writes(strategy_runs: tuple[Path, dict]) -> None:
    root, results = strategy_runs
    records = read_metrics(root / "ddp")
    assert len(of_kind(records, "start")) == 1 and len(of_kind(records, "summary")) == 1
    start = of_kind(records, "start")[0]
    assert start["world_size"] == 2 and start["launcher"] == "torchrun"
    summary = results[(0, "ddp")]
    assert summary["world_size"] == 2 and summary["global_batch"] == 2 * PER_RANK_BATCH
    assert summary["mesh"] == {"dp": 2} and summary["config"]["parallel"] == "ddp"
    for record in steps(records):  # global rate = sum over ranks, not rank 0's rate
        assert record["images_per_s_global"] > record["images_per_s"]


def test_ddp_on_a_two_process_mesh(strategy_runs: tuple[Path, dict]) -> None:
    _, results = strategy_runs
    for rank in range(2):
        dp_rank, dp_size, holds, shard_rank, wrapper, cap, buckets, grad_mb, sync_bn_error, overlap = results[
            (rank, "ddp_probe")]
        assert (dp_rank, dp_size, holds, shard_rank) == (rank, 2, rank == 0, rank)
        assert wrapper == "DistributedDataParallel" and cap == int(BUCKET_MB * 2**20)
        assert grad_mb == pytest.approx(LAYERS * (512 * 512 + 512) * 4 / 2**20, abs=1e-3)
        assert buckets[-1] == LAYERS  # every 1 MiB weight gradient fills a 0.5 MiB bucket on its own
        assert "SyncBatchNorm runs on GPUs only" in sync_bn_error and "--sync-batchnorm" in sync_bn_error
        assert [row["buckets"] for row in overlap["rows"]] == [1, 4]
        assert overlap["allreduce_ms"] > 0 and overlap["backward_ms"] >= 20 * 0.9
    assert results[(0, "ddp_probe")][-1]["rows"] == results[(1, "ddp_probe")][-1]["rows"]  # the slowest rank's times
