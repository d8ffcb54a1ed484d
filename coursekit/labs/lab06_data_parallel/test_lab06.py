"""Lab 06 helpers: sampler orders, DDP = serial in a real 2-process job, scaling tables, NCCL's log, sweeps
over GPU counts."""

import json

import pytest

from coursekit.labs import lab06_data_parallel as dp
from coursekit.labs.kit import experiments, recorded
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.test_experiments import StandInJob
from coursekit.train.config import TrainConfig

pytestmark = pytest.mark.slow  # processes of their own: left out of the fast tier (README)

# Two nodes of two GPUs, written by hand in NCCL's INFO format (as in public NCCL bug reports): NVLink
# inside a node, host memory between two GPUs without peer access, InfiniBand between the nodes.
TWO_NODE_LOG = """\
nodeA:700:750 [0] NCCL INFO Using network IB
NCCL version 2.19.3+cuda12.3
nodeA:700:750 [0] NCCL INFO comm 0x5600aa rank 0 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
nodeA:701:751 [1] NCCL INFO comm 0x5600ab rank 1 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0
nodeB:800:850 [0] NCCL INFO comm 0x5600ac rank 2 nRanks 4 nNodes 2 localRanks 2 localRank 0 MNNVL 0
nodeB:801:851 [1] NCCL INFO comm 0x5600ad rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0
nodeA:700:750 [0] NCCL INFO Channel 00/02 :    0   1   2   3
nodeA:700:750 [0] NCCL INFO Channel 01/02 :    0   1   2   3
nodeA:700:750 [0] NCCL INFO Trees [0] 1/2/-1->0->-1 [1] 1/-1/-1->0->2
nodeB:800:850 [0] NCCL INFO Trees [0] 3/-1/-1->2->0 [1] 3/0/-1->2->-1
nodeA:700:750 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
nodeA:701:751 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA
nodeB:800:850 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0/GDRDMA
nodeB:800:850 [0] NCCL INFO Channel 00 : 2[0] -> 3[1] via SHM/direct/direct
nodeA:700:750 [0] NCCL INFO 2 coll channels, 0 collnet channels, 0 nvls channels, 2 p2p channels, 1 p2p channels per peer
nodeA:700:750 [0] NCCL INFO comm 0x5600aa rank 0 nranks 4 cudaDev 0 busId 18000 commId 0x1 - Init COMPLETE
some line the training script printed
"""


def test_the_example_log_shows_rings_trees_and_nvlink_p2p():
    report = dp.parse_nccl_log(dp.EXAMPLE_NCCL_LOG)
    assert (report.version, report.network, report.nranks, report.hosts) == ("2.21.5+cuda12.4", "IB", 2, ["gpu-node1"])
    assert report.rings == {c: [0, 1] for c in range(4)}
    assert report.trees[0][0] == ([1], -1) and report.trees[1][3] == ([], 0)
    assert report.transports == {"P2P": 8}
    assert report.init_complete == 2 and report.coll_channels == 4
    assert "8 connection(s) via P2P" in report.summary()


def test_a_two_node_log_shows_the_network_and_shared_memory():
    report = dp.parse_nccl_log([TWO_NODE_LOG])
    assert (report.nranks, report.nnodes, report.hosts) == (4, 2, ["nodeA", "nodeB"])
    assert report.transports == {"P2P": 1, "NET": 2, "SHM": 1}
    assert report.trees[2][1] == ([3, 0], -1)  # the Trees line of nodeB's first process is rank 2's
    assert {c["direction"] for c in report.connections if c["transport"] == "NET"} == {"send", "receive"}
    assert dp.parse_nccl_log("no NCCL here\n").transports == {}


def test_without_set_epoch_every_epoch_repeats_the_order():
    fixed = dp.sampler_orders(16, 2, epochs=3, set_epoch=False)
    moving = dp.sampler_orders(16, 2, epochs=3, set_epoch=True)
    assert dp.same_order_every_epoch(fixed) and not dp.same_order_every_epoch(moving)
    epoch0 = [set(r["order"]) for r in moving if r["epoch"] == 0]
    assert epoch0[0].isdisjoint(epoch0[1]) and epoch0[0] | epoch0[1] == set(range(16))
    with pytest.raises(ValueError, match="world_size=4"):
        dp.sampler_orders(2, 4, epochs=1, set_epoch=True)


def test_one_process_is_its_own_serial_reference():
    result = dp.ddp_equivalence(steps=2, global_batch=8, val_samples=8)
    assert result["world_size"] == 1 and result["max_abs_dw"] == 0.0
    assert result["local_acc"] == result["averaged_acc"] == result["global_acc"]


