"""The race's unit tests plant their runs (job ids such as ``j0`` that no Slurm knows): they read the board as the
local site does, without accounting, whatever this machine has (sbatch on PATH makes the default site ``slurm``).
``test_evidence.py`` plants accounting records; ``tests/integration/test_race_evidence.py`` asks the real sacct."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def local_site(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_SITE", "local")
