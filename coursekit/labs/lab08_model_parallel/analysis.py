"""From lab 08's runs to numbers: what autograd saves for backward (:func:`activation_bytes`, section 5), the
parameters a model has and tensor parallelism splits, the training state per rank measured beside the formula
(:func:`strategy_table`), weights compared with serial training's (:func:`weights_difference`,
:func:`weights_moved`), the measured bubble beside the theory (:func:`bubble_table`), and the recorded GPU
figures as one table (:func:`recorded_table`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab08_model_parallel.strategies import (
    KEY_PREFIXES,
    MIB,
    STATE_KEYS,
    STATE_PRECISION,
    STRATEGIES,
    bubble_theory,
    data_parallel_size,
)
from coursekit.train.config import TrainConfig
from coursekit.train.memory import sharded_memory

# --- the engine's model on the CPU: its activations (section 5) and its parameters ----------------

def _build(config: TrainConfig) -> Any:
    """The engine's model for ``config`` (token task: vocab_size classes, seq_len inputs), on the CPU."""
    import torch

    from coursekit.train.models import build_model

    torch.manual_seed(config.seed)
    return build_model(config, config.vocab_size, (config.seq_len,))


def activation_bytes(config: TrainConfig, batch_size: int | None = None) -> int:
    """Bytes autograd saves for backward in one training forward of the engine's model for ``config``
    (with its ``activation_checkpointing``), counted by saved-tensor hooks on the CPU: parameters left out,
    each storage once. What checkpointing removes from this count is memory a GPU does not hold."""
    import torch

    batch = batch_size or config.batch_size
    model = _build(config).train()
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: set[int] = set()
    total = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = tensor.untyped_storage().data_ptr()
        if key not in owned and key not in seen:
            seen.add(key)
            total += tensor.untyped_storage().nbytes()
        return tensor

    tokens = torch.randint(0, config.vocab_size, (batch, config.seq_len))
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(tokens)
    return total


def num_parameters(config: TrainConfig) -> int:
    """Ψ: the parameters of the engine's model for ``config`` (built on the CPU, not trained)."""
    return sum(p.numel() for p in _build(config).parameters())


def tp_split_parameters(config: TrainConfig) -> tuple[int, int]:
    """(split, replicated) parameters under tensor parallelism: the blocks' matrices of the model spec's TP
    plan are split (column-wise ones with their bias), the rest — embeddings, norms, head, row-wise biases —
    stays whole on every rank."""
    from torch.distributed.tensor.parallel import ColwiseParallel

    from coursekit.train.models import model_spec

    spec = model_spec(config.model)
    model = _build(config)
    split = 0
    if spec.tp_plan is not None and spec.blocks is not None:
        for block in spec.blocks(model):
            for name, style in spec.tp_plan().items():
                module = block.get_submodule(name)
                split += module.weight.numel()
                if getattr(module, "bias", None) is not None and isinstance(style, ColwiseParallel):
                    split += module.bias.numel()
    return split, sum(p.numel() for p in model.parameters()) - split


def formula_bytes(config: TrainConfig, strategy: str, n: int, psi: int) -> float:
    """Training state per rank by the Playbook's formula; tensor parallelism counts its replicated parts whole."""
    sharding = STRATEGIES[strategy][1]
    if sharding != "tp":
        return sharded_memory(psi, sharding, n, config.optimizer, STATE_PRECISION).total_bytes
    split, whole = tp_split_parameters(config)
    return (sharded_memory(split, "tp", n, config.optimizer, STATE_PRECISION).total_bytes
            + sharded_memory(whole, "ddp", 1, config.optimizer, STATE_PRECISION).total_bytes)


def parallel_block(summary: dict[str, Any]) -> dict[str, Any]:
    """The engine's ``parallel`` summary block (empty when the run wrote none)."""
    block = (summary or {}).get("parallel")
    return block if isinstance(block, dict) else {}


def rank_state_bytes(block: dict[str, Any]) -> list[dict[str, float]]:
    """Per rank: the local bytes of parameters, gradients and optimizer state (and peak memory) it held."""
    ranks = block.get("ranks")
    if isinstance(ranks, list) and ranks:
        return [{k: float(r.get(k) or 0) for k in (*STATE_KEYS, "peak_memory_bytes")} for r in ranks]
    return [{k: float(block.get(k) or 0) for k in (*STATE_KEYS, "peak_memory_bytes")}] if block else []


