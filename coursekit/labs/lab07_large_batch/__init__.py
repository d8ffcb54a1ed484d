"""Lab 07: large-batch training — every run of the lab is one row of one results table.

Four parts, one engine (``python -m coursekit.train``), one schedule shape for every arm of A and B (linear
warm-up counted in steps, then linear decay to 0: only the peak LR, the warm-up and the batch vary):

- **A. gap and recovery** at equal epochs: the reference batch, 4x it naive and linearly scaled with warm-up,
  16x it naive, square-root (4x) and linearly (16x) scaled with warm-up; at 16x also the same 3-point LR grid
  for SGD, LARS and LAMB (tuned alike, Nado et al. 2021), ghost batch norm (Hoffer et al. 2017) and the
  reference's number of steps (equal steps instead of equal epochs);
- **B. warm-up**: the large batch at a very large LR with and without warm-up, the loss logged every step;
- **C. critical batch** (Shallue et al., McCandlish et al.): steps to a target accuracy on a held-out split
  for batches from small to large, the best of a {1/4, 1/2, 1} x linear LR grid per batch, warm-up in
  steps then a constant LR; fit ``(S/S_min − 1)(E/E_min − 1) = 1``, ``B_crit = E_min / S_min``;
- **D. noise scale**: B_simple in train mode from the micro-batches of the reference run (two-batch
  estimator, separate moving averages; ``coursekit/train/noise.py``), read at C's target.

``plan(s)`` names every run (tags ``part``, ``arm``, ``batch_size``, ``lr``, ``seed``, ``optimizer``) with its
``TrainConfig``; ``submit`` sends them as ``s.jobs`` jobs of ``python -m coursekit.train.sweep`` (one start of
Python and torch for many runs); ``results`` waits (a bar counting runs) and reads the table; the rest computes
from it.

One module per concern, every name re-exported here (``from coursekit.labs import lab07_large_batch as lb;
lb.plan(s)``):

- ``settings``: the lab's numbers per profile, :class:`LargeBatchSettings` (a frozen dataclass of typed fields;
  ``settings(profile)`` gives them as a dict, what ``profile.settings("07")`` shows), the scaling rules
  (``scaled_lr``), ``steps_per_epoch`` and A's arms (``Arm``);
- ``plan``: ``plan``, ``submit``, ``results``;
- ``analysis``: from the results table to numbers: cells, paired differences, LR grids, B's early loss,
  C's curve and ``fit_critical_batch``, D's noise scale;
- ``figures``: the five figures; ``claims``: ``check_claims`` and the sentences worded by a measurement;
- ``room`` (a room's pooled seeds); ``rules_check``, ``rules_report`` and ``rules_runner`` (the code exercise)
  and ``scripts/``; the tests beside them (``test_*.py``).

The module ``settings`` is shadowed here by its function ``settings`` (every lab's ``settings(profile)``): import
the module's other names from ``coursekit.labs.lab07_large_batch.settings`` or from here."""

from __future__ import annotations