def test_two_processes_equal_one_process_on_the_global_batch(tmp_path, monkeypatch):
    from coursekit.jobs import submit_function

    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    job = submit_function(dp.ddp_equivalence, n_gpu=2, name="dp-test", env={"OMP_NUM_THREADS": "1"})
    table = dp.equivalence_table(job.results(timeout=120))
    assert table.column("rank") == [0, 1] and table.column("world_size") == [2, 2]
    assert max(table.column("max_abs_dw")) <= dp.EQUIVALENCE_TOLERANCE_CPU
    local = table.column("local_acc")
    assert local[0] != local[1]  # each rank saw a different half of the validation set
    assert all(abs(r["averaged_acc"] - r["global_acc"]) < 1e-6 for r in table)


def sweep_table():
    rows = [{"n_gpu": n, "batch_size": b, "images_per_s_median": rate, "state": "COMPLETED"}
            for n, b, rate in [(1, 32, 100.0), (1, 64, 120.0), (2, 32, 150.0), (2, 64, 220.0)]]
    return ResultsTable(rows)


def test_strong_and_weak_scaling_come_from_one_sweep():
    assert dp.scaling_batches([1, 2, 4], batch_per_gpu=64, global_batch=256) == [64, 128, 256]
    with pytest.raises(ValueError, match="global_batch=10"):
        dp.scaling_batches([1, 4], 64, 10)
    strong, weak = dp.scaling_tables(sweep_table(), batch_per_gpu=64, global_batch=64)
    assert [(r["n_gpu"], r["batch_per_gpu"]) for r in strong] == [(1, 64), (2, 32)]
    assert strong[1]["speedup"] == pytest.approx(150 / 120) and strong[1]["efficiency"] == pytest.approx(150 / 240)
    assert [r["global_batch"] for r in weak] == [64, 128] and weak[1]["efficiency"] == pytest.approx(220 / 240)
    html = dp.rich(strong, note="measured here")._repr_html_()
    assert "<th>efficiency</th>" in html and "measured here" in html
    assert dp.scaling_figure(strong, weak, unit="processes") is not None


def test_missing_gpu_recording_is_said_plainly(tmp_path, capsys):
    assert recorded.load_recording("ddp_gpu", tmp_path / "none.json") is None
    assert recorded.NO_GPU_FIGURES in capsys.readouterr().out
    path = tmp_path / "ddp_gpu.json"
    recording = {"machine": {"gpus": 2, "device_name": "NVIDIA H200", "nccl": "2.21.5"}, "date": "2026-11-26T06:00",
                 "scaling": [{"mode": "weak", "world_size": 2, "img_s": 8769.0, "ok": True},
                             {"mode": "strong", "world_size": 2, "ok": False}],
                 "busbw": [{"world_size": 2, "binding": "node", "rows": [{"bytes": 2**20, "busbw_gbs": 14.0}]}],
                 "binding": {"node": {"busbw": {"log": "busbw_node_2.log"}}, "task": {"busbw": {"log": "gone.log"}}}}
    path.write_text(json.dumps(recording))
    (tmp_path / "ddp_gpu_logs").mkdir()
    (tmp_path / "ddp_gpu_logs" / "busbw_node_2.log").write_text(dp.EXAMPLE_NCCL_LOG)
    loaded = recorded.load_recording("ddp_gpu", path)
    table = dp.recorded_scaling_table(loaded)
    assert table.column("img_s") == [8769.0] and table.column("n_gpu") == [2]
    assert "2 x NVIDIA H200" in table.title and "NCCL 2.21.5" in table.title
    assert dp.recorded_busbw_table(loaded).column("1 MiB") == [14.0]
    assert list(dp.recorded_nccl_logs(loaded)) == ["node"]  # beside a result of bench/ddp_gpu.py
    packaged = {**loaded, "logs": {"task": "NCCL INFO from the package"}}
    assert dp.recorded_nccl_logs(packaged) == {"node": dp.EXAMPLE_NCCL_LOG, "task": "NCCL INFO from the package"}


def test_a_sweep_over_gpu_counts_runs_every_config_on_every_count(monkeypatch):
    calls = []

    def fake_submit_jobs(commands, n_gpu, name, time_max, **options):
        calls.append((commands, n_gpu))
        return [StandInJob(job_id=str(i)) for i in range(len(commands) * len(n_gpu))]

    monkeypatch.setattr("coursekit.jobs.submit_jobs", fake_submit_jobs)
    configs = [TrainConfig(batch_size=32), TrainConfig(batch_size=64)]
    sweep = experiments.submit_sweep(configs, name="scale", n_gpu=[1, 2])
    assert calls[0][1] == [1, 2] and len(calls[0][0]) == 2
    table = sweep.results(timeout_s=5)
    assert [(r["batch_size"], r["n_gpu"]) for r in table] == [(32, 1), (64, 1), (32, 2), (64, 2)]
    with pytest.raises(ValueError, match="n_gpu=\\[1, 0\\]"):
        experiments.submit_sweep(configs, name="scale", n_gpu=[1, 0])


