"""Every lab has settings in both profiles; the cpu ones are valid engine configurations."""

import pytest

from coursekit.labs.settings import LABS, lab_settings
from coursekit.train.config import TrainConfig, validate


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
    with pytest.raises(ValueError, match="lab='07' is not a lab"):
        lab_settings("07", "cpu")
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
