"""Profile choice: argument > environment > coursekit.toml > GPU visible."""

import pytest

from coursekit.labs.kit import profiles


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.delenv(profiles.PROFILE_ENV, raising=False)
    return tmp_path


def test_argument_then_environment_then_toml(course, monkeypatch):
    (course / "coursekit.toml").write_text('profile = "gpu"\n')
    assert profiles.choose_profile("cpu").name == "cpu"
    assert profiles.choose_profile().name == "gpu"
    assert "coursekit.toml" in profiles.choose_profile().reason
    monkeypatch.setenv(profiles.PROFILE_ENV, "cpu")
    assert profiles.choose_profile().name == "cpu"


def test_default_follows_the_visible_gpu(course, monkeypatch):
    monkeypatch.setattr(profiles, "gpu_visible", lambda: False)
    chosen = profiles.choose_profile()
    assert chosen.is_cpu and "no GPU" in chosen.reason
    monkeypatch.setattr(profiles, "gpu_visible", lambda: True)
    assert profiles.choose_profile().is_gpu


@pytest.mark.parametrize("where", ["argument", "environment", "toml"])
def test_unknown_profile_is_refused(course, monkeypatch, where):
    if where == "environment":
        monkeypatch.setenv(profiles.PROFILE_ENV, "big")
    if where == "toml":
        (course / "coursekit.toml").write_text('profile = "big"\n')
    with pytest.raises(ValueError, match="'big' is not a profile: use one of cpu, gpu"):
        profiles.choose_profile("big" if where == "argument" else None)


def test_data_dir(course, monkeypatch):
    assert profiles.data_dir() == str(course / "data")
    monkeypatch.setenv(profiles.DATA_DIR_ENV, "/datasets")
    assert profiles.data_dir() == "/datasets"


def test_explain_shows_only_the_paragraph_of_its_profile(capsys, monkeypatch):
    from coursekit.labs.kit import profiles

    shown: list[str] = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    profiles.Profile("gpu", "test").explain(gpu="on the GPU", cpu="on two cores")
    profiles.Profile("cpu", "test").explain(gpu="on the GPU only")
    assert shown == ["on the GPU"]
