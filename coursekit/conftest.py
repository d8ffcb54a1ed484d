"""Fixtures shared by tests of several parts of the package (a lab's tests and the CLI's); a conftest is no
module of the package's import graph, so a lab's tests using it never import the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coursekit.course import user_name


@pytest.fixture
def race_course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A course folder on the local site naming this user as its instructor, its race folder (lab 09's) the
    instructor's, mode 1777."""
    folder = tmp_path / "course"
    (folder / "race").mkdir(parents=True)
    (folder / "race").chmod(0o1777)
    (folder / "coursekit.toml").write_text(f'site = "local"\njob_prefix = "ws"\ninstructor = "{user_name(os.geteuid())}"\n')
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(folder))
    monkeypatch.setenv("COURSEKIT_SITE", "local")
    monkeypatch.delenv("COURSEKIT_DATA_DIR", raising=False)
    return folder
