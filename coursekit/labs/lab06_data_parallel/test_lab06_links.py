"""Lab 06: the buckets, the links and where the time of a second GPU goes: claims on rows shaped like the GPU
runs, failing on planted ones."""

import pytest

from coursekit.labs import lab06_data_parallel as dp
from coursekit.labs.kit.results import ResultsTable


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
