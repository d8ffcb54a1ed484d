"""Lab 06, section 4: DDP on shards of each global batch against one process on the whole batch (max |Δw|),
and a metric seen by one rank against its all-reduced average and the global value. Runs inside a job of N
processes (``submit_function(ddp_equivalence, n_gpu=2)``)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from coursekit.labs.kit.results import ResultsTable

EQUIVALENCE_TOLERANCE_CPU = 1e-5


def _toy_problem(samples: int, features: int, classes: int, seed: int) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=generator)
    w = torch.randn(features, classes, generator=generator)
    y = (x @ w + 0.5 * torch.randn(samples, classes, generator=generator)).argmax(dim=1)
    return x, y


def _toy_model(features: int, classes: int, seed: int) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(), torch.nn.Linear(32, classes))


def ddp_equivalence(steps: int = 5, global_batch: int = 32, features: int = 16, classes: int = 4,
                    val_samples: int = 64, lr: float = 0.1, seed: int = 0, device: str = "cpu") -> dict[str, Any]:
    """Train a small classifier with DDP for ``steps`` steps; this rank's figures.

    Every rank also trains the same model alone on the whole global batch (the serial reference) and
    reports the largest weight difference. Accuracy on this rank's half of a validation set
    (``local_acc``) is all-reduced into ``averaged_acc``, to compare with ``global_acc`` computed on the
    whole set. Submit it with ``submit_function(ddp_equivalence, n_gpu=2)`` and read ``job.results()``.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from coursekit.train.parallel import process_group as distributed

    with distributed.process_group(device) as ctx:
        world, rank = ctx.world_size, ctx.rank
        if global_batch % world or val_samples % world:
            raise ValueError(f"global_batch={global_batch} and val_samples={val_samples} must divide by the "
                             f"world size {world}")
        x, y = _toy_problem(steps * global_batch + val_samples, features, classes, seed)
        x_val, y_val = x[-val_samples:], y[-val_samples:]
        serial = _toy_model(features, classes, seed)
        local = _toy_model(features, classes, seed)
        model = DistributedDataParallel(local) if ctx.is_distributed else local
        optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m in (serial, model)]
        loss_fn = torch.nn.CrossEntropyLoss()
        shard = global_batch // world
        for step in range(steps):
            xb, yb = x[step * global_batch:(step + 1) * global_batch], y[step * global_batch:(step + 1) * global_batch]
            mine = slice(rank * shard, (rank + 1) * shard)  # this rank's part of the global batch
            for net, optimizer, (xs, ys) in ((serial, optimizers[0], (xb, yb)), (model, optimizers[1], (xb[mine], yb[mine]))):
                optimizer.zero_grad()
                loss_fn(net(xs), ys).backward()  # DDP averages the gradients over the ranks here
                optimizer.step()
        max_dw = max((a - b).abs().max().item() for a, b in zip(serial.parameters(), local.parameters(), strict=True))
        val_shard = val_samples // world
        with torch.no_grad():
            mine = slice(rank * val_shard, (rank + 1) * val_shard)
            local_acc = (local(x_val[mine]).argmax(1) == y_val[mine]).float().mean()
            global_acc = (local(x_val).argmax(1) == y_val).float().mean().item()
        averaged = local_acc.clone()
        if ctx.is_distributed:
            dist.all_reduce(averaged, op=dist.ReduceOp.SUM)
            averaged /= world
        del model, optimizers
        gc.collect()  # free DDP's reducer (reference cycles) before the process group goes
        distributed.barrier(ctx)  # leave the group together (a rank leaving alone can make gloo abort)
        return {"rank": rank, "world_size": world, "steps": steps, "global_batch": global_batch,
                "batch_per_rank": shard, "max_abs_dw": max_dw, "local_acc": local_acc.item(),
                "averaged_acc": averaged.item(), "global_acc": global_acc}


def equivalence_table(results: Sequence[dict[str, Any]]) -> ResultsTable:
    """The per-rank results of :func:`ddp_equivalence` as a table, rank order."""
    return ResultsTable(sorted(results, key=lambda r: r["rank"]), title="DDP against one process on the global batch")
