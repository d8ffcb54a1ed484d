"""Lab 07's numbers: :class:`LargeBatchSettings`, one frozen dataclass whose typed fields are the lab's settings in
the order ``profile.settings("07")`` prints them, built per profile by :func:`typed_settings`; :func:`settings` gives
them as the dict every lab's ``settings(profile)`` returns. With them the arithmetic they are computed with: the
scaling rules (:func:`scaled_lr`), steps per epoch, and A's arms (:class:`Arm`, in four groups)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from coursekit.labs.kit.profiles import data_dir
from coursekit.labs.kit.settings import QUIET, job_options, on_cifar10, workshop_budget
from coursekit.train.config import TrainConfig

SCALING_RULES = ("none", "sqrt", "linear")
PARTS = ("A", "B", "C", "D")


def scaled_lr(base_lr: float, base_batch: int, batch: int, rule: str) -> float:
    """The learning rate at ``batch`` from ``base_lr`` at ``base_batch``: ``none`` keeps it, ``sqrt`` multiplies
    it by sqrt(k), ``linear`` by k, with k = batch / base_batch (Goyal et al. 2017; Krizhevsky 2014)."""
    if not base_lr > 0:
        raise ValueError(f"base_lr={base_lr} must be positive")
    if base_batch < 1 or batch < 1:
        raise ValueError(f"base_batch={base_batch} and batch={batch} must be at least 1")
    k = batch / base_batch
    factors = {"none": 1.0, "sqrt": math.sqrt(k), "linear": k}
    if rule not in factors:
        raise ValueError(f"rule={rule!r} is unknown; choose one of {', '.join(SCALING_RULES)}")
    return base_lr * factors[rule]


def steps_per_epoch(train_images: int, batch: int) -> int:
    """Optimiser steps of one epoch (the last, short batch dropped, as the lab's runs do)."""
    if batch < 1 or train_images < batch:
        raise ValueError(f"batch={batch} must be between 1 and the {train_images} training images")
    return train_images // batch


# A's arms fall in four groups: the scaling rules, the LR grid of each optimizer, ghost batch norm, equal steps
SCALING, GRID, GHOST, EQUAL_STEPS = "scaling rules", "optimizer grid", "ghost batch norm", "equal steps"
GROUPS = (SCALING, GRID, GHOST, EQUAL_STEPS)


class Arm(NamedTuple):
    """One arm of part A: its name (unique, ending in ``B=<batch>``), batch, peak LR and warm-up (a share of the
    run's steps); its group; the optimizer; ghost batch norm's virtual batch (None: plain batch norm); the run's
    steps (None: the lab's epochs); ``all_seeds`` False: the first seed only (a grid point, equal steps)."""

    name: str
    batch_size: int
    lr: float
    warmup_share: float
    group: str = SCALING
    optimizer: str = "sgd"
    ghost_batch: int | None = None
    steps: int | None = None
    all_seeds: bool = True

    def __repr__(self) -> str:  # the settings block lists arms by name, not as a dataclass
        return repr(self.name)


@dataclass(frozen=True)
class LargeBatchSettings:
    """Lab 07's settings in one profile (``typed_settings``), field by field in the order they print; the
    notebook reads them as ``s.<field>`` of ``profile.settings("07")``, a dict of these fields (``as_dict``)."""

    base: TrainConfig  # every run starts from it; a part changes batch, LR, warm-up, schedule, ...
    base_batch: int  # A's reference batch (C's reference, D's batch)
    mid_batch: int  # A's middle batch
    large_batch: int  # A's large batch, its LR grid, ghost BN and equal steps
    spike_batch: int  # B's batch
    critical_lr_factors: tuple[float, ...]  # C's LR grid per batch, times the linear rule
    target_acc: float  # C's target on the held-out split
    noise_micro_batches: int  # D: micro-batches of the reference batch
    base_lr: float  # the LR at base_batch
    seeds: list[int]  # A and B's seeds (the first also C and D's)
    train_images: int  # training images (steps per epoch are counted from them)
    num_samples: int | None  # images the runs load (None: all)
    holdout: int  # C and D: the last training images, held out
    spike_lrs: tuple[float, ...]  # B's peak LRs
    spike_warmup_steps: int  # B's warm-up, in steps
    critical_batches: tuple[int, ...]  # C's batches
    critical_epochs: dict[int | str, int]  # C's epoch cap per batch ("default": every other batch)
    critical_warmup_steps: int  # C's warm-up, in steps
    eval_every_samples: int  # C evaluates every so many samples ...
    eval_min_steps: int  # ... and no more often than every so many steps
    noise_epochs: int  # D's epochs
    noise_every: int  # D estimates the noise scale every so many steps ...
    noise_log_every: int  # ... and logs a step record every so many
    jobs: int  # the jobs the runs are dealt to
    strict_claims: bool  # False: the claims are printed as measured, not asserted
    job: dict[str, Any]  # options of every submission (``submit(..., **s.job)``)
    timeout_s: int  # how long ``results`` waits
    budget: dict[str, Any] | None  # the workshop's GPU budget (gpu profile; None: no budget, not shown)
    dataset_notice: str | None  # where CIFAR-10 is not staged: what the runs train on instead
    arms: list[Arm]  # A's arms, in the plan's order
    claim_arms: dict[str, str]  # {role: arm name} of the arms the claims compare
    optimizer_grid: dict[str, list[str]]  # {optimizer: the arm names of its LR grid}
    grid_centres: dict[str, float]  # {optimizer: its grid's centre LR}
    ghost_batch: int  # ghost batch norm's virtual batch

    def as_dict(self) -> dict[str, Any]:
        """The fields in order (``budget`` only where there is one), as ``profile.settings("07")`` holds them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "budget" or self.budget is not None}


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = 1  # GPUs the notebook needs at once in the gpu profile

# gpu profile: LAB-REVIEW.md section 8, measured on Fashion-MNIST on one H100 (2026-11-26): the airbench net,
# Nesterov SGD 0.9, weight decay 5e-4, label smoothing 0.2, lr0 = 0.1 at batch 256 (0.1/0.2/0.4 gave
# 94.26/94.24/94.20 %), 10 epochs; 4096 naive 4.1 points below 256, 1024 0.8 below; steps to 90 % halve per
# doubling up to 512 and stay flat from 1024 (B_crit ~0.5-1 k); the early loss without warm-up at 6.4 and
# 12.8 (4096) peaks at 4.4-15 against 2.5-2.9 with 28 warm-up steps.
GPU_BASE_BATCH, GPU_BASE_LR, GPU_EPOCHS = 256, 0.1, 10
GPU_MID, GPU_LARGE = 1024, 4096
WARMUP_SHARE = 0.2  # warm-up: this share of the run's steps (gpu: 116 steps at 1024, 28 at 4096)
SPIKE_LRS = (6.4, 12.8)  # 64x and 128x lr0 at 4096 (16x and 32x of the equally good base LR 0.4)
HOLDOUT = 10_000  # C, D: the last 10,000 training images are the held-out split
TARGET_ACC = 0.90
CRITICAL_WARMUP_STEPS = 30
CRITICAL_LR_FACTORS = (0.25, 0.5, 1.0)  # x the linear rule lr0 B / 256
GPU_CRITICAL_BATCHES = (64, 128, 256, 512, 1024, 2048, 4096)
# each batch's epoch cap: ~1.5-2x the epochs section 8 measured to 90 % with the best LR (64: 1.5, 128: 1.3,
# 256: 1.9, 512: 1.9, 1024: 2.6, 2048: 5.3, 4096: 9.4 epochs of 50,000), so that an LR that misses ends early
GPU_CRITICAL_EPOCHS = {64: 2, 128: 3, 256: 4, 512: 4, 1024: 5, 2048: 10, "default": 16}
NOISE_MICRO_BATCHES = 4  # D: micro-batches of 64 in the reference batch of 256
NOISE_EPOCHS_GPU = 3  # past C's reference target (~360 steps = 1.8 epochs of 50,000 at 256)


# A's LR grid at the large batch, the same for every optimizer: its centre times these (Nado et al. 2021: compare
# optimizers at equal tuning effort). SGD's centre is the square-root rule (at k = 16: 2x, sqrt 4x and 8x lr0). A
# first grid between the square-root and the linear rule (4x, 8x, 16x) had its best at 4x, its lower edge, on
# Fashion-MNIST on one H100 (0.919 / 0.912 / 0.908); the linear rule stays one of A's arms.
GRID_FACTORS = (0.5, 1.0, 2.0)
# LARS's and LAMB's LRs live on other scales: LARS (trust coefficient eta = 0.001) moves each layer by about
# lr eta |w| a step, LAMB by lr |w|, SGD by lr |g|; heavy-ball momentum (SGD, LARS) multiplies a steady step by up to
# 1/(1 - 0.9) = 10, LAMB's averaged moments do not. Section 8 of LAB-REVIEW.md gives no LARS/LAMB LRs, so: first the
# LR whose step per layer matches SGD's centre, lr_SGD median(|g|/|w|) / eta for LARS and that times eta for LAMB,
# with |g|/|w| of the weight layers over the first steps at batch 512 measured on a CPU (--trust-ratio-every 1):
# airbench 0.02-0.05 (SGD centre 0.8), mlp_bn 0.04-0.2 (SGD centre 0.4), i.e. LARS 20 and LAMB 0.02 for both
# models. Then checked on the cpu profile's large batch (mlp_bn, 512, 2 seeds): LARS was flat from 2.5 to 10 (0.56-
# 0.58) and fell at 20 and 40 (0.52, 0.40); LAMB rose to 0.60 at 0.04-0.05 and fell at 0.1 and 0.2 (0.56, 0.51). So
# the centres are LARS 10 and LAMB 0.05 (between the matched 0.02 and 10x it, the momentum factor). Not yet checked
# on the GPU: whether each grid brackets its optimum is printed beside the claims.
LARS_LR_CENTRE = 10.0
LAMB_LR_CENTRE = 0.05


def _at(batch: int, name: str) -> str:
    return f"{name} B={batch}"  # A's arm names repeat across batches ("naive" at two): the batch makes them unique


def _without_batch(arm: str) -> str:
    """An arm's name without its ``B=<batch>`` ending (a figure writes the batch on a line of its own)."""
    name, _, batch = arm.rpartition(" B=")
    return name if name and batch.isdigit() else arm


def _arms(b0: int, mid: int, large: int, lr0: float, reference_steps: int) -> dict[str, Any]:
    """A's arms, the names the claims read (``claim_arms``), the LR grid of each optimizer (``optimizer_grid``,
    arm names) and its centre (``grid_centres``)."""
    k_mid, k_large = mid // b0, large // b0
    mid_linear, sqrt_lr, linear_lr = (scaled_lr(lr0, b0, mid, "linear"), scaled_lr(lr0, b0, large, "sqrt"),
                                      scaled_lr(lr0, b0, large, "linear"))
    roles = {"reference": Arm(_at(b0, "reference"), b0, lr0, 0.0),
             "mid_naive": Arm(_at(mid, "naive"), mid, lr0, 0.0),
             "mid_linear": Arm(_at(mid, f"linear {k_mid}x + warm-up"), mid, mid_linear, WARMUP_SHARE),
             "large_naive": Arm(_at(large, "naive"), large, lr0, 0.0),
             "large_sqrt": Arm(_at(large, f"sqrt {sqrt_lr / lr0:g}x + warm-up"), large, sqrt_lr, WARMUP_SHARE),
             "large_linear": Arm(_at(large, f"linear {k_large}x + warm-up"), large, linear_lr, WARMUP_SHARE)}
    centres = {"sgd": sqrt_lr, "lars": LARS_LR_CENTRE, "lamb": LAMB_LR_CENTRE}
    arms, grid = list(roles.values()), {}
    for optimizer, centre in centres.items():
        grid[optimizer] = []
        for lr in (centre * factor for factor in GRID_FACTORS):
            same = [arm for arm in arms if arm.batch_size == large and arm.optimizer == optimizer
                    and math.isclose(arm.lr, lr, rel_tol=1e-9)]
            if not same:  # a grid point of its own: the first seed only (the room's seats add seeds)
                name = f"{lr / lr0:g}x + warm-up" if optimizer == "sgd" else f"{optimizer.upper()} lr {lr:g}"
                same = [Arm(_at(large, name), large, lr, WARMUP_SHARE, GRID, optimizer, all_seeds=False)]
                arms += same
            grid[optimizer].append(same[0].name)
    # ghost batch norm on the sqrt rule, as Hoffer et al. (2017) ran it: the GPU runs' SGD grid at the large batch
    # peaks at the sqrt rule's LR and falls at the linear rule's, where a remedy's test cannot tell "no help" from
    # "nothing helps at that LR"
    roles["large_ghost"] = Arm(_at(large, f"ghost BN {b0}, sqrt {sqrt_lr / lr0:g}x + warm-up"), large, sqrt_lr,
                               WARMUP_SHARE, GHOST, ghost_batch=b0)
    # equal steps: the large batch given the reference's steps (k_large times the epochs), one seed. From section 8's
    # step times on one H100 (18.7 ms a step at 4096, ~5 ms at 1024): 2,340 steps at 4096 cost ~45 s a seed, three
    # seeds ~2.2 min, a third of the lab's 7 minutes; the mid batch at equal steps would cost ~12-15 s a seed, but
    # there linear scaling already wins back most of the small gap at equal epochs: the open question ("budget
    # or batch?") is at the large batch, where LR scaling fails. So: the large batch, the first seed only.
    roles["large_equal_steps"] = Arm(_at(large, f"equal steps, linear {k_large}x + warm-up"), large, linear_lr,
                                     WARMUP_SHARE, EQUAL_STEPS, steps=reference_steps, all_seeds=False)
    arms += [roles["large_ghost"], roles["large_equal_steps"]]
    return {"arms": arms, "claim_arms": {role: arm.name for role, arm in roles.items()}, "optimizer_grid": grid,
            "grid_centres": centres, "ghost_batch": b0}


def typed_settings(profile: str) -> LargeBatchSettings:
    """Lab 07's numbers in ``profile`` ("cpu" or "gpu")."""
    return _cpu_settings() if profile == "cpu" else _gpu_settings()


def settings(profile: str) -> dict[str, Any]:
    """Lab 07's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("07")`` shows them."""
    return typed_settings(profile).as_dict()


def _with_arms(**values: Any) -> LargeBatchSettings:
    """The settings with A's arms (``_arms``), whose equal-steps arm takes the reference's steps."""
    b0 = values["base_batch"]
    reference_steps = values["base"].epochs * steps_per_epoch(values["train_images"], b0)
    return LargeBatchSettings(**values, **_arms(b0, values["mid_batch"], values["large_batch"], values["base_lr"],
                                                reference_steps))


def _gpu_settings() -> LargeBatchSettings:
    base = TrainConfig(model="airbench", dataset="cifar10", data_dir=data_dir(), device_data=True, drop_last=True,
                       epochs=GPU_EPOCHS, val_every_epochs=GPU_EPOCHS, lr=GPU_BASE_LR, nesterov=True,
                       momentum=0.9, weight_decay=5e-4, label_smoothing=0.2, schedule="linear",
                       precision="bf16", channels_last=True, log_every=10, **QUIET)
    # from bench/REPORT-large-batch.md (one H100, every run of the plan before A's grid, ghost BN and equal steps:
    # 274 s in one process; the notebook 4.3 min): A's six arms 118 s and B 48 s for 3 seeds, C 87 s, D 21 s; one
    # job's start ~30 s. A's new arms, from section 8's 18.7 ms a step at 4096 plus the record's ~1 s a run: the grid's
    # 7 runs of 140 steps (1 seed; LARS/LAMB loop over the tensors, ~15 % slower) ~28 s, ghost BN (16 normalisations
    # of 256 per layer, ~30 % slower) ~14 s for 3 seeds, equal steps 2,340 steps ~45 s: ~1.5 min. In all ~6.7 min.
    parts = {"A and B, 3 seeds": 2.8, "A: LR grid, ghost BN, equal steps": 1.5, "C, critical batch": 1.5,
             "D, noise scale": 0.35, "start-up": 0.5}  # GPU-minutes each; every part's runs go in one job
    budget = workshop_budget({"one job (" + "; ".join(f"{part}: {minutes:g} min" for part, minutes in parts.items())
                              + ")": (1, sum(parts.values()))})
    data = on_cifar10({"base": base}, "base")
    base, strict, train_images = data["base"], True, 60_000
    if base.dataset == "generated":  # the stand-in: a smoke test (the notice says so)
        strict, train_images = False, base.num_samples - int(base.num_samples * base.val_fraction)
    elif base.dataset == "cifar10":
        train_images = 50_000
    return _with_arms(
        base=base, base_batch=GPU_BASE_BATCH, mid_batch=GPU_MID, large_batch=GPU_LARGE, spike_batch=GPU_LARGE,
        critical_lr_factors=CRITICAL_LR_FACTORS, target_acc=TARGET_ACC, noise_micro_batches=NOISE_MICRO_BATCHES,
        base_lr=GPU_BASE_LR, seeds=[0, 1, 2], train_images=train_images, num_samples=None, holdout=HOLDOUT,
        spike_lrs=SPIKE_LRS, spike_warmup_steps=round(WARMUP_SHARE * GPU_EPOCHS * (60_000 // GPU_LARGE)),
        critical_batches=GPU_CRITICAL_BATCHES, critical_epochs=GPU_CRITICAL_EPOCHS,
        critical_warmup_steps=CRITICAL_WARMUP_STEPS, eval_every_samples=2048, eval_min_steps=5,
        noise_epochs=NOISE_EPOCHS_GPU, noise_every=1, noise_log_every=10, jobs=1, strict_claims=strict,
        job=job_options("gpu", "00:20:00"), timeout_s=1800, budget=budget, dataset_notice=data["dataset_notice"])


# cpu profile (CI: two cores, the whole notebook about a minute): the same four parts, scaled down: a batch-norm
# MLP on the first 4,000 Fashion-MNIST images at 16 x 16 pixels, batches 32 / 128 / 512, 2 epochs (250, 62 and
# 14 steps). Its claims are printed, not asserted: a tiny model on a subset is not the evidence the gpu profile
# gives (on one CPU core: ~0.5-4 s a run, 42 runs in two jobs; A's equal-steps run, 250 steps at 512, ~4 s).
CPU_SUBSET, CPU_SIDE, CPU_EPOCHS = 4000, 16, 2
CPU_BASE_BATCH, CPU_MID, CPU_LARGE, CPU_BASE_LR = 32, 128, 512, 0.05
CPU_TARGET_ACC = 0.65
CPU_HOLDOUT = 1000
CPU_STANDIN_VAL = 1000


def _cpu_settings() -> LargeBatchSettings:
    base = TrainConfig(model="mlp_bn", dataset="cifar10", data_dir=data_dir(), device_data=True, drop_last=True,
                       num_samples=CPU_SUBSET, image_size=CPU_SIDE, epochs=CPU_EPOCHS, val_every_epochs=CPU_EPOCHS,
                       lr=CPU_BASE_LR, nesterov=True, momentum=0.9, weight_decay=5e-4, label_smoothing=0.2,
                       schedule="linear", log_every=5, device="cpu", **QUIET)
    data = on_cifar10({"base": base}, "base", image_size=CPU_SIDE)
    base = data["base"]
    if base.dataset == "generated":  # the stand-in: CPU_SUBSET training images + CPU_STANDIN_VAL
        total = CPU_SUBSET + CPU_STANDIN_VAL
        base = base.replace(num_samples=total, val_fraction=CPU_STANDIN_VAL / total)
    return _with_arms(
        base=base, base_batch=CPU_BASE_BATCH, mid_batch=CPU_MID, large_batch=CPU_LARGE, spike_batch=CPU_LARGE,
        critical_lr_factors=CRITICAL_LR_FACTORS, target_acc=CPU_TARGET_ACC, noise_micro_batches=NOISE_MICRO_BATCHES,
        base_lr=CPU_BASE_LR, seeds=[0, 1], train_images=CPU_SUBSET, num_samples=CPU_SUBSET, holdout=CPU_HOLDOUT,
        spike_lrs=(1.6,), spike_warmup_steps=round(WARMUP_SHARE * CPU_EPOCHS * (CPU_SUBSET // CPU_LARGE)),
        critical_batches=(32, 64, 128, 256, 512), critical_epochs={"default": CPU_EPOCHS}, critical_warmup_steps=5,
        eval_every_samples=256, eval_min_steps=2, noise_epochs=1, noise_every=1, noise_log_every=5, jobs=2,
        strict_claims=False, job=job_options("cpu", "00:10:00"), timeout_s=600, budget=None,
        dataset_notice=data["dataset_notice"])
