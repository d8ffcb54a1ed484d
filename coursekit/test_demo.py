"""The README's main job: ``coursekit demo`` submits the engine on the local executor and reads it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit import cli
from coursekit.metrics import epochs, read_metrics, summary


def test_demo_runs_a_real_job_and_writes_its_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "course"))
    output = tmp_path / "out"
    assert cli.main(["demo", "--output", str(output)]) == 0
    assert (output / "demo.png").stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "COMPLETED" in printed and "final validation accuracy" in printed
    # submitit's job process may recreate its literal, empty "%j" folder: only the job's own folder counts
    (run_dir,) = [p for p in (tmp_path / "course" / "jobs" / "demo").iterdir() if p.is_dir() and "%" not in p.name]
    records = read_metrics(run_dir)
    assert summary(records)["status"] == "completed"
    final_accuracy = epochs(records)[-1]["val_acc"]
    assert final_accuracy > 0.3, f"the demo's model learnt nothing: val_acc {final_accuracy}"  # chance is 0.1
