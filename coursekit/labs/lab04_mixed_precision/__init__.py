"""Lab 04: number formats, underflow, loss scaling, memory layouts and tensor-core-friendly sizes.

Small, exact demonstrations (they run in the kernel in milliseconds) and two measurements meant to
run as jobs on a GPU (``matmul_tflops``) or anywhere (``training_flop_per_image``).

``amp_check``: the participant's mixed-precision script checked (``labs.check_amp_script``); the scripts
themselves (``train_fp32.py``, ``train_amp.py``) ship in ``scripts/lab04_mixed_precision/`` (``SCRIPTS``), the only copy: the
participants' ``lab04_mixed_precision/`` is made from it (``labs/kit/exercises.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from coursekit.labs.kit import experiments
from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, on_cifar10, workshop_budget
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="04", slug="lab04_mixed_precision", title="Mixed precision and tensor cores",
          notebook="04_mixed_precision.ipynb", gpus=1, script_folders=("lab04_mixed_precision",),
          recordings=("gpu_ladder",), exercises=("amp_check.check_amp_script",))

FP16_SMALLEST_SUBNORMAL = 2.0**-24
FP16_SMALLEST_NORMAL = 2.0**-14
DEFAULT_INIT_SCALE = 2.0**16
TF32_MANTISSA_BITS = 10
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
MATMUL_WARMUP = 3
MATMUL_REPEATS = 20
SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab04_mixed_precision"  # the participants' lab04_mixed_precision/ is made from it
submit_sweeps = experiments.submit_sweeps  # the notebook's sweep and ladder, submitted together as one job


def formats_table() -> ResultsTable:
    """Bits, range and precision of fp32, tf32, bf16 and fp16."""
    rows = []
    for name, dtype in (("fp32", torch.float32), ("tf32", None), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        info = torch.finfo(dtype or torch.float32)
        mantissa = TF32_MANTISSA_BITS if dtype is None else {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}[dtype]
        exponent = 8 if dtype in (None, torch.float32, torch.bfloat16) else 5
        rows.append({"format": name, "bits": 1 + exponent + mantissa, "exponent_bits": exponent,
                     "mantissa_bits": mantissa, "max": info.max, "smallest_normal": info.smallest_normal,
                     "smallest_subnormal": None if dtype is None else info.smallest_normal * 2.0**-mantissa,
                     "eps": 2.0**-mantissa})
    return ResultsTable(rows, title="floating-point formats (tf32: fp32's range, fp16's precision; tensor cores only)")


def underflow_table(values: Sequence[float] = (FP16_SMALLEST_NORMAL, FP16_SMALLEST_SUBNORMAL, 2.0**-25, 1e-8),
                    scale: float = DEFAULT_INIT_SCALE) -> ResultsTable:
    """Each value stored in fp16, and stored after multiplying by ``scale`` then divided back in fp32."""
    rows = []
    for value in values:
        plain = torch.tensor(value, dtype=torch.float16).item()
        scaled = torch.tensor(value * scale, dtype=torch.float16)
        recovered = (scaled.float() / scale).item()
        rows.append({"value": value, "as_fp16": plain, "scaled_fp16": scaled.item(), "unscaled_fp32": recovered,
                     "lost_without_scaling": plain == 0.0 and value != 0.0,
                     "recovered_with_scaling": abs(recovered - value) <= 2**-11 * value})
    return ResultsTable(rows, title=f"fp16 underflow, and loss scaling by {scale:g}")


def grad_scaler_demo(gradient: float = 1000.0, steps: int = 14, init_scale: float = DEFAULT_INIT_SCALE) -> ResultsTable:
    """A one-weight model whose fp16 backward overflows while the scale is too large: each overflow
    skips the step and halves the scale, until scaled gradients fit in fp16 and steps go through."""
    weight = torch.nn.Parameter(torch.ones(1, 1))
    optimizer = torch.optim.SGD([weight], lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    inputs = torch.ones(1, 1)
    rows = []
    for step in range(1, steps + 1):
        before = weight.item()
        scale = scaler.get_scale()
        with torch.autocast("cpu", dtype=torch.float16):
            output = torch.mm(inputs, weight)  # fp16 under autocast: its gradient is an fp16 tensor
        loss = gradient * output.float().sum()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        rows.append({"step": step, "scale": scale, "scaled_gradient": gradient * scale,
                     "fits_fp16": gradient * scale <= torch.finfo(torch.float16).max,
                     "skipped": weight.item() == before})
    return ResultsTable(rows, title=f"GradScaler with a gradient of {gradient:g} flowing through fp16")


def scaler_follows_overflows(table: Sequence[dict[str, Any]]) -> bool:
    """True where the demo's GradScaler skipped exactly the steps whose scaled gradient did not fit fp16 and
    the step after each skipped one ran at half its scale (a scaler that never lowered its scale fails)."""
    rows = list(table)
    skips_match = all(r["skipped"] == (not r["fits_fp16"]) for r in rows)
    halves = all(after["scale"] == before["scale"] / 2
                 for before, after in zip(rows, rows[1:], strict=False) if before["skipped"])
    return bool(rows) and skips_match and halves


def strides_table(shape: Sequence[int] = (8, 3, 32, 32)) -> ResultsTable:
    """Strides of an (N, C, H, W) tensor in the default layout and in channels_last."""
    x = torch.empty(*shape)
    rows = [{"layout": "contiguous (NCHW)", "shape": tuple(x.shape), "strides": x.stride()},
            {"layout": "channels_last (NHWC)", "shape": tuple(x.shape),
             "strides": x.contiguous(memory_format=torch.channels_last).stride()}]
    return ResultsTable(rows, title="same shape, two memory layouts")


def matmul_tflops(sizes: Sequence[int], precision: str = "bf16", device: str = "auto") -> list[dict[str, Any]]:
    """TFLOP/s of a square matmul of each size (run as a job on a GPU: tensor cores like multiples of 8)."""
    where = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                         ("cpu" if device == "auto" else device))
    dtype = DTYPES[precision]
    rows = []
    for n in sizes:
        a = torch.randn(n, n, device=where, dtype=dtype)
        b = torch.randn(n, n, device=where, dtype=dtype)
        for _ in range(MATMUL_WARMUP):
            a @ b
        if where.type == "cuda":
            torch.cuda.synchronize(where)
        start = time.perf_counter()
        for _ in range(MATMUL_REPEATS):
            a @ b
        if where.type == "cuda":
            torch.cuda.synchronize(where)
        seconds = (time.perf_counter() - start) / MATMUL_REPEATS
        rows.append({"size": n, "multiple_of_8": n % 8 == 0, "tflops": 2 * n**3 / seconds / 1e12,
                     "device": str(where), "precision": precision})
    return rows


def training_flop_per_image(model: torch.nn.Module, input_shape: Sequence[int], num_classes: int) -> float:
    """FLOPs of one forward + backward per image, counted by torch's FlopCounterMode on a two-image batch."""
    from torch.utils.flop_counter import FlopCounterMode

    batch = 2
    counter = FlopCounterMode(display=False)
    with counter:
        output = model(torch.randn(batch, *input_shape))
        torch.nn.functional.cross_entropy(output, torch.zeros(batch, dtype=torch.long) % num_classes).backward()
    return counter.get_total_flops() / batch


