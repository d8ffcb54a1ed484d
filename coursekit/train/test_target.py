"""--target-acc: the untimed warm-up leaves the run as if it never happened; bad input is refused."""

from pathlib import Path

import pytest

from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig
from coursekit.train.engine import train
from coursekit.train.target import code_hash, config_hash

RUN = TrainConfig(model="mlp", dataset="generated", num_samples=1000, num_classes=4, image_size=16, batch_size=50,
                  epochs=3, lr=0.05, target_acc=0.99, eval_every=4, data_seed=0, progress="off", device="cpu")


def test_warm_up_is_undone_so_the_trajectory_is_the_same(tmp_path: Path) -> None:
    cold = train(RUN.replace(timing_warmup=0, out=str(tmp_path / "cold")))
    warm = train(RUN.replace(timing_warmup=3, out=str(tmp_path / "warm")))
    assert cold["steps"] == warm["steps"] and cold["val_acc"] == warm["val_acc"]
    assert cold["train_loss"] == warm["train_loss"] and not warm["target_reached"]
    assert warm["time_to_target_s"] is None and warm["evaluations"] >= 48 // 4


def test_hashes_ignore_the_seed_but_not_the_settings() -> None:
    assert config_hash(RUN.to_dict()) == config_hash(RUN.replace(seed=7, out="x").to_dict())
    assert config_hash(RUN.to_dict()) != config_hash(RUN.replace(batch_size=100).to_dict())
    assert len(code_hash()) == 16 and code_hash() == code_hash()


@pytest.mark.parametrize(("change", "message"), [({"target_acc": 1.5}, "target_acc=1.5 must be an accuracy"),
                                                 ({"test_steps": 5}, "drop --test-steps"),
                                                 ({"eval_every": 0}, "eval_every=0 must be at least 1"),
                                                 ({"timing_warmup": -1}, "timing_warmup=-1")])
def test_bad_target_options_are_refused_before_any_work(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate(RUN.replace(**change))
