"""The strategy registry: built from the strategy modules, equal to ``config.PARALLEL_STRATEGIES``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coursekit.train.config import PARALLEL_STRATEGIES, TrainConfig
from coursekit.train.parallel import (
    LAYOUT_OPTIONS,
    SHARDED_STRATEGIES,
    STRATEGY_MODULES,
    mesh_sizes,
    parallel_problems,
    strategy_module,
)


def test_registry_names_are_the_configs_literal_tuple() -> None:
    """config.py keeps the names as a literal (torch-free: the CLI and the labs import it); the modules own them."""
    assert tuple(STRATEGY_MODULES) == PARALLEL_STRATEGIES


@pytest.mark.parametrize("name", PARALLEL_STRATEGIES)
def test_every_strategy_module_keeps_the_contract(name: str) -> None:
    module = strategy_module(name)
    assert name in module.STRATEGIES and callable(module.apply)
    assert set(getattr(module, "OPTIONS", {})) <= set(module.STRATEGIES)
    assert all(set(options) <= set(LAYOUT_OPTIONS) for options in getattr(module, "OPTIONS", {}).values())
    assert set(getattr(module, "SHARDED", ())) <= set(module.STRATEGIES)


def test_sharded_strategies_and_unknown_names() -> None:
    assert set(SHARDED_STRATEGIES) == {"zero2", "zero3", "fsdp_tp", "tensor", "pipeline"}
    with pytest.raises(ValueError, match="parallel='fsdp' is unknown; use one of ddp"):
        strategy_module("fsdp")


@pytest.mark.parametrize(("changes", "world", "sizes"), [
    ({"parallel": "ddp"}, 4, {"dp": 4}),
    ({"parallel": "zero3"}, 4, {"dp": 4}),
    ({"parallel": "naive"}, 1, {"dp": 1}),
    ({"parallel": "tensor"}, 4, {"dp": 1, "tp": 4}),
    ({"parallel": "tensor", "tp": 2}, 4, {"dp": 2, "tp": 2}),
    ({"parallel": "fsdp_tp"}, 4, {"dp": 2, "tp": 2}),
    ({"parallel": "fsdp_tp"}, 1, {"dp": 1, "tp": 1}),
    ({"parallel": "pipeline"}, 4, {"dp": 1, "pp": 4}),
    ({"parallel": "pipeline", "pp": 2}, 4, {"dp": 2, "pp": 2}),
])
def test_mesh_sizes_come_from_the_strategy(changes: dict, world: int, sizes: dict) -> None:
    assert mesh_sizes(TrainConfig(**changes), world) == sizes


@pytest.mark.parametrize(("changes", "message"), [
    ({"parallel": "zero3", "tp": 2}, "tp=2 applies to parallel 'tensor' or 'fsdp_tp', not 'zero3'"),
    ({"parallel": "tensor", "pp": 2}, "pp=2 applies to parallel 'naive' or 'pipeline', not 'tensor'"),
    ({"parallel": "naive", "microbatches": 2}, "microbatches=2 applies to parallel 'pipeline' only"),
    ({"parallel": "ddp", "stage_delay_ms": 5.0}, "use it with 'naive' or 'pipeline', not 'ddp'"),
    ({"parallel": "zero1", "sync_batchnorm": True}, "sync_batchnorm applies to parallel 'ddp' only, not 'zero1'"),
])
def test_a_layout_option_the_strategy_does_not_take_is_refused(changes: dict, message: str) -> None:
    assert any(message in p for p in parallel_problems(TrainConfig(**changes))), parallel_problems(TrainConfig(**changes))


def test_the_config_and_its_package_import_no_torch() -> None:
    code = "import sys, coursekit.train, coursekit.train.config; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
