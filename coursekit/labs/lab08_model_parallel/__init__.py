"""Lab 08 (model parallelism): every strategy run as a job of the engine, compared with serial training.

- :func:`strategy_runs` — one engine run per strategy (``--parallel``) and the serial reference (serial on 1
  process, the others on N; ``checkpointed``: serial training with activation checkpointing), and
  :func:`bubble_runs` — the pipeline sweep over micro-batches m for GPipe and 1F1B.
- :func:`run_jobs` — runs them as jobs, one at a time, under one progress bar over the runs; with
  ``one_job`` (the cpu profile) the runs of one shape share a job (``python -m coursekit.train.sweep``, which
  joins the process group once for all of them).
- :func:`strategy_table` — one row per strategy: memory per rank (measured local shards, and the formula of
  :func:`coursekit.train.memory.sharded_memory`), tokens/s, final loss and the largest weight difference to
  serial (``--save-weights`` of each run; :func:`weights_moved`: how far training moved them);
  :func:`bubble_table` — the measured bubble beside the theory (p−1)/(m+p−1).
- :func:`activation_bytes` — what autograd saves for backward in one forward of the engine's model
  (saved-tensor hooks, so it works on a CPU), with and without activation checkpointing.
- :func:`seven_billion` — the arithmetic of section 1 (training state of a named model per GPU).
- :func:`recorded_table` — the GPU figures of ``bench/model_parallel_gpu.py``
  (``labs.load_recording("model_parallel_gpu")``) as one table.

One module per concern, every public name re-exported here (``from coursekit.labs import lab08_model_parallel as
mp``, then ``mp.strategy_runs(...)``):

- ``settings``: the lab's numbers per profile, :class:`ModelParallelSettings` (a frozen dataclass of typed fields;
  ``settings(profile)`` gives them as the dict ``profile.settings("08")`` shows);
- ``strategies``: ``STRATEGIES`` and the constants of the state formula, section 1's arithmetic, a strategy's
  configuration and job shape, the bubble's theory and its sweep's configurations;
- ``plan``: the runs and their jobs (``Run``, ``strategy_runs``, ``bubble_runs``, ``run_jobs``, ``start_jobs``);
- ``analysis``: activations, parameters, memory per rank, weights compared, the tables;
- ``claims``: the claims, each judged on a table's rows;
- ``fsdp_check``, ``fsdp_runner`` and ``pipeline_check`` (the code exercises) and ``scripts/``; the tests beside
  them (``test_*.py``).

The module ``settings`` is shadowed here by its function ``settings`` (every lab's ``settings(profile)``): import
the module's other names from ``coursekit.labs.lab08_model_parallel.settings`` or from here.
"""

from __future__ import annotations

from coursekit.labs.kit.results import ResultsTable
from coursekit.labs.lab08_model_parallel.analysis import (
    activation_bytes,
    bubble_table,
    checkpointing_cost,
    checkpointing_table,
    formula_bytes,
    in_flight_activations,
    num_parameters,
    parallel_block,
    rank_state_bytes,
    recorded_table,
    strategy_table,
    tp_allreduce_bytes,
    tp_split_parameters,
    weights_difference,
    weights_moved,
)
from coursekit.labs.lab08_model_parallel.claims import (
    GAIN_MARGIN_SPREADS,
    bubble_excess,
    decreasing,
    equal_to_serial,
    pipeline_gain,
    schedule_spread,
)
from coursekit.labs.lab08_model_parallel.plan import (
    COMPLETED,
    PROGRESS_EVERY_S,
    PendingRuns,
    Run,
    bubble_runs,
    group_command,
    run_jobs,
    run_strategies,
    start_jobs,
    strategy_runs,
)
from coursekit.labs.lab08_model_parallel.settings import GPUS, ModelParallelSettings, settings, typed_settings
from coursekit.labs.lab08_model_parallel.strategies import (
    GB,
    KEY_PREFIXES,
    MIB,
    PIPELINES,
    SINGLE_PROCESS,
    STATE_KEYS,
    STATE_PRECISION,
    STRATEGIES,
    bubble_configs,
    bubble_theory,
    data_parallel_size,
    job_shape,
    lowest_fitting_stage,
    processes,
    seven_billion,
    strategy_config,
)

# isort: split
# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
from coursekit.labs.kit.lab import Lab

LAB = Lab(number="08", slug="lab08_model_parallel", title="Model parallelism",
          notebook="08_model_parallel.ipynb", gpus=2, script_folders=("lab08_model_parallel",),
          recordings=("model_parallel_gpu",), exercises=("fsdp_check.check_fsdp_script", "pipeline_check.check_pipeline_script"))

__all__ = [
    "activation_bytes", "bubble_configs", "bubble_excess", "bubble_runs", "bubble_table", "bubble_theory",
    "checkpointing_cost", "checkpointing_table", "COMPLETED", "data_parallel_size", "decreasing", "equal_to_serial", "formula_bytes",
    "GAIN_MARGIN_SPREADS", "GB", "GPUS", "group_command", "in_flight_activations", "job_shape", "KEY_PREFIXES",
    "LAB", "lowest_fitting_stage", "MIB", "ModelParallelSettings", "num_parameters", "parallel_block", "PendingRuns",
    "pipeline_gain", "PIPELINES", "processes", "PROGRESS_EVERY_S", "rank_state_bytes",
    "recorded_table", "ResultsTable", "Run", "run_jobs", "run_strategies", "schedule_spread", "settings",
    "seven_billion", "SINGLE_PROCESS", "start_jobs", "STATE_KEYS", "STATE_PRECISION", "STRATEGIES",
    "strategy_config", "strategy_runs", "strategy_table", "tp_allreduce_bytes", "tp_split_parameters",
    "typed_settings", "weights_difference", "weights_moved"
]
