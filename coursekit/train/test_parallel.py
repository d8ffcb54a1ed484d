"""coursekit.train.parallel: the mesh context, DDP's options, and runs that fail fast (DDP on a 2-process mesh, its
buckets and their overlap: test_parallel_strategies.py, in the one fork of 2 processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import submitit
import torch
import torch._dynamo  # noqa: F401 - DDP imports it; imported once here, the forked workers start at once

from coursekit import launch
from coursekit.metrics import read_metrics, summary
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig
from coursekit.train.engine import main
from coursekit.train.parallel import build_context, ddp
from coursekit.train.parallel import process_group as pg

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

ROOT = Path(__file__).resolve().parents[2]
WORLD = 2
PROMPT_FAILURE_S = 120  # a dead rank must end the run well before this (the collective timeout: 600 s)
LONG_TIMEOUT_S = "600"
RANK_ONE_DELAY_S = 4
STARTUP_ALLOWANCE_S = 120  # two engines importing torch on a busy 2-core machine
PEER_NOTICE_S = 60  # rank 0 must fail this soon after rank 1 died (8-13 s measured on a busy 2-core machine)


def test_one_process_context_has_no_mesh() -> None:
    pctx = build_context(pg.DistContext())
    assert (pctx.mesh, pctx.dp_rank, pctx.dp_size, pctx.holds_value, pctx.is_main) == (None, 0, 1, True, True)
    assert pctx.group("dp") is None and pctx.data_shard() == pg.DistContext()
    model = torch.nn.Linear(2, 1)
    assert ddp.apply(model, pctx, TrainConfig()) is model  # one process: the model as is
    with pytest.raises(ValueError, match="multiply to the world size"):
        build_context(pg.DistContext(), {"dp": 2})
    with pytest.raises(ValueError, match="not known"):
        build_context(pg.DistContext(), {"ep": 1})


def test_parallel_options_are_validated() -> None:
    with pytest.raises(ValueError, match="parallel='fsdp' is not allowed; use one of ddp"):
        validate(TrainConfig(parallel="fsdp"))
    with pytest.raises(ValueError, match="bucket_cap_mb=0"):
        validate(TrainConfig(bucket_cap_mb=0))
    args = TrainConfig(bucket_cap_mb=1.0, sync_every_micro_batch=True).to_args()
    assert args == ["--bucket-cap-mb", "1.0", "--sync-every-micro-batch"]


def test_world_size_mismatch_is_refused_before_any_rendezvous() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0",
           "SLURM_STEP_NUM_TASKS": "1", "SLURM_JOB_NODELIST": "vm", launch.EXPECTED_WORLD_SIZE_ENV: "2"}
    with pytest.raises(launch.WorldSizeError, match=r"submitted for 2 processes \(n_gpu=2\).*launcher \(srun\) started 1"):
        pg.init_distributed("cpu", env=env)
    assert pg.init_distributed("cpu", env={**env, launch.EXPECTED_WORLD_SIZE_ENV: "1"}).world_size == 1
    with pytest.raises(ValueError, match="COURSEKIT_DIST_TIMEOUT_S"):
        pg.collective_timeout_s({pg.TIMEOUT_ENV: "0"})
    assert pg.collective_timeout_s({}) == pg.DEFAULT_TIMEOUT_S


def test_engine_exits_2_on_a_world_size_mismatch(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(launch.EXPECTED_WORLD_SIZE_ENV, "4")
    assert main(["--device", "cpu", "--test-steps", "1", "--progress", "off"]) == 2
    assert "submitted for 4 processes" in capsys.readouterr().err


# ---------------------------------------------------------------- a rank that dies ends the run promptly


def _rank_one_raises() -> str:
    """Rank 1 fails before joining; rank 0 waits in the rendezvous (inside C++, deaf to SIGINT)."""
    with launch.stop_peers_on_failure():
        if int(os.environ["SUBMITIT_LOCAL_GLOBALID"]) == 1:
            time.sleep(RANK_ONE_DELAY_S)  # rank 0 is waiting for it by then
            raise RuntimeError("planted failure on rank 1")
        with pg.process_group("cpu") as ctx:
            pg.barrier(ctx)
        return "rank 0 finished"


def test_local_executor_task_failure_stops_its_peers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(pg.TIMEOUT_ENV, LONG_TIMEOUT_S)  # not the timeout: the failing task stops its peer
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    executor = submitit.AutoExecutor(folder=tmp_path, cluster="local")
    executor.update_parameters(tasks_per_node=WORLD, timeout_min=10)
    started = time.monotonic()
    # the function travels by value: the tasks import what it uses (launch, process_group), not this module
    # with the engine and torch._dynamo (~10 s more per task on a busy 2-core machine)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        job = executor.submit(_rank_one_raises)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    while ("planted failure" not in (job.task(1).stderr() or "") and not job.done()
           and time.monotonic() - started < STARTUP_ALLOWANCE_S):
        time.sleep(0.5)  # the clock starts when rank 1 has failed, however long starting the tasks took
    failed = time.monotonic()
    while not job.done() and time.monotonic() - failed < PROMPT_FAILURE_S:
        time.sleep(0.5)
    elapsed = time.monotonic() - failed
    if not job.done():
        job.cancel()
    assert elapsed < PROMPT_FAILURE_S, "rank 0 kept waiting for the rank that failed"
    assert "planted failure on rank 1" in job.task(1).stderr()
    assert "stopping its 1 sibling task" in job.task(1).stderr()
    with pytest.raises(submitit.core.utils.UncompletedJobError):  # stopped: no result
        job.task(0).result()


FAIL_AT_STEP = """
import sys, os
from coursekit.train import loop, engine
original = loop.Trainer._train_step
def failing(self, inputs, targets):
    if self.ctx.rank == 1 and self.pos.step == 3:
        raise RuntimeError("planted failure on rank 1 at step 3")
    return original(self, inputs, targets)
loop.Trainer._train_step = failing
sys.exit(engine.main(sys.argv[1:]))
"""


def test_engine_rank_failing_mid_run_fails_the_other_rank_promptly(tmp_path: Path) -> None:
    """Two processes with no launcher to stop them: gloo tells rank 0 that its peer has gone."""
    with launch.held_ports(1) as (port,):  # held until the ranks end: no other test takes it
        args = ["--device", "cpu", "--model", "mlp", "--dataset", "generated", "--num-samples", "400",
                "--image-size", "8", "--batch-size", "8", "--epochs", "50", "--progress", "off",
                "--out", str(tmp_path / "run")]
        processes = []
        for rank in range(WORLD):
            env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(WORLD),
                   "MASTER_ADDR": launch.LOCALHOST, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": str(ROOT), pg.TIMEOUT_ENV: LONG_TIMEOUT_S}
            processes.append(subprocess.Popen([sys.executable, "-c", FAIL_AT_STEP, *args], env=env,
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        try:
            code_1 = processes[1].wait(timeout=STARTUP_ALLOWANCE_S)
            rank_1_ended = time.monotonic()
            code_0 = processes[0].wait(timeout=PROMPT_FAILURE_S)
            gap = time.monotonic() - rank_1_ended
        finally:
            for p in processes:
                if p.poll() is None:
                    p.kill()
    outputs = [p.stdout.read() for p in processes]
    assert code_1 != 0 and "planted failure on rank 1" in outputs[1]
    assert code_0 != 0 and gap < PEER_NOTICE_S, (gap, outputs[0])
    assert summary(read_metrics(tmp_path / "run"))["status"] == "failed"  # rank 0 wrote why it stopped
