"""coursekit.toml, read in one place; "argument > environment > coursekit.toml > default" decided in one place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coursekit import course
from coursekit.course import choose, course_config, course_setting, data_dir


@pytest.fixture()
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(course.COURSE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(course.DATA_DIR_ENV, raising=False)
    monkeypatch.delenv("COURSEKIT_TEST_CHOICE", raising=False)
    return tmp_path


def test_no_file_no_settings(folder: Path) -> None:
    assert course_config() == {} and course_setting("site", "local") == "local"


def test_the_file_is_read_again_when_it_changes(folder: Path) -> None:
    config = folder / course.COURSE_CONFIG_FILE
    config.write_text('job_prefix = "dl9"\n')
    assert course_setting("job_prefix") == "dl9"
    config.write_text('job_prefix = "dl10"\nprofile = "gpu"\n')
    assert course_setting("job_prefix") == "dl10" and course_config()["profile"] == "gpu"


def test_invalid_toml_names_the_file(folder: Path) -> None:
    (folder / course.COURSE_CONFIG_FILE).write_text('site = "local\n')
    with pytest.raises(ValueError, match=rf"{folder / course.COURSE_CONFIG_FILE}: not valid TOML"):
        course_setting("site")


def test_argument_then_environment_then_file_then_default(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ("COURSEKIT_TEST_CHOICE", "choice")
    assert (choose(None, *args, "fallback").value, choose(None, *args, "fallback").source) == ("fallback", "default")
    assert choose(None, *args, lambda: "computed").value == "computed"
    (folder / course.COURSE_CONFIG_FILE).write_text('choice = "from-file"\n')
    from_file = choose(None, *args, "fallback")
    assert (from_file.value, from_file.origin) == ("from-file", str(folder / course.COURSE_CONFIG_FILE))
    monkeypatch.setenv("COURSEKIT_TEST_CHOICE", "from-env")
    assert (choose(None, *args).value, choose(None, *args).origin) == ("from-env", "$COURSEKIT_TEST_CHOICE")
    assert (choose("given", *args).value, choose("given", *args).origin) == ("given", "the argument")


def test_data_dir(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert data_dir() == str(folder / "data")
    (folder / course.COURSE_CONFIG_FILE).write_text('data_dir = "shared/data"\n')
    assert data_dir() == str(folder / "shared" / "data")
    monkeypatch.setenv(course.DATA_DIR_ENV, "/datasets")
    assert data_dir() == "/datasets"


def test_the_ground_floor_imports_nothing_of_coursekit() -> None:
    tree = ast.parse(Path(course.__file__).read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.split(".")[0] == "coursekit"]
