"""conftest.py's scheduling: the files it starts first exist (a renamed file would silently lose its place)."""

from __future__ import annotations

from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[1]


def test_the_files_started_first_exist_once_each() -> None:
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
    missing = [path for path in conftest.LONGEST_FIRST if not (ROOT / path).is_file()]
    assert not missing, f"conftest.LONGEST_FIRST names files that are gone: {missing}"
