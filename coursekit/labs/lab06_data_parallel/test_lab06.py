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


def _bucket_rows(allreduce_ms, params, one_bucket, buckets, compute=20.0, bf16_ms=None):
    rows = [{"setting": "compute only (no_sync)", "step_ms": compute},
            {"setting": "all-reduce only (x MB at once)", "step_ms": allreduce_ms},
            {"setting": "one bucket", "bucket_cap_mb": 1000.0, "step_ms": one_bucket},
            {"setting": "buckets of 25 MB", "bucket_cap_mb": 25.0, "step_ms": buckets}]
    if bf16_ms is not None:
        rows.append({"setting": "all-reduce only, bf16 compression", "step_ms": bf16_ms, "compressed": True})
    return [{**r, "params": params} for r in rows]


NVLINK = _bucket_rows(allreduce_ms=1.8, params=134_000_000, one_bucket=19.0, buckets=18.9)


@pytest.mark.parametrize(("network", "expected"), [
    (_bucket_rows(30.0, 33_500_000, one_bucket=50.0, buckets=40.0, bf16_ms=16.0),
     {"sockets_slower": True, "buckets_faster": True, "bf16_halves": True}),
    # planted wrong: as fast as NVLink per MB, buckets slower than one bucket, bf16 no cheaper than fp32
    (_bucket_rows(0.45, 33_500_000, one_bucket=20.0, buckets=21.0, bf16_ms=0.45),
     {"sockets_slower": False, "buckets_faster": False, "bf16_halves": False}),
    # this run's sockets table on 2 x H200 (2026): 8.3 ms faster >= 25 % of 16.8 ms
    (_bucket_rows(41.2, 33_500_000, one_bucket=63.1, buckets=54.8, compute=16.8, bf16_ms=21.7),
     {"sockets_slower": True, "buckets_faster": True, "bf16_halves": True}),
    # planted: buckets only 4 ms faster than one bucket, under 25 % of 16.8 ms = 4.2 ms
    (_bucket_rows(41.2, 33_500_000, one_bucket=58.8, buckets=54.8, compute=16.8, bf16_ms=21.7),
     {"sockets_slower": True, "buckets_faster": False, "bf16_halves": True}),
])
def test_the_network_claims_hold_on_a_slow_link_and_fail_on_planted_rows(network, expected):
    assert dp.network_claims(NVLINK, network) == expected
    effects = dp.network_effects(network)
    assert effects["saved_ms"] == network[2]["step_ms"] - network[3]["step_ms"]
    assert effects["overlap_room_ms"] == min(network[0]["step_ms"], network[1]["step_ms"])


def test_hidden_ms_is_the_tables_hidden_share_of_the_allreduce():
    """One definition: the ms hidden the notebook prints is the best buckets' `hidden` x the all-reduce alone."""
    network = _bucket_rows(41.2, 33_500_000, one_bucket=63.1, buckets=54.8, compute=16.8, bf16_ms=21.7)
    effects = dp.network_effects(network)
    assert effects["hidden_ms"] == pytest.approx(dp.hidden_share(16.8, 41.2, 54.8) * 41.2)
    assert effects["hidden_ms"] == pytest.approx(3.2)  # not one bucket - best (8.3 ms)
    assert effects["saved_ms"] == pytest.approx(8.3)


def test_a_compressed_rows_hidden_share_is_against_the_bf16_allreduce():
    """The run's bf16 row: 4 MB buckets with compression, 32.4 ms; bf16 all-reduce alone 21.7 ms, fp32 41.2 ms."""
    assert dp.hidden_share(16.8, 21.7, 32.4) == pytest.approx(0.281, abs=1e-3)
    assert dp.hidden_share(16.8, 41.2, 32.4) == pytest.approx(0.621, abs=1e-3)  # what the fp32 one made of it
    import inspect

    from coursekit.labs.lab06_data_parallel import buckets
    source = inspect.getsource(buckets.bucket_overlap)
    assert "hidden_share(compute, comm_bf16, seconds)" in source


def test_the_transport_is_named_from_the_backend_and_the_nccl_environment():
    from coursekit.labs.lab06_data_parallel.buckets import transport

    assert transport("gloo", {}) == "gloo over TCP"
    assert transport("nccl", dict(dp.SOCKET_ENV)) == "NCCL over TCP sockets"
    assert transport("nccl", {"NCCL_P2P_DISABLE": "1"}) == "NCCL over the node's links"
    assert "NCCL_NET" in dp.settings("gpu")["network"]["env"] and dp.settings("cpu")["network"] is None


# --- where the weak-scaling loss goes: the split and its claims on planted rows ------------------------------

