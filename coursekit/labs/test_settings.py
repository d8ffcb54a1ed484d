"""Every lab has settings in both profiles (``labs.lab_settings``, from each lab module's ``settings``); the cpu
ones are valid engine configurations."""

import re
from pathlib import Path

import pytest

from coursekit.labs import LAB_MODULES, LABS, lab_declarations, lab_gpus, lab_settings
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig


@pytest.mark.parametrize("lab", sorted(LABS))
@pytest.mark.parametrize("profile", ["cpu", "gpu"])
def test_settings_exist_and_print(lab, profile):
    settings = lab_settings(lab, profile)
    assert repr(settings).startswith(f"Lab {lab} settings ({profile} profile):")
    assert settings.job["time_max"] and settings.timeout_s > 0
    assert settings.job["env"] == ({"OMP_NUM_THREADS": "1"} if profile == "cpu" else {})
    with pytest.raises(AttributeError, match="no setting 'nope'"):
        settings.nope  # noqa: B018


@pytest.mark.parametrize("lab", sorted(LABS))
def test_cpu_configs_pass_the_engine_checks(lab):
    for value in lab_settings(lab, "cpu").values():
        if isinstance(value, TrainConfig):
            config = value.replace(data_dir=".") if value.dataset == "jpeg_folder" else value
            validate(config)


def test_unknown_lab_or_profile():
    with pytest.raises(ValueError, match="lab='99' is not a lab"):
        lab_settings("99", "cpu")
    with pytest.raises(ValueError, match="lab='99' is not a lab"):
        lab_gpus("99")
    with pytest.raises(ValueError, match="profile='tpu' is not a profile"):
        lab_settings("01", "tpu")


def test_lab01_noise_runs_measure_at_the_starting_point():
    s = lab_settings("01", "cpu")
    assert s.noise_base.steps == 1 and s.noise_base.grad_noise_batches > 0
    assert max(s.noise_batch_sizes) < s.points and s.batch_sizes[0] == s.points  # full batch first


@pytest.mark.parametrize("lab", sorted(LABS))
def test_gpu_configs_pass_the_static_engine_checks(lab, tmp_path):
    settings = lab_settings(lab, "gpu")
    configs = [v for v in settings.values() if isinstance(v, TrainConfig)]
    for name in ("ladder", "loaders"):  # the variations a lab applies to its base configurations
        base = settings.get("ladder_base") if name == "ladder" else settings.get("base")
        configs += [base.replace(**change) for change in settings.get(name) or []]
    for config in configs:
        needs_folder = config.data_dir or config.dataset in ("jpeg_folder", "cifar10", "imagefolder")
        validate(config.replace(data_dir=str(tmp_path)) if needs_folder else config)


@pytest.mark.parametrize("lab", sorted(LABS))
def test_gpu_labs_fit_a_room_sharing_a_partition(lab):
    """Every lab's gpu profile states its GPU-minutes per participant; a room of ROOM must fit the partition
    in the lab's slot (lab 06 fits only with its sweep run once per team: test_team.py)."""
    from coursekit.labs.kit.settings import GPU_MINUTES_PER_PARTICIPANT, ROOM

    s = lab_settings(lab, "gpu")
    assert "budget" in s, f"lab {lab}'s gpu settings state no workshop budget (kit.settings.workshop_budget)"
    budget = s.budget
    assert budget["participants"] == ROOM and budget["jobs"] > 0
    assert 0 < budget["gpu_minutes_per_participant"] <= GPU_MINUTES_PER_PARTICIPANT
    assert f"{budget['gpu_minutes_per_participant']:g} GPU-minutes per participant" in repr(s)


def test_gpu_workloads_are_workshop_sized():
    lab02, lab05 = lab_settings("02", "gpu"), lab_settings("05", "gpu")
    assert lab02.longer_max_steps * max(lab02.batch_sizes) <= 50 * 50_000  # the exercise: <= 50 CIFAR-10 epochs
    assert lab05.jpeg_classes * lab05.jpeg_images_per_class <= 6_000  # JPEGs per course, not 13,000 each
    # a GPU job runs on the GPU it holds (LAB-REVIEW-3: CPU runs each reserved a GPU); the CPU run on the CPU
    assert lab_settings("01", "gpu").base.device == "auto" and lab_settings("01", "cpu").base.device == "cpu"


