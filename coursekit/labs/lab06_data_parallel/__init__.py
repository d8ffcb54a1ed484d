"""Lab 06 (data parallelism): measurements run inside multi-process jobs, scaling tables, NCCL's log.

One module per part of the notebook, every name re-exported here (``from coursekit.labs import
lab06_data_parallel as dp; dp.sampler_orders(...)``):

- ``sampler``: :func:`sampler_orders` — the indices ``DistributedSampler`` hands each rank, epoch by epoch,
  with and without ``set_epoch`` (no process group needed: the sampler takes rank and world size as arguments).
- ``equivalence``: :func:`ddp_equivalence` — run in a job of N processes (``submit_function(..., n_gpu=2)``):
  DDP on shards of each global batch against one process on the whole batch (max |Δw|), and a metric seen by
  one rank against its all-reduced average and the global value.
- ``buckets``: :func:`bucket_overlap` — run in a job of N processes: step time for several ``bucket_cap_mb``
  and for gradient accumulation with and without ``no_sync``, beside compute alone and one all-reduce alone.
- ``scaling``: :func:`scaling_batches` / :func:`scaling_tables` — strong and weak scaling read from ONE sweep
  of per-GPU batch sizes x GPU counts (``submit_sweep(configs, n_gpu=[1, 2, 4])``).
- ``ddp_recording``: the GPU figures of ``bench/ddp_gpu.py`` (``labs.load_recording("ddp_gpu")``) as tables.
- ``team``: :func:`take_part` / :func:`post_part` / :func:`team_table` — the scaling sweep run once per team, each
  member one row, the results pooled in the course's shared folder (``kit/pool.py``).
- ``nccl_log``: :func:`parse_nccl_log` — rings, trees and transports from an ``NCCL_DEBUG=INFO`` log.
- ``ddp_check`` (with ``ddp_verdicts``, what it judges), ``horovod``: the participant's DDP script checked, and its
  Horovod counterpart; the scripts themselves (``train_serial.py``, ``train_ddp.py``, ``show_ranks.py``) ship in
  ``scripts/lab06_data_parallel/`` (``SCRIPTS``).

``settings(profile)`` holds the lab's numbers (``profile.settings("06")``), ``GPUS`` the GPUs its notebook needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.labs.lab06_data_parallel.buckets import (
    BF16_TIME,
    FLOAT_BYTES,
    LINKS_ALLREDUCE_SHARE,
    LINKS_SPREAD,
    MB,
    ONE_BUCKET_MB,
    OVERLAP_SHARE,
    SOCKET_ENV,
    SOCKETS_SLOWER,
    allreduce_ms_per_mb,
    bucket_label,
    bucket_layouts,
    bucket_overlap,
    bucket_table,
    ddp_bucket_sizes,
    describe_bucket_layouts,
    describe_saving,
    hidden_share,
    links_claim,
    network_claims,
    network_effects,
)
from coursekit.labs.lab06_data_parallel.ddp_recording import (
    describe_recording,
    recorded_busbw_table,
    recorded_nccl_logs,
    recorded_scaling_table,
    recorded_scaling_tables,
)
from coursekit.labs.lab06_data_parallel.equivalence import (
    EQUIVALENCE_TOLERANCE_CPU,
    ddp_equivalence,
    equivalence_table,
)
from coursekit.labs.lab06_data_parallel.nccl_log import EXAMPLE_NCCL_LOG, NcclReport, parse_nccl_log
from coursekit.labs.lab06_data_parallel.sampler import same_order_every_epoch, sampler_orders
from coursekit.labs.lab06_data_parallel.scaling import (
    ALLREDUCE_SHARE,
    WEAK_EFFICIENCY_MIN,
    RichTable,
    describe_split,
    energy_columns,
    energy_reading,
    extra_time_text,
    other_weak_pairs,
    rich,
    scaling_batches,
    scaling_figure,
    scaling_tables,
    split_claims,
    step_split,
    two_node_options,
    two_node_text,
    usable_gpu_counts,
    weak_pairs,
)
from coursekit.labs.lab06_data_parallel.team import TeamPart, post_part, take_part, team_table
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="06", slug="lab06_data_parallel", title="Data parallelism",
          notebook="06_data_parallel.ipynb", gpus=2, script_folders=("lab06_data_parallel",),
          recordings=("ddp_gpu",), exercises=("ddp_check.check_ddp_script",))

__all__ = ["BF16_TIME", "EQUIVALENCE_TOLERANCE_CPU", "EXAMPLE_NCCL_LOG", "FLOAT_BYTES", "GPUS", "MB", "NcclReport",
           "ONE_BUCKET_MB", "OVERLAP_SHARE", "RichTable", "SCRIPTS", "SOCKETS_SLOWER", "SOCKET_ENV", "TeamPart",
           "allreduce_ms_per_mb", "bucket_overlap", "bucket_table", "ddp_equivalence", "describe_recording",
           "equivalence_table", "network_claims", "network_effects", "parse_nccl_log", "post_part",
           "recorded_busbw_table", "recorded_nccl_logs", "recorded_scaling_table", "recorded_scaling_tables", "rich",
           "same_order_every_epoch", "sampler_orders", "scaling_batches", "scaling_figure", "scaling_tables",
           "settings", "split_claims", "step_split", "describe_split", "take_part", "team_table",
           "two_node_options", "usable_gpu_counts", "WEAK_EFFICIENCY_MIN", "ALLREDUCE_SHARE",
           "energy_columns", "energy_reading", "hidden_share", "two_node_text", "LINKS_ALLREDUCE_SHARE", "LINKS_SPREAD",
           "bucket_label", "bucket_layouts", "ddp_bucket_sizes", "describe_bucket_layouts", "links_claim",
           "describe_saving", "extra_time_text", "other_weak_pairs", "weak_pairs"]

# The lab's scripts as shipped with coursekit (package data), their only copy: the participants' lab06_data_parallel/ (and
# the solved notebook folder's) is made from it (labs/kit/exercises.py).
SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab06_data_parallel"


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile: its 2-process jobs (more: as many as
# the site has)


# Lab 06, gpu profile: what a room of participants costs. Each scaling job is ~1 min of start-up (NCCL,
# cuDNN autotuning) plus 60 test steps; every per-GPU batch runs on every GPU count (one sweep), once per
# team of TEAM_SIZE: each member runs one row of the sweep (team.py), the team pools its results.
LAB06_MINUTES_PER_JOB = 1.5
# the buckets over sockets: ~20 s to start NCCL and torch, ~15 s of timings (134 MB all-reduces at a few GB/s)
LAB06_OTHER_JOBS = {"ranks, serial/DDP scripts, DDP = serial, buckets, NCCL log (2 GPUs each)": (6, 2 * 1.0),
                    "buckets over TCP sockets (2 GPUs)": (1, 2 * 0.6)}
TEAM_SIZE = 4


def _lab06_budget(n_gpus: list[int], batches: int, team_size: int) -> dict[str, Any]:
    rows_each = -(-batches // team_size)  # the member with the most rows
    return workshop_budget({**LAB06_OTHER_JOBS, f"scaling sweep, {rows_each} row(s) of {batches} (team of "
                                                f"{team_size}) on {'+'.join(map(str, n_gpus))} GPUs":
                            (rows_each, sum(n_gpus) * LAB06_MINUTES_PER_JOB)})


def settings(profile: str) -> dict[str, Any]:
    """Lab 06's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("06")`` shows them."""
    cpu = profile == "cpu"
    n_gpus = [1, 2] if cpu else [1, 2, 4, 8]  # cpu: n_gpu counts gloo processes on the 2 cores
    if cpu:
        scaling = TrainConfig(model="mlp", dataset="generated", num_samples=4096, num_classes=4, image_size=16,
                              lr=0.05, test_steps=20, **QUIET)
        # Small batches of a small MLP: each step's all-reduce (1 MB) costs more than its compute, as it
        # does for any model whose batch is too small for its hardware.
        batch_per_gpu, global_batch = 16, 32
        # 16 MB of gradients: 25 MB would be one bucket, so the sweep goes below it.
        buckets = {"bucket_caps_mb": [1000.0, 4.0, 1.0], "width": 1024, "depth": 4, "batch": 8,
                   "backward_ms_per_layer": 8.0, "accumulation": 4, "repeats": 4, "warmup": 1, "compression": True}
        network = None  # gloo talks over TCP already: the table above is the network case
    else:
        # Synthetic images kept on the GPU: scaling measures compute and communication, not the file system
        # (and needs no CIFAR-10 on a machine that has none).
        scaling = TrainConfig(model="resnet50", dataset="synthetic", gpu_resident=True, image_size=224,
                              num_classes=1000, precision="bf16", channels_last=True, test_steps=60, **QUIET)
        batch_per_gpu, global_batch = 256, 256
        buckets = {"bucket_caps_mb": [1000.0, 25.0, 4.0], "width": 4096, "depth": 8, "batch": 1024,
                   "backward_ms_per_layer": 0.0, "accumulation": 4, "repeats": 10, "warmup": 3}
        # The same over NCCL's TCP sockets on the loopback interface, as between nodes without InfiniBand. A
        # narrower, longer-batch MLP (134 MB of gradients, 4,096 images a step) so that compute and all-reduce
        # are of one order (a few GB/s over sockets): then the overlap has something to hide.
        network = {"env": dict(SOCKET_ENV), "buckets": {
            "bucket_caps_mb": [1000.0, 25.0, 4.0], "width": 2048, "depth": 8, "batch": 4096,
            "backward_ms_per_layer": 0.0, "accumulation": 4, "repeats": 10, "warmup": 3, "compression": True}}
    values = {
        "n_processes": 2,
        "scripts": {"serial": "lab06_data_parallel/train_serial.py", "ddp": "lab06_data_parallel/train_ddp.py",
                    "ranks": "lab06_data_parallel/show_ranks.py"},
        "sampler": {"dataset_size": 16, "world_size": 2, "epochs": 3},
        "equivalence": {"steps": 5, "global_batch": 32},
        "tolerance": 1e-5,
        "buckets": buckets, "network": network,
        "scaling_base": scaling, "n_gpus": n_gpus, "batch_per_gpu": batch_per_gpu, "global_batch": global_batch,
        "nccl_env": {"NCCL_DEBUG": "INFO"}, "team_size": TEAM_SIZE,
        "job": job_options(profile, "00:10:00" if cpu else "00:20:00"), "timeout_s": 300 if cpu else 1800,
    }
    if not cpu:
        batches = len({batch_per_gpu, *(global_batch // n for n in n_gpus)})
        values["budget"] = _lab06_budget(n_gpus, batches, TEAM_SIZE)
    return values
