"""Site profiles: every shipped TOML loads, the selection order, course overrides, detection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.sites import SITE_ENV, Site, load_site, site_names, visible_gpu_count

SHIPPED = ("local", "slurm", "jean-zay", "juwels-booster", "hipergator-ai", "grete")
CENTRES = ("jean-zay", "juwels-booster", "hipergator-ai", "grete")
COMMAND_TIMEOUT_S = 60


@pytest.fixture()
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.delenv(SITE_ENV, raising=False)
    return tmp_path


def test_every_shipped_profile_loads(course: Path) -> None:
    assert set(SHIPPED) <= set(site_names())
    for name in site_names():
        site = load_site(name)
        assert isinstance(site, Site) and site.name == name
        assert site.scheduler in ("local", "slurm")


@pytest.mark.parametrize("name", CENTRES)
def test_centre_profiles_say_where_their_values_come_from(course: Path, name: str) -> None:
    site = load_site(name)
    assert site.values_from == "public documentation"
    assert site.source.startswith("http")
    assert site.partitions and site.partition in site.partitions
    for partition in site.partitions.values():
        assert partition.gpus_per_node > 0 and partition.cpus_per_gpu > 0


def test_documented_gpus_per_node(course: Path) -> None:
    jz = load_site("jean-zay")
    assert {p: jz.partitions[p].gpus_per_node for p in ("gpu_p13", "gpu_p2", "gpu_p5", "gpu_p6")} == {
        "gpu_p13": 4, "gpu_p2": 8, "gpu_p5": 8, "gpu_p6": 4}
    assert jz.account_required and jz.hint_nomultithread
    assert load_site("juwels-booster").node_shape().gpus_per_node == 4
    assert load_site("hipergator-ai").node_shape().gpus_per_node == 8
    assert load_site("grete").node_shape().gpus_per_node == 4


def test_selection_order_argument_env_course_file(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (course / "coursekit.toml").write_text('site = "grete"\n')
    assert load_site().name == "grete"
    monkeypatch.setenv(SITE_ENV, "juwels-booster")
    assert load_site().name == "juwels-booster"
    assert load_site("hipergator_ai").name == "hipergator-ai"  # underscores and case are forgiven


def test_default_is_slurm_only_where_sbatch_exists(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coursekit.sites.shutil.which", lambda cmd: None)
    assert load_site().name == "local"
    monkeypatch.setattr("coursekit.sites.shutil.which", lambda cmd: f"/usr/bin/{cmd}")
    assert load_site().name == "slurm"


def test_unknown_site_names_the_choices(course: Path) -> None:
    with pytest.raises(ValueError, match="site='nowhere' is unknown.*jean-zay"):
        load_site("nowhere")


def test_unknown_partition_names_the_choices(course: Path) -> None:
    with pytest.raises(ValueError, match="partition='gpu_p99'.*gpu_p13"):
        load_site("jean-zay").node_shape("gpu_p99")


def test_course_overrides_apply_to_their_site_only(course: Path) -> None:
    (course / "coursekit.toml").write_text(
        'site = "jean-zay"\n[site_defaults]\naccount = "abc"\npartition = "gpu_p5"\nmodules = ["pytorch-gpu/py3/2.5.0"]\n')
    site = load_site()
    assert (site.account, site.partition, site.modules) == ("abc", "gpu_p5", ("pytorch-gpu/py3/2.5.0",))
    assert site.full_account(None) == "abc@a100"  # the partition's suffix is added to a bare account
    assert site.full_account("xyz@v100", "gpu_p13") == "xyz@v100"
    assert load_site("grete").account is None  # written for jean-zay, not applied to grete


def test_override_of_an_unknown_field_is_refused(course: Path) -> None:
    (course / "coursekit.toml").write_text('[site_defaults]\ncolour = "blue"\n')
    with pytest.raises(ValueError, match="cannot set \\['colour'\\]"):
        load_site("slurm")


def test_a_profile_file_path_is_a_site(course: Path) -> None:
    profile = course / "mine.toml"
    profile.write_text('name = "mine"\nscheduler = "slurm"\n[partitions.big]\ngpus_per_node = 2\ncpus_per_gpu = 6\n')
    site = load_site(str(profile))
    assert site.name == "mine" and site.partition == "big" and site.node_shape().cpus_per_gpu == 6


def test_local_without_gpu_counts_processes(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    shape = load_site("local").node_shape()
    assert shape.cpu_only and shape.gpus_per_node == load_site("local").max_cpu_processes
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    shape = load_site("local").node_shape()
    assert not shape.cpu_only and shape.gpus_per_node == 3


def test_visible_gpu_count_reads_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert visible_gpu_count() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpu_count() == 2


def test_generic_slurm_learns_gpus_from_sinfo(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"name": "cpu", "default": True, "gpus_per_node": 0, "cpus": 64, "nodes": 9},
            {"name": "gpu", "default": False, "gpus_per_node": 4, "cpus": 16, "nodes": 2},
            {"name": "gpu", "default": False, "gpus_per_node": 2, "cpus": 16, "nodes": 5}]
    monkeypatch.setattr("coursekit.slurm_cli.sinfo_partitions", lambda: rows)
    site = load_site("slurm")
    shape = site.node_shape("gpu")
    assert (shape.gpus_per_node, shape.cpus_per_gpu, shape.max_nodes) == (4, 4, 2)  # 2 nodes with 4 GPUs
    with pytest.raises(ValueError, match="sinfo shows no GPU"):
        site.node_shape()  # the default partition has no GPU
    with pytest.raises(ValueError, match="partition='big' is not on this cluster"):
        site.node_shape("big")


@pytest.mark.parametrize("partition, constraint, account, chosen", [
    (None, None, "abc", "gpu_p13"),  # the default: V100, 4 GPUs per node
    (None, None, "abc@v100", "gpu_p13"),
    ("gpu_p2", None, "abc@v100", "gpu_p2"),
    (None, "a100", "abc", "gpu_p5"),  # idr_pytools: -C a100 selects the A100 nodes
    (None, None, "abc@a100", "gpu_p5"),  # ... and so does an A100 account
    (None, "h100", None, "gpu_p6"),
    (None, None, "abc@h100", "gpu_p6"),
    (None, "v100-32g", "abc", "gpu_p13"),  # a V100 constraint stays on the default partition
])
def test_jean_zay_partition_follows_constraint_and_account(course: Path, partition: str | None,
                                                           constraint: str | None, account: str | None,
                                                           chosen: str) -> None:
    assert load_site("jean-zay").select_partition(partition, constraint, account) == chosen


@pytest.mark.parametrize("partition, constraint, account, words", [
    ("gpu_p13", "a100", "abc", "constraint='a100' selects partition 'gpu_p5'"),
    ("gpu_p13", None, "abc@h100", "account='abc@h100'.*'...@v100'"),
    (None, "a100", "abc@h100", "account='abc@h100'"),
])
def test_jean_zay_refuses_a_partition_its_hours_cannot_pay(course: Path, partition: str | None,
                                                           constraint: str | None, account: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        load_site("jean-zay").select_partition(partition, constraint, account)


def test_jean_zay_architecture_modules_and_cpus(course: Path) -> None:
    jz = load_site("jean-zay")
    assert jz.partitions["gpu_p5"].arch_module == "cpuarch/amd" and jz.partitions["gpu_p5"].cpus_per_gpu == 8
    assert jz.partitions["gpu_p6"].arch_module == "arch/h100" and jz.partitions["gpu_p6"].cpus_per_gpu == 24
    assert jz.partitions["gpu_p13"].arch_module is None


def test_one_owner_of_the_jobs_folder(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.course import jobs_dir

    assert load_site("slurm").jobs_root() == jobs_dir() == course / "jobs"
    monkeypatch.setenv("SCRATCH_FOR_TEST", str(course / "scratch"))
    (course / "coursekit.toml").write_text('site = "slurm"\n[site_defaults]\nlog_folder = "$SCRATCH_FOR_TEST/jobs"\n')
    assert load_site().jobs_root() == jobs_dir("$SCRATCH_FOR_TEST/jobs") == course / "scratch" / "jobs"
    done = subprocess.run([sys.executable, "-m", "coursekit.sites"], capture_output=True, text=True, check=True,
                          timeout=COMMAND_TIMEOUT_S)  # what the sbatch templates ask
    assert done.stdout.strip() == str(course / "scratch" / "jobs")
