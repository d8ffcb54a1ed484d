"""Lab 06, section 4: the indices ``DistributedSampler`` hands each rank, epoch by epoch, with and without
``set_epoch`` (no process group needed: the sampler takes rank and world size as arguments)."""

from __future__ import annotations

from coursekit.labs.kit.results import ResultsTable


def sampler_orders(dataset_size: int, world_size: int, epochs: int, set_epoch: bool, seed: int = 0,
                   shown: int = 8) -> ResultsTable:
    """One row per (epoch, rank): the first ``shown`` indices ``DistributedSampler`` gives that rank."""
    from torch.utils.data import DistributedSampler

    if dataset_size < world_size:
        raise ValueError(f"dataset_size={dataset_size} is smaller than world_size={world_size}: every rank needs data")
    table = ResultsTable(title=f"DistributedSampler, {world_size} ranks, set_epoch {'called' if set_epoch else 'NOT called'}")
    samplers = [DistributedSampler(range(dataset_size), num_replicas=world_size, rank=r, shuffle=True, seed=seed)
                for r in range(world_size)]
    for epoch in range(epochs):
        for rank, sampler in enumerate(samplers):
            if set_epoch:
                sampler.set_epoch(epoch)
            indices = list(sampler)
            table.append({"set_epoch": set_epoch, "epoch": epoch, "rank": rank,
                          "first_indices": " ".join(str(i) for i in indices[:shown]), "order": indices})
    return table


def same_order_every_epoch(table: ResultsTable) -> bool:
    """Did every rank get the same order in every epoch of ``table`` (see :func:`sampler_orders`)?"""
    by_rank: dict[int, set[tuple[int, ...]]] = {}
    for row in table:
        by_rank.setdefault(row["rank"], set()).add(tuple(row["order"]))
    return all(len(orders) == 1 for orders in by_rank.values())