def _weak(step_2_ms: float, data_2_ms: float, efficiency: float) -> list[dict]:
    """Rows shaped like the GPU run's: ResNet-50 bf16 at 256 per GPU, a 54.4 ms step on one GPU (0.3 ms of it
    waiting between steps); 25.6 M parameters (102 MB of fp32 gradients, ~0.4 ms to all-reduce over NVLink)."""
    one = {"n_gpu": 1, "step_time_s": 0.0544, "data_time_s": 0.0003, "compute_time_s": 0.0541,
           "num_parameters": 25_557_032, "efficiency": 1.0}
    two = {"n_gpu": 2, "step_time_s": step_2_ms / 1000, "data_time_s": data_2_ms / 1000,
           "compute_time_s": (step_2_ms - data_2_ms) / 1000, "num_parameters": 25_557_032, "efficiency": efficiency}
    return [one, two]


LINKS_MS_PER_MB = 0.004  # the notebook's all-reduce alone over NVLink (1.8 ms for 512 MB of gradients)


def test_the_split_holds_on_rows_shaped_like_the_gpu_runs() -> None:
    from coursekit.labs.lab06_data_parallel import split_claims, step_split

    for step_2, efficiency in ((56.1, 0.969), (58.9, 0.923), (62.2, 0.874)):  # idle host, notebook, busy host
        split = step_split(_weak(step_2, 0.4, efficiency), LINKS_MS_PER_MB)
        assert 0.3 < split["allreduce"] < 0.5 and abs(split["extra"] - (step_2 - 54.4)) < 1e-9
        assert split_claims(split) == {"efficiency": True, "allreduce_minor": True, "in_compute": True}
    text = dp.describe_split(step_split(_weak(62.2, 0.4, 0.874), LINKS_MS_PER_MB))
    assert "weak-scaling efficiency 0.874" in text
    assert "waiting for the other rank and DDP's own work (not separated here)" in text
    assert "within the noise" in dp.describe_split(step_split(_weak(54.0, 0.3, 1.0), LINKS_MS_PER_MB))


def test_planted_wrong_splits_fail_their_claims() -> None:
    from coursekit.labs.lab06_data_parallel import split_claims, step_split

    assert split_claims(step_split(_weak(68.0, 0.4, 0.79), LINKS_MS_PER_MB))["efficiency"] is False
    # a slow link: the all-reduce alone (102 MB at 0.1 ms/MB = 10 ms) explains the extra 7.8 ms
    assert split_claims(step_split(_weak(62.2, 0.4, 0.874), 0.1))["allreduce_minor"] is False
    # the extra time in the waiting between steps (a starved host), not in compute
    assert split_claims(step_split(_weak(62.2, 6.0, 0.874), LINKS_MS_PER_MB))["in_compute"] is False
    # no visible loss (0.2 ms of 54.4): nothing to explain, reported as not seen
    assert split_claims(step_split(_weak(54.6, 0.3, 0.996), LINKS_MS_PER_MB))["allreduce_minor"] is None
    assert step_split(_weak(56.1, 0.4, 0.969)[1:], LINKS_MS_PER_MB) is None  # no 1-GPU row


# --- the bucket rows over the node's links: the buckets DDP made, and the claim on them ----------------------

def _links_rows(allreduce_ms=1.87, steps=(19.0, 19.0, 19.0), hidden=(-0.349, -0.327, -0.323)):
    """Rows shaped like the 2 x H200 run: an MLP of 8 layers of width 4096 (64 MB of weight per layer); the 1000 MB
    cap gives 1 bucket, the 25 MB and 4 MB caps the same 8 (one per layer)."""
    one, per_layer = [537_001_984], [67_125_248] * 8
    rows = [{"setting": "compute only: forward + backward (no_sync)", "step_ms": 16.5},
            {"setting": "all-reduce only (512 MB at once)", "step_ms": allreduce_ms}]
    for cap, sizes, step, share in zip((1000.0, 25.0, 4.0), (one, per_layer, per_layer), steps, hidden, strict=True):
        rows.append({"setting": dp.bucket_label(cap, sizes), "bucket_cap_mb": cap, "bucket_sizes": sizes,
                     "step_ms": step, "hidden": share})
    return [{**r, "params": 134_250_496, "largest_grad_mb": 64.0} for r in rows]


def test_bucket_rows_name_the_buckets_ddp_made():
    rows = _links_rows()
    assert [r["setting"] for r in rows[2:]] == ["cap 1000 MB (one bucket): 1 bucket of 512 MB",
                                                "cap 25 MB: 8 buckets of 64 MB", "cap 4 MB: 8 buckets of 64 MB"]
    assert dp.bucket_label(25.0, None) == "cap 25 MB"
    assert dp.bucket_label(25.0, [16 * 2**20, 32 * 2**20]) == "cap 25 MB: 2 buckets of 16-32 MB"
    assert [caps for caps, _ in dp.bucket_layouts(rows)] == [[1000.0], [25.0, 4.0]]
    text = dp.describe_bucket_layouts(rows)
    assert "the same 8 buckets of 64 MB with the 25 MB and 4 MB caps" in text
    assert "each weight here (64 MB) is larger than both caps: they make no difference here" in text


def test_ddp_reports_the_buckets_it_rebuilt():
    class Logged:
        def _get_ddp_logging_data(self):
            return {"bucket_sizes": "537001984", "rebuilt_bucket_sizes": "67125248, 67125248"}

    assert dp.ddp_bucket_sizes(Logged()) == [67_125_248, 67_125_248]
    assert dp.ddp_bucket_sizes(object()) is None  # neither the logging data nor a module: no sizes, no error


