"""How the model is spread over the processes of a run: one file per strategy, each ``apply(model, ctx, cfg)``.

``context.py`` holds the :class:`ParallelContext` (a ``DeviceMesh`` with named dimensions; today one,
``"dp"``); ``ddp.py`` is data parallelism with ``DistributedDataParallel``; ``overlap.py`` measures how much
of the gradient all-reduce gradient buckets hide behind the backward pass. ``coursekit.distributed``
keeps what the launcher says (ranks, device, process group); this package builds on it. The names a
run may choose (``--parallel``) are ``coursekit.train.config.PARALLEL_STRATEGIES``.
"""

from __future__ import annotations

from coursekit.train.parallel.context import DIMENSIONS, ParallelContext, build_context

__all__ = ["DIMENSIONS", "ParallelContext", "build_context"]
