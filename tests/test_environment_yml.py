"""environment.yml (what a site creates with conda) must agree with pyproject's dependencies."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENT = re.compile(r"^\s*-\s+([A-Za-z0-9_.\-]+)\s*([<>=!~].*)?$")


def _pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("lab", "test"):
        wanted += project["optional-dependencies"][extra]
    found = {}
    for requirement in wanted:
        if ";" in requirement:  # environment markers (tomli on old Pythons) are not for conda
            continue
        name, spec = re.match(r"([A-Za-z0-9_.\-]+)(.*)", requirement).groups()
        found[name.lower()] = spec.strip()
    return found


def _environment_pip_requirements() -> dict[str, str]:
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    found = {}
    for line in lines[start + 1:]:
        match = REQUIREMENT.match(line)
        if match and match.group(1) not in ("-e", "."):
            found[match.group(1).lower()] = (match.group(2) or "").strip()
    return found


def test_environment_lists_exactly_pyprojects_dependencies() -> None:
    assert _environment_pip_requirements() == _pyproject_requirements()


def test_environment_installs_the_package_itself() -> None:
    assert "- -e ." in (ROOT / "environment.yml").read_text()


def test_environment_python_matches_requires_python() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = project["requires-python"].removeprefix(">=")
    assert f"python>={minimum}" in (ROOT / "environment.yml").read_text()
