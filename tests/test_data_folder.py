"""The repository's data/ folder: its README names every dataset of the engine, its sample files work."""

from pathlib import Path

from coursekit.labs.lab09_race import read_runs
from coursekit.train.config import DATASETS, TrainConfig
from coursekit.train.engine import train

DATA = Path(__file__).resolve().parents[1] / "data"


def test_readme_names_every_dataset_of_the_engine_with_origin_size_and_licence() -> None:
    text = (DATA / "README.md").read_text()
    for name in DATASETS:
        if name != "imagefolder":  # the same reader as jpeg_folder
            assert f"--dataset {name}" in text, name
    assert "licence" in text and "cs.toronto.edu/~kriz/cifar" in text


def test_the_sample_jpeg_tree_trains_through_the_engine(tmp_path: Path) -> None:
    summary = train(TrainConfig(model="mlp", dataset="jpeg_folder", data_dir=str(DATA / "samples" / "jpeg-tiny"),
                                image_size=16, batch_size=4, epochs=1, progress="off", device="cpu",
                                out=str(tmp_path / "run")))
    assert summary["status"] == "completed" and summary["steps"] == 2 and summary["val_acc"] is not None


def test_the_sample_leaderboard_reads_back() -> None:
    runs = read_runs(DATA / "samples" / "leaderboard-example.jsonl")
    assert [r["seed"] for r in runs] == [0, 1, 2] and all(r["target_reached"] for r in runs)
