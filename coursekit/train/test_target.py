"""--target-acc: the untimed warm-up leaves the run as if it never happened; --confirm-fraction holds part of the
validation set out of the stopping evaluations; bad input is refused."""

from pathlib import Path

import pytest

from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig
from coursekit.train.data import confirm_split
from coursekit.train.engine import train
from coursekit.train.loop import Trainer
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
                                                 ({"timing_warmup": -1}, "timing_warmup=-1"),
                                                 ({"confirm_fraction": 1.0}, "confirm_fraction=1.0 must be in"),
                                                 ({"confirm_fraction": 0.5, "target_acc": None}, "give --target-acc"),
                                                 ({"confirm_fraction": 0.5, "device_data": True},
                                                  "does not apply with --device-data")])
def test_bad_target_options_are_refused_before_any_work(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate(RUN.replace(**change))


def test_the_confirmation_part_is_spread_over_the_set_and_disjoint_from_the_stopping_part() -> None:
    stopping, held = confirm_split(10, 0.5)
    assert held == [1, 3, 5, 7, 9] and stopping == [0, 2, 4, 6, 8]
    stopping, held = confirm_split(12, 0.25)
    assert held == [3, 7, 11] and not set(held) & set(stopping) and len(stopping) + len(held) == 12


def test_the_held_out_part_is_evaluated_once_at_the_stop_and_the_stopping_set_shrinks(tmp_path: Path) -> None:
    plain = train(RUN.replace(target_acc=0.5, timing_warmup=0, out=str(tmp_path / "plain")))
    held = train(RUN.replace(target_acc=0.5, timing_warmup=0, confirm_fraction=0.5, out=str(tmp_path / "held")))
    assert plain["target_reached"] and held["target_reached"] and "confirm_acc" not in plain
    assert plain["val_samples"] == 200 and held["val_samples"] == 100 and held["confirm_samples"] == 100
    assert held["confirm_hash"] != held["val_hash"] and 0 < held["confirm_acc"] <= 1
    events = [line for line in (tmp_path / "held" / "metrics.jsonl").read_text().splitlines()
              if '"target_confirmed"' in line]
    assert len(events) == 1


def test_the_stopping_evaluations_read_the_loader_once_and_give_what_the_loader_gives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coursekit.train.target as target

    passes: list[int] = []
    evaluations: list[tuple] = []
    evaluate = Trainer.evaluate

    def counting_evaluate(self, loader=None):  # noqa: ANN001, ANN202
        passes.append(int(loader is None or not isinstance(loader, list)))
        result = evaluate(self, loader)
        evaluations.append((result, evaluate(self)))  # the same pass straight from the val loader
        return result

    monkeypatch.setattr(Trainer, "evaluate", counting_evaluate)
    run = RUN.replace(timing_warmup=0, epochs=1)
    train(run.replace(out=str(tmp_path / "kept")))
    assert len(passes) >= 4 and passes[0] == 1 and sum(passes) == 1  # read once, then the kept batches
    assert all(kept == straight for kept, straight in evaluations)
    passes.clear()
    monkeypatch.setattr(target, "VAL_CACHE_MAX_BYTES", 1000)  # smaller than the set: every pass reads the loader
    train(run.replace(out=str(tmp_path / "read")))
    assert len(passes) >= 4 and sum(passes) == len(passes)


def test_the_warm_up_also_meets_the_epochs_last_smaller_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    step = Trainer._train_step

    def recording_step(self, inputs, targets):  # noqa: ANN001, ANN202
        sizes.append(len(inputs))
        return step(self, inputs, targets)

    monkeypatch.setattr(Trainer, "_train_step", recording_step)
    uneven = RUN.replace(batch_size=60, epochs=1, timing_warmup=2)  # 800 training samples: 13 x 60 + 20
    train(uneven.replace(out=str(tmp_path / "uneven")))
    assert sizes[:3] == [60, 60, 20]  # the warm-up: two full batches, then the last batch's size
    sizes.clear()
    train(uneven.replace(drop_last=True, out=str(tmp_path / "dropped")))
    assert sizes[:3] == [60, 60, 60] and 20 not in sizes
    monkeypatch.setattr(Trainer, "_train_step", step)
    cold = train(uneven.replace(timing_warmup=0, out=str(tmp_path / "cold")))
    warm = train(uneven.replace(out=str(tmp_path / "warm")))
    assert cold["train_loss"] == warm["train_loss"] and cold["val_acc"] == warm["val_acc"]


def test_kept_batches_do_not_hold_a_workers_shared_memory() -> None:
    import torch

    from coursekit.train.target import _owned

    shared = torch.zeros(3).share_memory_()
    assert shared.is_shared() and not _owned(shared).is_shared() and torch.equal(_owned(shared), shared)
    plain = torch.zeros(3)
    assert _owned(plain) is plain
