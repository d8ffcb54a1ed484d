"""Lab 01: one neuron on a noisy line — the loss surface, the paths of GD and SGD on it, gradient noise.

The data are the engine's own (``coursekit.train.data.make_line``, same seed), so the surface drawn
here is exactly the one the jobs descended. Paths come from the jobs' step records (``--log-params``).

``submit_sweeps(..., one_job=True)`` puts every run of the lab into one job, ``python -m coursekit.train.sweep``:
most runs last seconds or less, little more than starting Python and torch, which a job per run would pay every
time (the long one: B = 1 on a GPU, n steps per epoch, each paying a step's fixed cost: a minute or two; labs 02
and 05 hold the same code: no lab imports another). The notebook does so wherever the runs would share one
processor anyway (a CPU, or the GPU of a single machine); on a cluster each run is a job of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from coursekit.labs.kit import experiments
from coursekit.labs.kit.lab import Lab
from coursekit.labs.kit.plots import new_figure
from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.train.config import TrainConfig

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="01", slug="lab01_gd_vs_sgd", title="Gradient descent vs stochastic gradient descent",
          notebook="01_gd_vs_sgd.ipynb", gpus=1)

SURFACE_POINTS = 121  # grid points per axis of the contour plot
SURFACE_MARGIN = 0.35  # share of the path's extent added around it
CONTOUR_LEVELS = 30

# the lab's own names for the kit's one-job sweeps (the notebook calls them on this module)
SweepRun, run_sweep, submit_sweeps = experiments.SweepRun, experiments.run_sweep, experiments.submit_sweeps


def batch_sizes_text(points: int, batch_sizes: Sequence[int]) -> str:
    """The runs of the sweep in words, from the settings: full batch, B = 1, and the mini-batches between."""
    mini = [b for b in batch_sizes if 1 < b < points]
    return (f"full batch: B = n = {points} (gradient descent); B = 1 (stochastic gradient descent); mini-batches: "
            + ", ".join(f"B = {b}" for b in mini))


def step_time_model(t_full: float, t_one: float, points: int) -> tuple[float, float]:
    """(a, c) of a step costing ``a + c * B``, through the full-batch step (B = ``points``) and the B = 1 step."""
    per_point = (t_full - t_one) / (points - 1)
    return t_one - per_point, per_point


def line_points(config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The training points ``(x, y)`` of a ``line`` run, as the engine generates them."""
    from coursekit.train.data import LINE_POINTS, make_line

    x, y = make_line(config.num_samples or LINE_POINTS, config.seed)
    return x.numpy().ravel().astype(np.float64), y.numpy().ravel().astype(np.float64)


def mse(x: np.ndarray, y: np.ndarray, w: Any, b: Any) -> Any:
    """Mean squared error of ``w x + b`` on the points, for scalars or broadcastable grids of (w, b)."""
    w, b = np.asarray(w, dtype=np.float64), np.asarray(b, dtype=np.float64)
    residual = w[..., None] * x + b[..., None] - y
    return (residual**2).mean(axis=-1)