@pytest.mark.parametrize(("default_cap", "sizes_mib"), [
    (True, [16, 32, 32, 32, 16]),  # bucket_cap_mb=None: DDP's 1 MiB first bucket takes the last layer alone
    (False, [32, 32, 32, 32]),     # bucket_cap_mb=25 set explicitly: no small first bucket
])
def test_the_fallback_bucket_sizes_keep_ddps_small_first_bucket_only_at_the_default_cap(default_cap, sizes_mib):
    """Without DDP's logging data, the sizes torch assigns; the 2048-wide MLP of the sockets table (torch 2.14 on
    a real DDP gave these sizes from its logging data, for both caps)."""
    import torch

    class Unlogged:  # a DDP model's attributes the fallback reads, without a process group
        module = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048, device="meta") for _ in range(8)])
        bucket_bytes_cap = 25 * 2**20
        bucket_bytes_cap_default = default_cap

    sizes = dp.ddp_bucket_sizes(Unlogged())
    assert [round(size / 2**20) for size in sizes] == sizes_mib


@pytest.mark.parametrize(("one", "best", "expected"), [
    # the 2 x H200 sockets run: compute 16.8, all-reduce 44.7, one bucket 67.6, best buckets 57.2 ms
    (67.6, 57.2, "of the best buckets' 10.4 ms against one bucket, 6.1 ms is the one-bucket row's own extra over "
                 "compute + all-reduce (its cause is not measured here) and 4.3 ms is what overlap hid"),
    (60.0, 55.0, "one bucket took no longer than compute + all-reduce one after the other (1.5 ms less): the best "
                 "buckets' 5.0 ms against it is overlap beyond one bucket's"),
    (67.6, 62.0, "the best buckets' 5.6 ms against one bucket all come from the one-bucket row's own extra over "
                 "compute + all-reduce (6.1 ms; its cause is not measured here): overlap hid nothing"),
    (60.0, 61.0, "the best buckets were no faster than one bucket (1.0 ms slower)"),
])
def test_the_saving_against_one_bucket_is_split_into_its_extra_and_the_overlap(one, best, expected):
    effects = dp.network_effects(_bucket_rows(44.7, 33_500_000, one_bucket=one, buckets=best, compute=16.8,
                                              bf16_ms=21.8))
    assert effects["saved_ms"] == pytest.approx(effects["one_bucket_extra_ms"] + effects["hidden_ms"])
    assert dp.describe_saving(effects) == expected
    assert dp.describe_saving({**effects, "one_bucket_extra_ms": None}) == ""


def test_the_links_claim_holds_on_the_gpu_run_and_fails_on_planted_rows():
    holds, text = dp.links_claim(_links_rows())
    assert holds and "buckets: 1 (1000 MB cap), 8 (25 and 4 MB caps)" in text and "hidden at most -0.32" in text
    assert not dp.links_claim(_links_rows(allreduce_ms=4.0))[0]  # the all-reduce 21 % of a step
    assert not dp.links_claim(_links_rows(steps=(19.0, 20.5, 19.0)))[0]  # a bucket row 7.9 % slower


def _pair_sweep():
    """The 2 x H200 run's sweep: ResNet-50 bf16 at 128 and 256 images per GPU on 1 and 2 GPUs."""
    return ResultsTable([{"n_gpu": n, "batch_size": b, "images_per_s_median": rate, "step_time_s": step}
                         for n, b, rate, step in [(1, 128, 3798.0, 0.0337), (1, 256, 4444.0, 0.0576),
                                                  (2, 128, 5948.0, 0.0431), (2, 256, 8256.0, 0.0619)]])


def test_every_weak_pair_of_the_sweep_is_shown_and_the_extra_time_is_not_called_fixed():
    pairs = dp.weak_pairs(_pair_sweep())
    assert pairs.column("batch_per_gpu") == [128, 256]
    assert [round(e, 3) for e in pairs.column("efficiency")] == [0.783, 0.929]
    assert [round(x, 1) for x in pairs.column("extra_ms")] == [9.4, 4.3]
    assert dp.other_weak_pairs(pairs, 256) == "; not claimed: 128 per GPU 0.783"
    text = dp.extra_time_text(pairs)
    assert text.startswith("The extra time 2 GPUs add did not stay fixed: +9.4 ms a step at 128 images per GPU "
                           "against +4.3 ms at 256 (2.2x at the smaller batch)")
    # planted: the same extra time (+4.3 ms) at both batches is not called "did not stay fixed"
    flat = ResultsTable([{**r, "step_time_s": 0.0337 + 0.0043 if (r["n_gpu"], r["batch_size"]) == (2, 128)
                          else r["step_time_s"]} for r in _pair_sweep()])
    assert "did not stay fixed" not in dp.extra_time_text(dp.weak_pairs(flat))
    assert dp.extra_time_text(pairs[1:]) == "" and dp.other_weak_pairs(pairs[1:], 256) == ""