from coursekit.labs.kit.lab import Lab
from coursekit.labs.lab07_large_batch.analysis import (
    CHANCE,
    OPTIMIZER_TIE,
    SPIKE_STEPS,
    T_975,
    arm_accuracy,
    arm_names,
    b_simple_at,
    best_inside_grid,
    best_of_grid,
    cells,
    critical_curve,
    critical_grid_check,
    early_peak_loss,
    equal_steps_recovery,
    fit_critical_batch,
    gap_points,
    ghost_gain,
    grid_table,
    large_batch_recovery,
    noise_series,
    noise_spread,
    optimizer_comparison,
    paired,
    recovery,
    reference_steps,
    shared_seeds,
    split_step_cost,
    sqrt_over_linear,
    two_doublings_speedup,
    warmup_effect,
)
from coursekit.labs.lab07_large_batch.claims import (
    CPU_CLAIMS_NOTE,
    EQUAL_STEPS_RECOVERY_MIN,
    GAP_MIN,
    GHOST_STANDARD_ERRORS,
    RECOVERY_MID_MIN,
    SPIKE_MARGIN,
    SQRT_STANDARD_ERRORS,
    TWO_DOUBLINGS_MIN,
    check_claims,
    knee_reading,
    optimizer_finding,
    warmup_reading,
)
from coursekit.labs.lab07_large_batch.figures import (
    accuracy_figure,
    critical_figure,
    grid_figure,
    noise_figure,
    spike_figure,
)
from coursekit.labs.lab07_large_batch.plan import (
    Run,
    plan,
    results,
    submit,
)
from coursekit.labs.lab07_large_batch.settings import (
    CPU_BASE_BATCH,
    CPU_BASE_LR,
    CPU_EPOCHS,
    CPU_HOLDOUT,
    CPU_LARGE,
    CPU_MID,
    CPU_SIDE,
    CPU_STANDIN_VAL,
    CPU_SUBSET,
    CPU_TARGET_ACC,
    CRITICAL_LR_FACTORS,
    CRITICAL_WARMUP_STEPS,
    EQUAL_STEPS,
    GHOST,
    GPU_BASE_BATCH,
    GPU_BASE_LR,
    GPU_CRITICAL_BATCHES,
    GPU_CRITICAL_EPOCHS,
    GPU_EPOCHS,
    GPU_LARGE,
    GPU_MID,
    GPUS,
    GRID,
    GRID_FACTORS,
    GROUPS,
    HOLDOUT,
    LAMB_LR_CENTRE,
    LARS_LR_CENTRE,
    NOISE_EPOCHS_GPU,
    NOISE_MICRO_BATCHES,
    PARTS,
    SCALING,
    SCALING_RULES,
    SPIKE_LRS,
    TARGET_ACC,
    WARMUP_SHARE,
    Arm,
    LargeBatchSettings,
    scaled_lr,
    settings,
    steps_per_epoch,
    typed_settings,
)

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="07", slug="lab07_large_batch", title="Large-batch training",
          notebook="07_large_batch.ipynb", gpus=1, script_folders=("lab07_large_batch",),
          recordings=("large_batch_gpu",), exercises=("rules_check.check_large_batch_rules",))

__all__ = ["Arm", "CHANCE", "CPU_BASE_BATCH", "CPU_BASE_LR", "CPU_CLAIMS_NOTE", "CPU_EPOCHS", "CPU_HOLDOUT", "CPU_LARGE", "CPU_MID",
           "CPU_SIDE", "CPU_STANDIN_VAL", "CPU_SUBSET", "CPU_TARGET_ACC", "CRITICAL_LR_FACTORS",
           "CRITICAL_WARMUP_STEPS", "EQUAL_STEPS", "EQUAL_STEPS_RECOVERY_MIN", "GAP_MIN", "GHOST",
           "GHOST_STANDARD_ERRORS", "GPUS", "GPU_BASE_BATCH", "GPU_BASE_LR", "GPU_CRITICAL_BATCHES",
           "GPU_CRITICAL_EPOCHS", "GPU_EPOCHS", "GPU_LARGE", "GPU_MID", "GRID", "GRID_FACTORS", "GROUPS",
           "HOLDOUT", "LAMB_LR_CENTRE", "LARS_LR_CENTRE", "LargeBatchSettings", "NOISE_EPOCHS_GPU",
           "NOISE_MICRO_BATCHES", "OPTIMIZER_TIE", "PARTS", "RECOVERY_MID_MIN", "Run", "SCALING", "SCALING_RULES",
           "SPIKE_LRS", "SPIKE_MARGIN", "SPIKE_STEPS", "SQRT_STANDARD_ERRORS", "TARGET_ACC", "TWO_DOUBLINGS_MIN",
           "T_975", "WARMUP_SHARE", "accuracy_figure", "arm_accuracy", "arm_names", "b_simple_at",
           "best_inside_grid", "best_of_grid", "cells", "check_claims", "critical_curve", "critical_figure",
           "critical_grid_check", "early_peak_loss", "equal_steps_recovery", "fit_critical_batch", "gap_points",
           "ghost_gain", "grid_figure", "grid_table", "knee_reading", "large_batch_recovery", "noise_figure",
           "noise_series", "noise_spread", "split_step_cost", "optimizer_comparison", "optimizer_finding", "paired", "plan",
           "recovery", "reference_steps", "results", "scaled_lr", "settings", "shared_seeds", "spike_figure",
           "sqrt_over_linear", "steps_per_epoch", "submit", "two_doublings_speedup", "typed_settings",
           "warmup_effect", "warmup_reading"]
