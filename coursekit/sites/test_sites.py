"""Site profiles: every shipped TOML loads, the selection order, course overrides, detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit.sites import SITE_ENV, Site, load_site, site_names, visible_gpu_count

SHIPPED = ("local", "slurm", "jean-zay", "juwels-booster", "hipergator-ai", "grete")
CENTRES = ("jean-zay", "juwels-booster", "hipergator-ai", "grete")


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
    rows = [{"name": "cpu", "default": True, "gpus_per_node": 0, "cpus": 64},
            {"name": "gpu", "default": False, "gpus_per_node": 4, "cpus": 16}]
    monkeypatch.setattr("coursekit.jobs.slurm_cli.sinfo_partitions", lambda: rows)
    site = load_site("slurm")
    shape = site.node_shape("gpu")
    assert (shape.gpus_per_node, shape.cpus_per_gpu) == (4, 4)
    with pytest.raises(ValueError, match="sinfo shows no GPU"):
        site.node_shape()  # the default partition has no GPU
    with pytest.raises(ValueError, match="partition='big' is not on this cluster"):
        site.node_shape("big")