# ----------------------------------------------------------------- the claim on validation accuracy, paired

def paired_gaps(rows: Sequence[dict[str, Any]], formats: Sequence[str] = ("bf16", "fp16"),
                reference: str = "fp32") -> dict[str, dict[str, Any]]:
    """Per low-precision format: its validation accuracy minus the reference's *of the same seed*, for every
    seed both completed (``rows``: precision, seed, val_acc), their mean and the standard error of that mean
    (None with one seed). Pairing removes the seed's share of the difference (the initial weights and the
    order of the data, shared by the two runs of a seed), so what remains is the format's effect and the
    runs' own noise."""
    by = {(r["precision"], r["seed"]): r["val_acc"] for r in rows if r.get("val_acc") is not None}
    gaps = {}
    for fmt in formats:
        diffs = [by[(fmt, seed)] - by[(reference, seed)] for (p, seed) in sorted(by)
                 if p == fmt and (reference, seed) in by]
        if not diffs:
            continue
        mean = sum(diffs) / len(diffs)
        se = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs)) ** 0.5 if len(diffs) > 1 else None
        gaps[fmt] = {"diffs": diffs, "mean": mean, "se": se}
    return gaps


def formats_match(rows: Sequence[dict[str, Any]], tolerance: float | None = None, formats: Sequence[str] = ("bf16", "fp16"),
                  reference: str = "fp32") -> tuple[bool | None, str]:
    """The claim "the low precisions reach fp32's validation accuracy", paired by seed: for each format of
    ``formats`` that ran, its accuracy − fp32's of the same seed, seed by seed. The format matches when every
    seed's difference is within ``tolerance`` (``VAL_ACC_TOLERANCE``), misses when every seed's lies beyond it,
    and is undecided when the seeds disagree, or with one pair only. (A mean ± 2 standard errors would decide
    on two seeds, whose standard error has one degree of freedom: it passes on two seeds that agreed by luck.)
    Returns (verdict, what was measured): verdict True when every format that ran matches, False when one misses,
    None when the seeds run cannot decide (the notebook reports it as not seen on this data); the evidence holds
    the paired differences, their mean ± SE, and fp32's own spread between seeds."""
    tolerance = VAL_ACC_TOLERANCE if tolerance is None else tolerance
    ran = [f for f in formats if any(r["precision"] == f and r.get("val_acc") is not None for r in rows)]
    gaps = paired_gaps(rows, ran, reference)
    reference_accs = [r["val_acc"] for r in rows if r["precision"] == reference and r.get("val_acc") is not None]
    parts, verdicts = [], []
    for fmt in ran:
        gap = gaps.get(fmt)
        if gap is None:
            parts.append(f"{fmt}: no seed with an fp32 run beside it")
            verdicts.append(None)
            continue
        measured = (f"{fmt} − {reference} per seed " + ", ".join(f"{d:+.3f}" for d in gap["diffs"])
                    + f", mean {gap['mean']:+.3f}")
        if gap["se"] is None:
            parts.append(measured + " (one seed: no standard error, undecided)")
            verdicts.append(None)
            continue
        within = [abs(d) <= tolerance for d in gap["diffs"]]
        verdict = True if all(within) else False if not any(within) else None
        verdicts.append(verdict)
        parts.append(measured + f" ± {gap['se']:.3f} ("
                     + {True: f"every seed within {tolerance:g})", False: f"every seed beyond {tolerance:g})",
                        None: f"some seeds beyond {tolerance:g}: undecided with {len(gap['diffs'])} seeds)"}[verdict])
    if len(reference_accs) > 1:
        parts.append(f"{reference} alone moved by {max(reference_accs) - min(reference_accs):.3f} between seeds")
    verdict = (False if False in verdicts else None if None in verdicts else True) if ran else False
    return verdict, "; ".join(parts) or "no completed runs"