def test_the_local_site_keeps_the_counts_it_can_run(capsys):
    from coursekit.sites import NodeShape

    class LocalSite:
        is_local = True

        def node_shape(self):
            return NodeShape(2, 1, cpu_only=True)

    assert dp.usable_gpu_counts([1, 2, 4, 8], LocalSite()) == [1, 2]
    assert "[4, 8] left out" in capsys.readouterr().out
    assert dp.usable_gpu_counts([1, 8], type("Cluster", (), {"is_local": False})()) == [1, 8]


def test_bucket_timing_needs_several_processes_and_reads_every_rank():
    with pytest.raises(RuntimeError, match="n_gpu=2"):
        dp.bucket_overlap(repeats=1, warmup=0)
    per_rank = [[{"rank": r, "world_size": 2, "setting": "one bucket", "step_ms": 10.0 + r}] for r in (0, 1)]
    assert dp.bucket_table(per_rank, rank=1).column("step_ms") == [11.0]


def test_the_two_node_sentence_follows_the_gpu_counts():
    from coursekit.sites import NodeShape

    class Cluster:
        is_local = False

        def node_shape(self):
            return NodeShape(4, 8)

    assert dp.two_node_text([1, 2, 4, 8], Cluster()) == "The sweep's 8-GPU jobs span 2 nodes of 4 GPUs."
    assert "not measured" in dp.two_node_text([1, 2, 4], Cluster())
    local = dp.two_node_text([1, 2], type("Local", (), {"is_local": True})())
    assert local.startswith("This machine is one node") and "not measured" in local  # the 2 x H200 run's case


def test_two_nodes_means_one_task_per_node_holding_its_gpus():
    from coursekit.sites import NodeShape

    class Cluster:
        is_local = False

        def __init__(self, max_nodes):
            self.max_nodes = max_nodes

        def node_shape(self):
            return NodeShape(4, 8, max_nodes=self.max_nodes)

    assert dp.two_node_options(Cluster(2)) == {"n_gpu": 8, "n_gpu_per_task": 4}
    assert dp.two_node_options(Cluster(1)) is None
    assert dp.two_node_options(type("Local", (), {"is_local": True})()) is None


def test_lab06_scaling_tables_carry_energy_only_where_measured():
    from coursekit.labs.kit.results import ResultsTable
    from coursekit.labs.lab06_data_parallel.scaling import scaling_tables

    def sweep(joules: float | None) -> ResultsTable:
        return ResultsTable([{"n_gpu": n, "batch_size": 32, "images_per_s_median": 100.0 * n,
                              "energy_per_image_j": joules, "energy_per_epoch_j": None if joules is None else joules * 10}
                             for n in (1, 2)])

    _, weak = scaling_tables(sweep(0.5), 32, 64)
    assert "energy_per_image_j" in weak.columns and weak[1]["energy_per_image_j"] == 0.5
    # per epoch would grow with the GPUs (a synthetic epoch is a number of global batches): not shown
    assert "energy_per_epoch_j" not in weak.columns and "energy_per_epoch_j" not in weak[1]
    assert dp.energy_columns(sweep(0.5)) == ["energy_per_image_j"] and dp.energy_columns(sweep(None)) == []
    _, weak = scaling_tables(sweep(None), 32, 64)
    assert "energy_per_image_j" not in weak.columns


def test_lab06_energy_ratio_is_read_as_power_per_gpu_over_the_efficiency():
    # the GPU run: 0.131 / 0.146 J per image at efficiency 0.933 -> each of the 2 GPUs drew 0.84 of the single one's
    text = dp.energy_reading(0.131 / 0.146, 0.933)
    assert "×0.84" in text and "equal power per GPU it would be 1.07×" in text and "more than their waiting" in text
    # efficiency 0.85, power 0.90: the waiting lowered the power, energy per image still grew (1.06)
    assert "as GPUs that wait for each other do" in dp.energy_reading(0.90 / 0.85, 0.85)
    assert "drew more power" in dp.energy_reading(1.3, 0.9)  # 1.17 of the single GPU's power
    assert "about the same" in dp.energy_reading(1 / 0.9, 0.9)
    assert dp.energy_reading(None, 0.9) is None and dp.energy_reading(0.9, None) is None
