"""Lab 03: the anatomy of training memory, measured tensor by tensor in a job.

``measure_training_memory`` builds the engine's model and optimizer, runs one training step on random
data and counts the bytes of every kind of tensor: parameters, gradients, optimizer state, and the
activations autograd saves for the backward pass (counted with ``saved_tensors_hooks`` while the
forward runs, so it works on a CPU too). On a GPU it also reads the allocator's peak. It is meant to
run as a job (``coursekit.submit_function``), like every experiment of the labs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import contextmanager
from typing import Any

import torch

from coursekit.labs.kit.claims import check_claim, percent
from coursekit.labs.kit.hardware import gpu_info, peak_tflops
from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.plots import _plain_log2_ticks, new_figure, outside_legend
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="03", slug="lab03_gpu_memory", title="The GPU and the memory footprint of training",
          notebook="03_gpu_memory.ipynb", gpus=1, recordings=("gpu_ladder",))

# Memory in this lab is in binary units, as PyTorch and nvidia-smi report it: MiB = 2**20 bytes, GiB = 2**30 bytes.
# GPUs are sold in "GB" that are nearly GiB: an "H100 80GB" holds 79.2 GiB (85.0e9 bytes), an H200 "141 GB" ~140 GiB.
GIB = 2**30
MIB = 2**20
DECIMAL_GB = 1e9  # hardware.gpu_info's total_memory_gb is decimal


def gpu_memory_gib(info: dict[str, Any] | None, default: float) -> float:
    """The job's GPU memory in GiB (``hardware.gpu_info`` gives decimal GB), else ``default``."""
    if info and info.get("total_memory_gb"):
        return float(info["total_memory_gb"]) * DECIMAL_GB / GIB
    return default


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
    table.add_column("parameters_m", lambda r: r["num_parameters"] / 1e6)
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes"):
        table.add_column(key.replace("_bytes", "_mib"), lambda r, k=key: r[k] / MIB)
    return table


# ResNet-50's training arithmetic per 224 x 224 image: ~8.2 GFLOP forward (4.1 G multiply-adds), twice that backward;
# torch's FlopCounterMode counts 24.3 GFLOP (test_lab03_gpu_memory.py), with a 1000- or a 10-class head alike
RESNET50_TRAIN_GFLOP = 24.3


def speedup_note(gpu: dict[str, Any], cpu: dict[str, Any], gflop_per_image: float = RESNET50_TRAIN_GFLOP) -> str:
    """Where a GPU-over-CPU ratio of images/s comes from: the same arithmetic per image, so the ratio of the FLOP/s
    each row sustained; with the GPU's datasheet fp32 peak where ``hardware.peak_tflops`` knows it. Each row: a
    ``device`` (the GPU's name in it), ``images_per_s`` and ``batch_size``."""
    tflops = {name: row["images_per_s"] * gflop_per_image / 1e3 for name, row in (("gpu", gpu), ("cpu", cpu))}
    text = (f"Both did the same arithmetic per image, about {gflop_per_image:.0f} GFLOP for a training step of "
            "ResNet-50 (8 forward, twice that backward), so the ratio of images/s is the ratio of the FLOP/s each "
            f"sustained in fp32: {gpu['device']} {tflops['gpu']:.1f} TFLOP/s at batch {gpu['batch_size']}, "
            f"{cpu['device']} {1e3 * tflops['cpu']:.0f} GFLOP/s at batch {cpu['batch_size']}.")
    peak = peak_tflops(gpu["device"], "fp32")
    if peak:
        text += (f" In fp32 the GPU computes on its CUDA cores, whose datasheet peak is {peak:.0f} TFLOP/s: the step "
                 f"sustained {percent(tflops['gpu'] / peak)} of it.")
    return text


def estimate_table(estimates: Sequence[Any], title: str = "the engine's calculator") -> ResultsTable:
    """Rows of ``MemoryEstimate.as_dict()`` with MiB columns and bytes per parameter."""
    table = ResultsTable((e.as_dict() for e in estimates), title=title)
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "master_copy_bytes",
                "activations_bytes", "transient_bytes", "workspace_bytes", "total_bytes"):
        table.add_column(key.replace("_bytes", "_mib"), lambda r, k=key: r[k] / MIB)
    return table