def sweep_speed_spread(rows: Sequence[dict[str, Any]]) -> str:
    """How far the sweep's images/s moved between the seeds of one format (the largest ratio, and its format), and
    which formats these short runs (one job, a shared host) cannot rank: those whose seeds' speeds overlap."""
    speeds: dict[str, list[float]] = {}
    for row in rows:
        if row.get("images_per_s"):
            speeds.setdefault(row["precision"], []).append(row["images_per_s"])
    ratios = {fmt: max(v) / min(v) for fmt, v in speeds.items() if len(v) > 1}
    if not ratios:
        return ""
    fmt = max(ratios, key=ratios.get)
    names = list(speeds)
    overlapping = [f"{a} against {b}" for i, a in enumerate(names) for b in names[i + 1:]
                   if min(speeds[a]) <= max(speeds[b]) and min(speeds[b]) <= max(speeds[a])]
    moved = f"Their images/s moved by up to ×{ratios[fmt]:.2f} between two seeds of one format ({fmt})"
    if overlapping:
        return (f"{moved}: these short runs, in one job on a shared host, cannot rank {', '.join(overlapping)} (their "
                "seeds' speeds overlap). The ladder below is measured for speed.")
    return f"{moved}, less than the gaps between formats. The ladder below is measured for speed."


SCALER_START_STEPS = 20  # skips noticed by this step are the scaler finding its scale (the usual start of fp16)
ENGINE_INIT_SCALE = 2.0**16  # torch.amp.GradScaler's default initial scale, the engine's