def best_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The least-squares (w, b): the bottom of the loss surface."""
    w, b = np.polyfit(x, y, 1)
    return float(w), float(b)


def param_path(step_records: Sequence[dict[str, Any]]) -> np.ndarray:
    """``(steps, 2)`` array of (w, b) after each logged step."""
    points = [(r["params"]["weight"][0], r["params"]["bias"][0]) for r in step_records if "params" in r]
    return np.asarray(points, dtype=np.float64).reshape(-1, 2)


def path_losses(x: np.ndarray, y: np.ndarray, path: np.ndarray) -> np.ndarray:
    """The full-data loss at every point of a path (what the surface says, not the mini-batch's loss)."""
    return mse(x, y, path[:, 0], path[:, 1])


def add_paths(table: ResultsTable, x: np.ndarray, y: np.ndarray) -> ResultsTable:
    """Give every row its ``path`` (w, b per step) and ``path_loss`` (full-data loss per step)."""
    for row in table:
        row["path"] = param_path(row["steps"])
        row["path_loss"] = path_losses(x, y, row["path"])
        row["final_loss"] = float(row["path_loss"][-1]) if len(row["path_loss"]) else None
    return table


def surface_figure(x: np.ndarray, y: np.ndarray, table: ResultsTable | None = None, label_key: str = "batch_size",
                   max_points: int = 2000) -> Any:
    """Contours of the loss over (w, b), with each run's path drawn on them."""
    figure, ax = new_figure()
    w_best, b_best = best_fit(x, y)
    paths = [row["path"] for row in table] if table is not None else []
    ws = np.concatenate([[w_best, 0.0], *[p[:, 0] for p in paths]])
    bs = np.concatenate([[b_best, 0.0], *[p[:, 1] for p in paths]])
    w_pad, b_pad = SURFACE_MARGIN * (np.ptp(ws) + 1), SURFACE_MARGIN * (np.ptp(bs) + 1)
    w_grid, b_grid = np.meshgrid(np.linspace(ws.min() - w_pad, ws.max() + w_pad, SURFACE_POINTS),
                                 np.linspace(bs.min() - b_pad, bs.max() + b_pad, SURFACE_POINTS))
    losses = mse(x, y, w_grid, b_grid)
    ax.contour(w_grid, b_grid, np.log10(losses), levels=CONTOUR_LEVELS, cmap="viridis", linewidths=0.6)
    ax.plot([w_best], [b_best], marker="*", color="black", markersize=12, linestyle="none", label="least squares",
            zorder=5)  # above the paths: B = 1's cloud covers the bottom of the surface
    largest = max((row[label_key] for row in table or []), default=None)
    for row in table or []:
        path = row["path"]
        stride = max(1, len(path) // max_points)
        full = row[label_key] == largest
        ax.plot(path[::stride, 0], path[::stride, 1], linewidth=2.0 if full else 0.8, zorder=3 if full else 2,
                marker="o" if full else ("." if len(path) < 60 else None), label=f"{label_key}={row[label_key]}")
    ax.set_xlabel("w")
    ax.set_ylabel("b")
    ax.set_title("loss surface (log10 MSE) and the paths of the runs")
    ax.legend(fontsize="small")
    return figure


def data_figure(x: np.ndarray, y: np.ndarray) -> Any:
    figure, ax = new_figure()
    w_best, b_best = best_fit(x, y)
    ax.scatter(x, y, s=8, label="training points")
    grid = np.linspace(x.min(), x.max(), 2)
    ax.plot(grid, w_best * grid + b_best, color="black", label=f"least squares: y = {w_best:.2f} x + {b_best:.2f}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(fontsize="small")
    return figure


def without_replacement_factor(batch_size: int, points: int) -> float:
    """(n - B) / (n - 1): how much less noisy a batch drawn without replacement is than an independent one."""
    return (points - batch_size) / (points - 1)


def noise_rows(table: ResultsTable) -> ResultsTable:
    """One row per batch size with the gradient-noise variance its job measured (first step record)."""
    rows = []
    for row in table:
        measured = [r["grad_noise_var"] for r in row["steps"] if r.get("grad_noise_var") is not None]
        rows.append({"batch_size": row["config"].batch_size, "grad_noise_var": measured[0] if measured else None,
                     "job_id": row["job_id"], "state": row["state"]})
    return ResultsTable(rows, title="variance of the mini-batch gradient")


# ----------------------------------------------------------------- the lab's numbers, per profile

GPUS = LAB.gpus  # GPUs the notebook needs at once in the gpu profile


def settings(profile: str) -> dict[str, Any]:
    """Lab 01's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("01")`` shows them."""
    # Plain gradient descent on the DLI's line: no momentum, no weight decay, the same lr for every batch.
    # gpu profile: the jobs hold a GPU, so they run on it (device "auto": the GPU where the job has one) rather
    # than reserve a GPU and leave it idle. For two parameters the GPU's arithmetic costs nothing: a step is nearly
    # all fixed cost (the host's work per step, the kernel launches, the engine's step record with w and b), plus
    # the CPU work of assembling the batch (a DataLoader over the points), which grows with B. Measured on an H200
    # (median steps): 4.3 ms (B = 1) against 7.9 ms (B = 512); B = 1's 10,240 steps, each also writing its record,
    # took 106 s in all (the budget's 2 minutes).
    points = 128 if profile == "cpu" else 512
    base = TrainConfig(model="linear", dataset="line", num_samples=points, optimizer="sgd", momentum=0.0,
                       weight_decay=0.0, lr=0.2, epochs=10 if profile == "cpu" else 20, log_params=True,
                       val_fraction=0.25, device="cpu" if profile == "cpu" else "auto", **QUIET)
    noise = base.replace(log_params=False, epochs=1, steps=1, lr=1e-6, grad_noise_batches=200, val_fraction=0.0)
    mini = [16, 32, 64] if profile == "cpu" else [16, 64]
    noise_batches = [1, 4, 16, 64] if profile == "cpu" else [1, 4, 16, 64, 128]
    values = {"points": points, "base": base, "batch_sizes": [points, 1, *mini],
              "noise_base": noise, "noise_batch_sizes": noise_batches,
              "job": job_options(profile, "00:10:00"), "timeout_s": 300 if profile == "cpu" else 1800}
    if profile == "gpu":
        values["budget"] = workshop_budget({"B = 1 path": (1, 2.0), "other GD/SGD paths": (1 + len(mini), 0.3),
                                            "gradient noise": (len(noise_batches) + 1, 0.3)})
    return values