def activations_figure(depth: ResultsTable, batches: Sequence[int], limit_gib: float, gpu_name: str) -> Any:
    """Activation memory (GiB) against the batch for each model, log-log: growth in proportion to the batch is a
    line of slope 1, and a deeper network the same line shifted up."""
    figure, ax = new_figure()
    for row in depth:
        ax.plot(batches, [row["activations_mib_per_image"] * b / 1024 for b in batches], marker="o", label=row["model"])
    ax.axhline(limit_gib, color="tab:red", linestyle="--", label=f"{gpu_name}: {limit_gib:.0f} GiB")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log2_ticks(ax, batches)
    ax.set_xlabel("batch size (log scale)")
    ax.set_ylabel("activations (GiB, log scale)")
    ax.set_title("activations saved for the backward pass (calculator, fp32)")
    outside_legend(ax)
    return figure


def peaks_figure(peaks: ResultsTable) -> Any:
    """The allocator's measured peak and the calculator's estimate (MiB) against the batch, log-log, one pair of
    lines per case (the calibration case and the one held out)."""
    figure, ax = new_figure()
    names = []  # the cases' runs, in the title: legend entries this long would squeeze the axes
    for case, marker in (("calibration", "o"), ("held out", "s")):
        rows = sorted((r for r in peaks if r["case"] == case), key=lambda r: r["batch_size"])
        if not rows:
            continue
        xs = [r["batch_size"] for r in rows]
        names.append(f"{case}: {rows[0]['label']}")
        ax.plot(xs, [r["peak_mem_mib"] for r in rows], marker=marker, linestyle="-",
                label=f"{case}: measured (max_memory_allocated)")
        ax.plot(xs, [r["estimate_mib"] for r in rows], marker="x", markersize=9, linestyle=":",
                label=f"{case}: calculator")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _plain_log2_ticks(ax, [r["batch_size"] for r in peaks])
    yticks = _mib_ticks([v for r in peaks for v in (r["peak_mem_mib"], r["estimate_mib"]) if v])
    ax.set_yticks(yticks, [f"{tick:,.0f}" for tick in yticks])
    ax.set_xlabel("batch size (log scale)")
    ax.set_ylabel("peak memory allocated (MiB, log scale)")
    ax.set_title("the calculator against the allocator\n" + "; ".join(names), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left")  # the curves rise to the right: the upper left is free
    return figure


def _mib_ticks(values: Sequence[float]) -> list[float]:
    """Ticks for a log axis of MiB that spans less than two decades: 1, 2, 3 and 5 times each power of ten
    within the values' range (matplotlib would label 10,000 alone)."""
    low, high = min(values, default=1.0), max(values, default=1.0)
    ticks = [lead * 10 ** power for power in range(int(math.log10(max(low, 1.0))), int(math.log10(high)) + 1)
             for lead in (1, 2, 3, 5)]
    inside = [tick for tick in ticks if low / 1.1 <= tick <= high * 1.1]
    return inside or [high]


def add_estimates(peaks: ResultsTable, heldout: dict[str, Any]) -> ResultsTable:
    """Give every row of the peak jobs its case (``"held out"`` when its options are those of ``heldout``, else
    ``"calibration"``), a label, the measured peak and reserved memory in MiB (the engine writes MiB), and the
    calculator's estimate for that very run (model, optimizer, precision, the --gpu-resident pool of two input
    batches, cuDNN autotuning), in MiB: ``estimate_mib`` and ``steady_mib`` (once cuDNN has chosen)."""
    from coursekit.train.memory import estimate_memory
    from coursekit.train.models import build_model

    probes: dict[tuple[str, str], Any] = {}
    for row in peaks:
        config = row["config"]
        shape = (3, config.image_size, config.image_size)
        key = (config.model, config.precision)
        if key not in probes:  # one CPU forward of the model per precision; other batches by at_batch
            net = build_model(config, config.num_classes, shape)
            probes[key] = estimate_memory(net, config.optimizer, config.precision, 1, shape, convention="pytorch",
                                          momentum=config.momentum, input_batches=2 if config.gpu_resident else 1,
                                          cudnn_benchmark=True)
        estimate = probes[key].at_batch(config.batch_size)
        held = all(getattr(config, name) == value for name, value in heldout.items())
        row["case"] = "held out" if held else "calibration"
        row["label"] = f"{config.model} {config.precision}" + (" + channels_last" if config.channels_last else "")
        row["peak_mem_mib"] = row.get("peak_mem_mb")
        row["reserved_mib"] = row["summary"].get("mem_reserved_peak_mb")
        row["estimate_mib"] = estimate.total_bytes / MIB
        row["steady_mib"] = estimate.steady_bytes / MIB
    return peaks


def check_peak_claims(peaks: ResultsTable | None, tolerance: float, applies: bool, why_not: str) -> list[Any]:
    """The calculator against ``torch.cuda.max_memory_allocated``: on the case its cuDNN constants were fitted to
    (``case == "calibration"``: ResNet-50 fp32) and on one they were not (``"held out"``), each within
    ``tolerance`` (relative) at every batch. A case with no completed row fails where the claims apply."""
    results = []
    for case, statement in (
            ("calibration", "calibration: on the case its constants were fitted to, the calculator's peak is within "
                            f"{tolerance:.0%} of torch.cuda.max_memory_allocated"),
            ("held out", "on a case it was not fitted to (bf16 + channels_last, where it adds no autotuning "
                         "workspace: the fitted term is not tested there), the calculator's peak is within "
                         f"{tolerance:.0%} of torch.cuda.max_memory_allocated")):
        rows = [r for r in peaks or [] if r["case"] == case]
        label = rows[0]["label"] if rows else case
        per_batch = ", ".join(f"{r['batch_size']}: {r['estimate_mib']:.0f}/{r['peak_mem_mib']:.0f} MiB "
                              f"({percent(r['estimate_mib'] / r['peak_mem_mib'] - 1, 1, sign=True)})" for r in rows)
        results.append(check_claim(
            statement, bool(rows) and all(abs(r["estimate_mib"] / r["peak_mem_mib"] - 1) <= tolerance for r in rows),
            f"{label}, per batch (estimate/measured): " + (per_batch or "no completed run"),
            applies=applies, why_not=why_not))
    return results


def fill_figure(estimates: Sequence[Any], labels: Sequence[str], limit_gib: float, gpu_name: str = "GPU") -> Any:
    """Stacked bars of what a training run keeps in GPU memory (GiB), against the GPU's capacity; the legend
    beside the axes, where it hides no bar."""
    figure, ax = new_figure()
    parts = {"parameters": "parameters_bytes", "gradients": "gradients_bytes",
             "optimizer state": "optimizer_state_bytes", "copies (mixed precision)": "master_copy_bytes",
             "activations": "activations_bytes", "inputs, temporaries, cuDNN workspace": "other"}
    bottoms = [0.0] * len(estimates)
    for name, key in parts.items():
        values = [(e.total_bytes - e.static_bytes - e.activations_bytes if key == "other" else getattr(e, key)) / GIB
                  for e in estimates]
        ax.bar(range(len(estimates)), values, bottom=bottoms, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.axhline(limit_gib, color="tab:red", linestyle="--", label=f"{gpu_name}: {limit_gib:.0f} GiB")
    ax.set_xticks(range(len(labels)), labels, rotation=15, ha="right", fontsize="small")
    ax.set_ylabel("GiB")
    ax.set_title("what fills a GPU's memory during training (calculator)")
    outside_legend(ax)
    return figure


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile


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
            # the GPU drawn in the pictures when the jobs' own GPU is unknown (no GPU): an H100 "80GB", 79.2 GiB
            "example_gpu_memory_gib": 79.2,
            "peak_base": None if cpu else step.replace(gpu_resident=True, test_steps=10),
            # calibration: the case the calculator's cuDNN constants were fitted to (ResNet-50 fp32, batch 32-512,
            # H100 and H200); measured 7514 / 10441 / 16276 / 27956 MiB, estimates within 0.1 %
            "peak_batch_sizes": [] if cpu else [32, 64, 128, 256],
            # held out: bf16 + channels_last, which the constants were not fitted to (no autotuning term there);
            # the engine's benchmark measured 3.0 and 11.2 GiB at batch 64 and 256 on an H100, the calculator
            # within 5 % (coursekit/train/test_memory.py)
            "heldout": {"precision": "bf16", "channels_last": True},
            "heldout_batch_sizes": [] if cpu else [64, 256],
            # the calculator vs max_memory_allocated, relative: twice the held-out case's known error, and far
            # below what a missing term costs (the autotuning workspace is 15-35 % of fp32's peak)
            "peak_tolerance": 0.10,
            "job": job_options(profile, "00:10:00" if cpu else "00:30:00"), "timeout_s": 300 if cpu else 1800,
            **({} if cpu else {"budget": workshop_budget({"CPU vs GPU step": (2, 1.5), "anatomy": (1, 1.0),
                                                          "peak memory": (6, 1.0)})})}