def strategy_table(rows: Sequence[dict[str, Any]]) -> ResultsTable:
    """One row per strategy (``rows``: :func:`run_jobs`'s of :func:`strategy_runs`, serial first): processes
    (``n_gpu`` and ``processes``) and the GPUs they used (``gpus``: naive's one process drives 2), memory per rank
    (measured largest rank; formula), peak memory (the largest rank's; on GPUs naive's is its first device's only,
    what the engine measures), tokens/s, loss, max |w − w_serial|. The title names the global batch (serial's)."""
    batch = (rows[0]["config"].batch_size * data_parallel_size(rows[0]["strategy"], rows[0]["n_gpu"])
             if rows else None)
    table = ResultsTable(title="strategies against serial training" + (f", batch {batch}" if batch else ""))
    reference, psi = None, 0
    for run in rows:
        config: TrainConfig = run["config"]
        strategy, n = run["strategy"], run["n_gpu"]
        block = parallel_block(run["summary"])
        ranks = rank_state_bytes(block)
        psi = psi or num_parameters(config)
        measured = max((sum(r[k] for k in STATE_KEYS) for r in ranks), default=None)
        formula = formula_bytes(config, strategy, n, psi)
        weights = Path(config.save_weights) if config.save_weights else None
        if strategy == "serial":
            reference = weights
        dw = weights_difference(reference, weights) if reference and weights and strategy != "serial" else None
        table.append({
            "strategy": strategy, "n_gpu": n, "processes": n, "gpus": run.get("gpus", n), "state": run["state"],
            "state_mib_per_rank": measured / MIB if measured else None,
            "formula_mib_per_rank": formula / MIB,
            "memory_vs_formula": measured / formula if measured else None,
            "peak_mem_mib": max((r["peak_memory_bytes"] for r in ranks), default=0) / MIB or run["peak_mem_mb"],
            "tokens_per_s": block.get("tokens_per_s") or run["summary"].get("tokens_per_s"),
            "train_loss": block.get("final_loss", run["train_loss"]), "max_abs_dw": dw,
            "bubble_measured": block.get("bubble_fraction"), "bubble_theory": block.get("bubble_fraction_theory"),
            "num_parameters": psi, "job_id": run["job_id"], "summary": run["summary"], "config": config})
    return table


