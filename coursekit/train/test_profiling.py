"""The engine's profiler summary: its title counts the operators its table shows."""

from pathlib import Path

import pytest
import torch

from coursekit.train import profiling


def summary_of_a_few_operators(tmp_path: Path) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        x = torch.ones(8, 8)
        (x @ x + x).relu().sum()
    path = tmp_path / profiling.TOP_OPERATORS_FILE
    profiling.write_top_operators(prof, path, cuda=False, profiled_wall_s=None)
    return path.read_text().splitlines()


def table_rows(lines: list[str]) -> list[str]:
    rules = [i for i, line in enumerate(lines) if line.startswith("-")]
    return lines[rules[1] + 1:rules[2]]  # between the header's rule and the closing one


@pytest.mark.parametrize("limit", [2, 1000])
def test_the_summary_title_counts_the_rows_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    monkeypatch.setattr(profiling, "TOP_OPERATORS_ROWS", limit)
    lines = summary_of_a_few_operators(tmp_path)
    rows = table_rows(lines)
    assert len(rows) == 2 if limit == 2 else 2 < len(rows) < limit  # fewer operators than 1000: all of them
    assert lines[0] == f"Top {len(rows)} operators by self CPU time"