@pytest.mark.parametrize("lab, names", [("00", ["first_job", "long_job"]), ("02", ["base"]), ("04", ["base"])])
def test_cifar10_absent_means_one_notice_and_the_standin(lab, names, tmp_path, monkeypatch):
    from coursekit.labs.kit.datasets import STANDIN_MARK
    from coursekit.train.data import fashion_mnist

    monkeypatch.setenv("COURSEKIT_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(fashion_mnist, "DEBIAN_DIR", tmp_path / "no-debian-copy")  # no real data at all
    s = lab_settings(lab, "gpu")
    assert repr(s).splitlines()[1].startswith(STANDIN_MARK) and repr(s).count(STANDIN_MARK) == 1
    assert all(s[name].dataset == "generated" and s[name].num_classes == 10 for name in names)
    (tmp_path / "cifar-10-batches-py").mkdir()
    for name in ("data_batch_1", "test_batch"):
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(b"x")
    s = lab_settings(lab, "gpu")
    assert s.dataset_notice is None and all(s[name].dataset == "cifar10" for name in names)


def test_every_lab_module_declares_its_numbers_and_gpus():
    """The declaration read from a module's text is the module's ``LAB``; its ``GPUS`` is the declared one."""
    assert list(LABS) == [f"{n:02d}" for n in range(11)]
    for lab, module in LAB_MODULES.items():
        assert module.startswith(f"lab{lab}_") and LABS[lab].__name__ == f"coursekit.labs.{module}"
        assert callable(LABS[lab].settings) and lab_gpus(lab) >= 1
        assert LABS[lab].LAB == lab_declarations()[lab] and LABS[lab].GPUS == lab_gpus(lab), f"lab {lab}"
    assert {lab: lab_gpus(lab) for lab in LABS if lab_gpus(lab) > 1} == {"06": 2, "08": 2, "10": 2}


def test_profile_settings_are_the_labs():
    from coursekit.labs.kit.profiles import Profile

    assert dict(Profile("cpu", "test").settings("02")) == dict(lab_settings("02", "cpu"))


def test_the_kit_imports_no_lab_module():
    import ast
    from pathlib import Path

    kit = Path(__file__).resolve().parent / "kit"
    for path in kit.glob("*.py"):
        if path.name.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                assert not any(n.startswith("coursekit.labs.lab") or n == "coursekit.labs" for n in names), \
                    f"{path.name} imports {node.module}"



def test_lab09s_room_budget_counts_the_instructors_verification_once():
    """`instructor race verify` re-runs the top entries' seeds once for the room: in its GPU-hours, said apart."""
    from coursekit.labs.kit.settings import ROOM
    from coursekit.labs.lab09_race.rerun import DEFAULT_TOP

    s = lab_settings("09", "gpu")
    budget = s.budget
    assert budget["room_gpu_minutes"] == DEFAULT_TOP * s.seeds * 3.0
    assert budget["gpu_hours_room"] == round((ROOM * budget["gpu_minutes_per_participant"]
                                              + budget["room_gpu_minutes"]) / 60, 1)
    assert "GPU-minutes of them run once for the room (race verify" in repr(s)


def test_the_readmes_budget_table_is_the_labs_settings():
    """README.md's GPU budget table: one row per lab, its numbers those of the lab's gpu settings."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = {m[1]: m.groups()[1:] for m in re.finditer(r"^\| (\d\d) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", readme, re.M)}
    assert sorted(rows) == list(LABS), "README.md's budget table lists every lab once"
    for lab, (gpus, minutes, hours, share) in rows.items():
        budget = lab_settings(lab, "gpu").budget
        assert (int(gpus), float(minutes), float(hours), float(share)) == (
            lab_gpus(lab), budget["gpu_minutes_per_participant"], budget["gpu_hours_room"],
            budget["share_of_partition"]), f"lab {lab}'s row in README.md"