def _normalised(state: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in state.items():
        for prefix in KEY_PREFIXES:
            key = key.replace(prefix, "")
        out[key] = value
    return out


def weights_difference(reference: str | os.PathLike | None, other: str | os.PathLike | None) -> float | None:
    """max |w − w_ref| over the parameters (None when a file is missing, inf when the parameters differ)."""
    import torch

    if reference is None or other is None or not Path(reference).is_file() or not Path(other).is_file():
        return None
    a = _normalised(torch.load(reference, map_location="cpu", weights_only=True))
    b = _normalised(torch.load(other, map_location="cpu", weights_only=True))
    common = [k for k in a if k in b and torch.is_tensor(a[k]) and a[k].shape == b[k].shape]
    if not common or len(common) < len(a) or len(b) > len(a):
        missing = sorted(set(a).symmetric_difference(b))[:5]
        print(f"{other} and {reference} hold different parameters (e.g. {missing}): not the same model")
        return math.inf
    return max((a[k].float() - b[k].float()).abs().max().item() for k in common)


def weights_moved(config: TrainConfig, largest: bool = False) -> float | None:
    """How far training moved the parameter tensor it moved least (``largest``: most): min (max) over tensors
    of max |w − w_init|, the final weights ``config.save_weights`` against the engine's initial model for
    ``config`` (None: no file). A weight tolerance below the least move fails a strategy that leaves any tensor
    as it was; one below the largest move fails a strategy that never updated."""
    import torch

    if not config.save_weights or not Path(config.save_weights).is_file():
        return None
    start = _normalised(_build(config).state_dict())
    end = _normalised(torch.load(config.save_weights, map_location="cpu", weights_only=True))
    moves = [(end[k].float() - start[k].float()).abs().max().item()
             for k in start if k in end and torch.is_floating_point(start[k])]
    return max(moves) if largest else min(moves)


def tp_allreduce_bytes(config: TrainConfig) -> dict[str, float]:
    """Tensor parallelism's communication per step: each block all-reduces its attention and MLP outputs
    in the forward (2) and their input gradients in the backward (2), each (batch, seq_len, dim) values."""
    values = config.batch_size * config.seq_len * config.gpt_dim
    element = 2 if config.precision in ("bf16", "fp16") else 4
    per_block = 4 * values * element
    return {"allreduces_per_step": 4 * config.gpt_layers, "bytes_per_allreduce": values * element,
            "bytes_per_step": per_block * config.gpt_layers}


def in_flight_activations(config: TrainConfig, stages: int, microbatches: int) -> dict[str, float]:
    """Activations one stage holds at its peak: GPipe keeps all m micro-batches until their backward, 1F1B
    at most p (measured per micro-batch with saved-tensor hooks, divided by the stages)."""
    per_micro = activation_bytes(config, batch_size=max(config.batch_size // microbatches, 1)) / stages
    return {"microbatches": microbatches, "per_microbatch_mib": per_micro / MIB,
            "gpipe_mib": microbatches * per_micro / MIB, "1f1b_mib": min(stages, microbatches) * per_micro / MIB}


def bubble_table(rows: ResultsTable | Sequence[dict[str, Any]], stages: int) -> ResultsTable:
    """schedule, m, bubble measured and theory, tokens/s (rows of a sweep of :func:`bubble_configs`)."""
    batches = sorted({row["config"].batch_size for row in rows})
    table = ResultsTable(title=f"pipeline bubble, {stages} stages, batch {', '.join(map(str, batches)) or '?'}: "
                               "measured vs (p-1)/(m+p-1)",
                         columns=["schedule", "microbatches", "bubble_measured", "bubble_theory", "excess",
                                  "excess_rel", "tokens_per_s"])
    for row in rows:
        config: TrainConfig = row["config"]
        block = parallel_block(row.get("summary") or {})
        theory = bubble_theory(stages, config.microbatches)
        measured = block.get("bubble_fraction")
        table.append({"schedule": config.pipeline_schedule, "microbatches": config.microbatches,
                      "bubble_measured": measured, "bubble_theory": theory,
                      "excess": measured - theory if measured is not None else None,
                      "excess_rel": measured / theory - 1 if measured is not None else None,
                      "tokens_per_s": block.get("tokens_per_s"), "state": row.get("state")})
    return table


def checkpointing_table(base: TrainConfig, timed: ResultsTable | Sequence[dict[str, Any]] = ()) -> ResultsTable:
    """Activation bytes without and with checkpointing, and (from engine runs ``timed``) tokens/s."""
    speeds = {row["config"].activation_checkpointing: parallel_block(row.get("summary") or {}).get("tokens_per_s")
              or (row.get("summary") or {}).get("tokens_per_s") for row in timed}
    table = ResultsTable(title=f"activation checkpointing, batch {base.batch_size}, {base.gpt_layers} blocks: "
                               "activations counted in fp32 on the CPU, tokens/s of the runs")
    for on in (False, True):
        table.append({"activation_checkpointing": on,
                      "activations_mib": activation_bytes(base.replace(activation_checkpointing=on)) / MIB,
                      "tokens_per_s": speeds.get(on)})
    return table


# --- recorded GPU figures (bench/model_parallel_gpu.py; labs.load_recording("model_parallel_gpu")) ---

# activation checkpointing recomputes every block's forward: ~29 % more FLOPs a step, -22 % tokens/s if time
# followed FLOPs; a measured drop within these bounds is read as "about what the FLOPs predict"
CHECKPOINTING_EXPECTED_DROP = (0.15, 0.30)


def checkpointing_cost(speeds: Sequence[float | None]) -> str:
    """The measured price of checkpointing in tokens/s (``speeds``: without, with), read against the FLOPs."""
    if not (speeds[0] and speeds[1]):
        return ""
    drop = 1 - speeds[1] / speeds[0]
    low, high = CHECKPOINTING_EXPECTED_DROP
    if drop < low:
        reading = ("That costs less than the FLOPs predict, and this lab does not explain why: it is one short run, "
                   "and the recording of section 6 shows -16 % (ddp+ckpt against ddp).")
    elif drop <= high:
        reading = "About what the added FLOPs predict."
    else:
        reading = "More than the added FLOPs alone predict; this lab does not measure where the rest goes."
    return f" ({-100 * drop:+.1f} %). {reading}"


def recorded_table(recording: dict[str, Any]) -> ResultsTable | None:
    """strategy x (GPUs, memory per GPU, tokens/s, fits) of the recording, naming its machine. The recording's
    ``*_gb`` figures are GiB (2**30 bytes, bench/model_parallel_gpu.py): their columns here say so."""
    rows = [r for r in recording.get("runs") or [] if not r.get("skipped")]  # skipped: the bench's time ran out
    if not rows:
        return None
    machine = recording.get("machine") or {}
    title = (f"recorded on {machine.get('gpus', '?')} x {machine.get('device_name', '?')}, torch "
             f"{machine.get('torch', '?')}, CUDA {machine.get('cuda', '?')}, {str(recording.get('date', ''))[:10]}")
    keys = ("name", "n_gpu", "ok", "oom", "peak_mem_gb", "state_gb_per_gpu", "formula_gb_per_gpu", "tokens_per_s",
            "bubble_measured")
    return ResultsTable([{k.replace("_gb", "_gib"): r.get(k) for k in keys} for r in rows], title=title)
