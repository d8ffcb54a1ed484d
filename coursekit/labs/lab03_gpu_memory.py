"""Lab 03: the anatomy of training memory, measured tensor by tensor in a job.

``measure_training_memory`` builds the engine's model and optimizer, runs one training step on random
data and counts the bytes of every kind of tensor: parameters, gradients, optimizer state, and the
activations autograd saves for the backward pass (counted with ``saved_tensors_hooks`` while the
forward runs, so it works on a CPU too). On a GPU it also reads the allocator's peak. It is meant to
run as a job (``coursekit.submit_function``), like every experiment of the labs.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch

from coursekit.labs.kit.hardware import gpu_info
from coursekit.labs.kit.plots import new_figure
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.train.config import TrainConfig

GB = 1e9
MB = 1e6


@contextmanager
def counting_saved_tensors(model: torch.nn.Module):
    """Count the bytes of distinct storages autograd saves (weights, which exist anyway, excluded)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    weights |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: set[int] = set()
    counter = {"bytes": 0}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in weights and key not in seen:
            seen.add(key)
            counter["bytes"] += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield counter


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _build(model_name: str, input_shape: Sequence[int], num_classes: int, optimizer: str, batch_size: int,
           device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from coursekit.train.config import TrainConfig
    from coursekit.train.models import build_model
    from coursekit.train.optim import build_optimizer

    cfg = TrainConfig(model=model_name, optimizer=optimizer, batch_size=batch_size, num_classes=num_classes,
                      image_size=input_shape[-1] if len(input_shape) == 3 else 32)
    torch.manual_seed(0)
    model = build_model(cfg, num_classes, tuple(input_shape)).to(device)
    return model, build_optimizer(model, cfg, batch_size)


def measure_training_memory(model_name: str, input_shape: Sequence[int], optimizer: str, batch_size: int,
                            num_classes: int = 10, device: str = "auto") -> dict[str, Any]:
    """Bytes of parameters, gradients, optimizer state and saved activations after one training step;
    the activations an evaluation forward saves with and without ``torch.no_grad``; GPU peaks on CUDA."""
    where = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                         ("cpu" if device == "auto" else device))
    model, opt = _build(model_name, input_shape, num_classes, optimizer, batch_size, where)
    inputs = torch.randn(batch_size, *input_shape, device=where)
    targets = torch.randint(0, num_classes, (batch_size,), device=where)
    cuda = where.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(where)
    model.train()
    with counting_saved_tensors(model) as saved:
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    opt.step()
    train_peak = torch.cuda.max_memory_allocated(where) if cuda else None
    state = [t for per_param in opt.state.values() for t in per_param.values()]
    model.eval()
    with counting_saved_tensors(model) as eval_saved:
        model(inputs)
    with torch.no_grad(), counting_saved_tensors(model) as no_grad_saved:
        model(inputs)
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "model": model_name, "optimizer": optimizer, "batch_size": batch_size, "device": str(where),
        "num_parameters": n_params,
        "parameters_bytes": _tensor_bytes(model.parameters()),
        "gradients_bytes": _tensor_bytes(p.grad for p in model.parameters()),
        "optimizer_state_bytes": _tensor_bytes(state),
        "buffers_bytes": _tensor_bytes(model.buffers()),
        "activations_bytes": saved["bytes"],
        "eval_saved_bytes": eval_saved["bytes"],
        "no_grad_saved_bytes": no_grad_saved["bytes"],
        "train_peak_bytes": train_peak,
        "gpu": gpu_info(str(where.type)),
    }


def measure_cases(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``measure_training_memory`` for each dict of keyword arguments (one job measures them all)."""
    return [measure_training_memory(**case) for case in cases]


def bytes_per_parameter(row: dict[str, Any]) -> float:
    """(parameters + gradients + optimizer state) / parameters: the static cost of training."""
    static = row["parameters_bytes"] + row["gradients_bytes"] + row["optimizer_state_bytes"]
    return static / row["num_parameters"]


def anatomy_table(rows: Sequence[dict[str, Any]]) -> ResultsTable:
    table = ResultsTable(rows, title="measured in a job, one training step")
    table.add_column("bytes_per_param", bytes_per_parameter)
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes"):
        table.add_column(key.replace("_bytes", "_mb"), lambda r, k=key: r[k] / MB)
    return table


def estimate_table(estimates: Sequence[Any], title: str = "the engine's calculator") -> ResultsTable:
    """Rows of ``MemoryEstimate.as_dict()`` with MB columns and bytes per parameter."""
    table = ResultsTable((e.as_dict() for e in estimates), title=title)
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "master_copy_bytes",
                "activations_bytes", "transient_bytes", "workspace_bytes", "total_bytes"):
        table.add_column(key.replace("_bytes", "_mb"), lambda r, k=key: r[k] / MB)
    return table


def fill_figure(estimates: Sequence[Any], labels: Sequence[str], limit_gb: float, gpu_name: str = "GPU") -> Any:
    """Stacked bars of what a training run keeps in GPU memory, against the GPU's capacity."""
    figure, ax = new_figure()
    parts = {"parameters": "parameters_bytes", "gradients": "gradients_bytes",
             "optimizer state": "optimizer_state_bytes", "copies (mixed precision)": "master_copy_bytes",
             "activations": "activations_bytes", "inputs, temporaries, cuDNN workspace": "other"}
    bottoms = [0.0] * len(estimates)
    for name, key in parts.items():
        values = [(e.total_bytes - e.static_bytes - e.activations_bytes if key == "other" else getattr(e, key)) / GB
                  for e in estimates]
        ax.bar(range(len(estimates)), values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.axhline(limit_gb, color="tab:red", linestyle="--", label=f"{gpu_name}: {limit_gb:.0f} GB")
    ax.set_xticks(range(len(labels)), labels, rotation=15, ha="right", fontsize="small")
    ax.set_ylabel("GB")
    ax.set_title("what fills a GPU's memory during training (calculator)")
    ax.legend(fontsize="small")
    return figure


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = 1  # GPUs the notebook needs at once in the gpu profile


def settings(profile: str) -> dict[str, Any]:
    """Lab 03's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("03")`` shows them."""
    cpu = profile == "cpu"
    step = TrainConfig(model="resnet50", dataset="synthetic", image_size=224, num_classes=1000,
                       batch_size=4 if cpu else 64, **QUIET)
    return {"step": step, "device_steps": {"cpu": 3} if cpu else {"cpu": 3, "cuda": 30},
            "anatomy_model": "resnet18" if cpu else "resnet50",
            "anatomy_input": (3, 32, 32) if cpu else (3, 224, 224),
            "anatomy_batches": [8, 16] if cpu else [64, 128],
            "depth_models": ["resnet18", "resnet34", "resnet50"],
            # the GPU drawn in the pictures when the jobs' own GPU is unknown (cpu profile): an H100's 80 GB
            "example_gpu_memory_gb": 80,
            "peak_base": None if cpu else step.replace(gpu_resident=True, test_steps=10),
            "peak_batch_sizes": [] if cpu else [32, 64, 128, 256],
            "peak_tolerance": 0.10,  # the calculator vs max_memory_allocated, relative
            "job": job_options(profile, "00:10:00" if cpu else "00:30:00"), "timeout_s": 300 if cpu else 1800,
            **({} if cpu else {"budget": workshop_budget({"CPU vs GPU step": (2, 1.5), "anatomy": (1, 1.0),
                                                          "peak memory": (4, 1.0)})})}