def scaler_events(rows: Sequence[dict[str, Any]], reference: str = "fp32") -> str:
    """What the loss figure shows of the GradScaler, read from the runs (``rows``: precision, seed, val_acc,
    summary, steps): each run whose scaler skipped steps, where (at its start, while it finds its scale, or
    later), its scale before and after, after a later skip its highest step loss from there on, and its
    validation accuracy against the reference's of the same seed; else that none did."""
    refs = {r["seed"]: r.get("val_acc") for r in rows if r["precision"] == reference}
    events = []
    for row in rows:
        skipped = (row.get("summary") or {}).get("skipped_steps") or 0
        if not skipped:
            continue
        records = [r for r in row.get("steps") or [] if r.get("skipped_steps") is not None]
        at_start = max((r["skipped_steps"] for r in records if r["step"] <= SCALER_START_STEPS), default=0)
        late = [r for r in records if r["step"] > SCALER_START_STEPS and r["skipped_steps"] > at_start]
        text = f"{row['precision']} seed {row['seed']}: its GradScaler skipped {skipped} step(s)"
        if not late:
            events.append(text + f" in its first {SCALER_START_STEPS} steps, while it found its scale: the usual start")
            continue
        first = late[0]
        before = [r["loss_scale"] for r in records if r["step"] < first["step"] and r.get("loss_scale")]
        text += (f", the first of them after step {SCALER_START_STEPS} by step {first['step']} (scale "
                 f"{(before[-1] if before else ENGINE_INIT_SCALE):,.0f} → {first['loss_scale']:,.0f})")
        after = [r for r in records if r["step"] >= first["step"] and r.get("loss") is not None]
        if after:
            peak = max(after, key=lambda r: r["loss"])
            text += f"; from there its step loss peaked at {peak['loss']:.3g} at step {peak['step']}"
        if row.get("val_acc") is not None and refs.get(row["seed"]) is not None:
            text += f", and it ended {row['val_acc'] - refs[row['seed']]:+.3f} from {reference} seed {row['seed']}"
        events.append(text)
    if not events:
        return "No run's GradScaler skipped a step."
    late_runs = any("the usual start" not in e for e in events)
    return "; ".join(events) + (". A skipped step leaves the weights as they were, but it cannot undo what the "
                                "steps before the overflow did: this lab did not measure whether such a run "
                                "recovers with more epochs." if late_runs else ".")


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile
# validation accuracy of bf16/fp16 minus fp32's of the same seed, averaged over the seeds (paired): pairing
# removes the seed's share of the difference, what the seed alone moves. How large each share is varies from run
# to run (on Fashion-MNIST, cosine, 3 epochs, two seeds: fp32's two seeds ended 0.04 apart in one run and 0.011 in
# another, where bf16's paired differences were -0.004 and -0.030), so neither is assumed: formats_match holds
# only where every seed's paired difference is within the tolerance and fails only where every seed's exceeds it
# (else: not seen with the seeds run). A format that breaks training misses by far more (0.3-0.5)
VAL_ACC_TOLERANCE = 0.03
# the exercise's scripts, relative to the notebook folder (made from SCRIPTS: check_amp_script runs them)
SCRIPT_PATHS = {"fp32": "lab04_mixed_precision/train_fp32.py", "amp": "lab04_mixed_precision/train_amp.py"}


