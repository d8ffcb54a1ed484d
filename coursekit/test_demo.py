"""The README's main job: ``coursekit demo`` submits the engine on the local executor and reads it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from coursekit import cli, demo
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
    assert "generated images: a stand-in" in printed and "--data fashion-mnist" in printed  # not evidence


def test_the_demo_on_missing_fashion_mnist_names_the_option_and_submits_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path / "course"))
    empty = tmp_path / "no-data"
    empty.mkdir()
    assert cli.main(["demo", "--data", "fashion-mnist", "--data-dir", str(empty), "--output", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "--data fashion-mnist" in error and "coursekit instructor data fashion-mnist" in error, error
    assert not (tmp_path / "course" / "jobs").exists()  # nothing was submitted


def test_the_demo_on_fashion_mnist_reads_the_folder_it_was_given(tmp_path: Path) -> None:
    from coursekit.train.data import fashion_mnist

    for name in fashion_mnist.FILES:  # the demo checks that the four files are there; the job reads them
        (tmp_path / f"{name}.gz").write_bytes(b"")
    config = demo.data_config("fashion-mnist", str(tmp_path))
    assert (config.dataset, config.data_dir, config.num_samples) == ("fashion-mnist", str(tmp_path), None)
    assert "real data" in demo.data_words(config) and "stand-in" not in demo.data_words(config)
    with pytest.raises(ValueError, match="--data-dir is for --data fashion-mnist"):
        demo.data_config("generated", str(tmp_path))
