"""One process: the GPT and its spec (split, TP plan), the token task, the naive split, and the validation
of --parallel layouts (clear errors naming the option, before any work)."""

from __future__ import annotations

import pytest
import torch

from coursekit.metrics import read_metrics, steps
from coursekit.train.checks import validate
from coursekit.train.config import TrainConfig
from coursekit.train.data import make_tokens
from coursekit.train.engine import main, train
from coursekit.train.models import MODEL_SPECS, build_model
from coursekit.train.parallel import parallel_problems

TINY = {"model": "gpt", "dataset": "tokens", "gpt_layers": 2, "gpt_dim": 32, "gpt_heads": 4, "seq_len": 16,
        "vocab_size": 32, "device": "cpu", "progress": "off"}
LEARN_STEPS = 40
STAGE_DELAY_MS = 10.0


def test_gpt_split_stages_compose_to_the_whole_model() -> None:
    torch.manual_seed(0)
    model = build_model(TrainConfig(**{**TINY, "gpt_layers": 4}), 32, (16,))
    tokens = torch.randint(32, (3, 16))
    whole = model(tokens)
    assert whole.shape == (3, 16, 32)
    parts = MODEL_SPECS["gpt"].split(model, 2)
    assert torch.equal(parts[1](parts[0](tokens)), whole)
    keys = [set(p.state_dict()) for p in parts]
    assert keys[0] | keys[1] == set(model.state_dict()) and not keys[0] & keys[1]  # the serial model's names
    assert "tok.weight" in keys[0] and "head.weight" in keys[1] and "blocks.2.mlp.fc1.weight" in keys[1]
    assert set(MODEL_SPECS["gpt"].tp_plan()) == {"attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc1", "mlp.fc2"}
    assert all(MODEL_SPECS[name].tp_plan is None for name in ("mlp", "resnet18"))


def test_token_task_is_deterministic_and_follows_its_rule() -> None:
    inputs, targets = make_tokens(64, 16, 32, seed=3)
    again, _ = make_tokens(64, 16, 32, seed=3)
    assert torch.equal(inputs, again) and not torch.equal(inputs, make_tokens(64, 16, 32, seed=4)[0])
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets: the next tokens
    rule = {}
    for a, b in zip(inputs.flatten().tolist(), targets.flatten().tolist(), strict=True):
        rule.setdefault(a, []).append(b)
    share = sum(max(map(v.count, set(v))) for v in rule.values()) / inputs.numel()
    assert share > 0.85  # the hidden rule decides about 90 % of next tokens


def test_a_tiny_gpt_learns_the_token_task(tmp_path) -> None:
    summary = train(TrainConfig(**TINY, steps=LEARN_STEPS, batch_size=16, optimizer="adamw", lr=0.01,
                                out=str(tmp_path), num_samples=1024))
    losses = [r["loss"] for r in steps(read_metrics(tmp_path))]
    assert losses[0] > 3.0 and losses[-1] < 0.6 * losses[0], losses  # ln 32 = 3.47 at the start
    assert summary["parallel"]["tokens_per_s"] == pytest.approx(summary["images_per_s"] * 16)


def test_naive_split_equals_serial_and_shows_idle_stages(tmp_path) -> None:
    common = {**TINY, "steps": 4, "batch_size": 8, "num_samples": 128, "val_fraction": 0.0}
    serial = train(TrainConfig(**common, out=str(tmp_path / "serial"), save_weights=str(tmp_path / "serial.pt")))
    naive = train(TrainConfig(**common, parallel="naive", stage_delay_ms=STAGE_DELAY_MS, out=str(tmp_path / "naive"),
                              save_weights=str(tmp_path / "naive.pt")))
    a, b = torch.load(tmp_path / "serial.pt"), torch.load(tmp_path / "naive.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert naive["train_loss"] == serial["train_loss"]
    block = naive["parallel"]
    assert block["pp"] == 2 and block["bubble_fraction_theory"] == 0.5
    assert block["bubble_fraction"] == pytest.approx(0.5, abs=0.1)  # one of the two stages works at a time
    assert serial["parallel"]["bubble_fraction"] is None and serial["parallel"]["strategy"] == "ddp"


@pytest.mark.parametrize("changes, world, message", [
    ({"parallel": "tensor", "tp": 3}, 4, "tp=3 does not divide the 4 processes"),
    ({"parallel": "pipeline", "pp": 2, "microbatches": 1, "pipeline_schedule": "1f1b"}, 2, "microbatches=1 < pp=2"),
    ({"parallel": "pipeline", "pipeline_schedule": "1f1b"}, 2, "microbatches=1 < pp=2"),
    ({"parallel": "pipeline", "pp": 3}, 3, "gpt_layers=2 is not divisible by the 3 pipeline stages"),
    ({"parallel": "pipeline", "microbatches": 3}, 2, "microbatches=3 does not divide batch_size=8"),
    ({"parallel": "tensor", "gpt_heads": 2, "tp": 4}, 4, "gpt_heads=2 is not divisible by tp=4"),
    ({"parallel": "tensor", "model": "mlp", "dataset": "generated"}, 2, "declares no tensor-parallel plan"),
    ({"parallel": "pipeline", "model": "mlp", "dataset": "generated"}, 2, "declares no pipeline split points"),
    ({"parallel": "naive"}, 2, "launch one process"),
    ({"parallel": "zero3", "tp": 2}, 2, "tp=2 applies to parallel 'tensor' or 'fsdp_tp'"),
    ({"parallel": "ddp", "microbatches": 2}, 2, "microbatches=2 applies to parallel 'pipeline'"),
    ({"parallel": "fsdp_tp", "tp": 2}, 2, "leaves dp=1"),
    ({"parallel": "pipeline", "grad_noise_batches": 2}, 2, "grad_noise_batches: a pipeline has no whole model"),
    ({"parallel": "naive", "microbatches": 2}, 1, "microbatches=2 applies to parallel 'pipeline' only"),
    ({"parallel": "pipeline", "precision": "fp16"}, 2, "without a loss scaler"),
    ({"parallel": "zero1", "checkpoint_every": 2}, 2, "no resumable checkpoint"),
    ({"model": "gpt", "dataset": "generated"}, 1, "model='gpt' and dataset='tokens' go together"),
])
def test_impossible_layouts_are_clear_errors(changes: dict, world: int, message: str) -> None:
    cfg = TrainConfig(**{**TINY, "batch_size": 8, **changes})
    try:
        validate(cfg)
        problems = []
    except ValueError as error:
        problems = [str(error)]
    problems += parallel_problems(cfg, world, "cpu")
    assert any(message in p for p in problems), problems


def test_engine_refuses_a_bad_layout_before_any_work(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--model", "gpt", "--dataset", "tokens", "--parallel", "pipeline", "--pipeline-schedule", "1f1b",
            "--pp", "2", "--microbatches", "1", "--device", "cpu", "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert "microbatches=1 < pp=2" in capsys.readouterr().err and not (tmp_path / "run").exists()