def settings(profile: str) -> dict[str, Any]:
    """Lab 04's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("04")`` shows them."""
    if profile == "cpu":
        # an MLP on the first 2,000 Fashion-MNIST training images at 16 px, held as one tensor (the generated set
        # where Fashion-MNIST is absent). Measured on one CPU thread: final training loss fp32 0.965, bf16 0.940, fp16
        # 0.966 (within 2.6 %), validation accuracy 0.62 / 0.64 / 0.64; on the generated set every format stayed at
        # 0.29, a set this MLP barely learns in 2 epochs
        base = TrainConfig(model="mlp", dataset="cifar10", data_dir=data_dir(), num_samples=2000, image_size=16,
                           batch_size=64, epochs=2, lr=0.05, device_data=True, **QUIET)
        values = on_cifar10({"base": base, "precisions": ["fp32", "bf16", "fp16"], "sweep_precisions": ["fp32", "bf16", "fp16"],
                             "seeds": [0], "ladder_base": None, "ladder": [],
                             "matmul_sizes": [], "job": job_options(profile, "00:10:00"), "timeout_s": 300,
                             "scripts": SCRIPT_PATHS}, "base", image_size=16)
        return values
    # cosine: at a constant LR of 0.1 the BatchNorm running statistics lag the moving weights and eval-mode
    # accuracy swings between 0.50 and 0.85 from epoch to epoch in every format (Fashion-MNIST, one H100,
    # bench/REPORT-real-data.md): an annealed LR lets the formats be compared on validation accuracy
    # the data held on the GPU as one tensor (--device-data, 60,000 images of 32 x 32): no loader workers, so that
    # the six runs can share one process (a DataLoader worker forked by a process that had already trained five
    # runs died with "CUDA error: initialization error" in a probe on an H100), and the formats' speeds are the
    # model's, not the loader's
    base = TrainConfig(model="resnet18", dataset="cifar10", data_dir=data_dir(), batch_size=256, epochs=3, lr=0.1,
                       schedule="cosine", device_data=True, **QUIET)
    ladder = TrainConfig(model="resnet50", dataset="synthetic", gpu_resident=True, image_size=224, num_classes=1000,
                         batch_size=256, test_steps=60, **QUIET)
    rungs = [{"precision": "fp32"}, {"precision": "tf32"}, {"precision": "bf16"}, {"precision": "fp16"},
             {"precision": "bf16", "channels_last": True},
             {"precision": "bf16", "channels_last": True, "compile": True}]
    # the sweep: fp32, bf16 and fp16 on two seeds each, compared pair by pair (tf32 is fp32 on tensor cores: its
    # speed is the ladder's second rung). The sweep and the ladder run as one job, one run after the other (one start
    # of Python and torch; 390 s for the whole notebook on an H200 with 4 sweep runs, each its own job)
    values = {"base": base, "precisions": ["fp32", "tf32", "bf16", "fp16"], "sweep_precisions": ["fp32", "bf16", "fp16"],
              "seeds": [0, 1], "ladder_base": ladder, "ladder": rungs,
              "matmul_sizes": [4096, 4095, 4104], "job": job_options(profile, "00:30:00"), "timeout_s": 3600,
              "scripts": SCRIPT_PATHS,
              "budget": workshop_budget({"GPU probe + matmuls": (2, 0.5),
                                         # measured on an H200: 166 s for the 6 runs and 165 s for the 6 rungs
                                         # (~28 s each, compile included): 1 min a rung leaves room for slower GPUs
                                         "sweep (6 runs of 3 epochs) + ladder (6 rungs of 60 steps), one job":
                                             (1, 6 * 0.6 + len(rungs) * 1.0),
                                         "your AMP script checked (fp32 and AMP runs)": (2, 1.0)})}
    return on_cifar10(values, "base")
