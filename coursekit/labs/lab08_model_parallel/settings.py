"""Lab 08's numbers: :class:`ModelParallelSettings`, one frozen dataclass whose typed fields are the lab's settings
in the order ``profile.settings("08")`` prints them, built per profile by :func:`typed_settings`; :func:`settings`
gives them as the dict every lab's ``settings(profile)`` returns."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from coursekit.labs.kit.settings import QUIET, job_options, workshop_budget
from coursekit.train.config import TrainConfig

GPUS = 2  # GPUs the notebook needs at once in the gpu profile  # every strategy runs on 2 processes


@dataclass(frozen=True)
class ModelParallelSettings:
    """Lab 08's settings in one profile, field by field in the order they print."""

    budget: dict[str, Any] | None  # the workshop's GPU budget (gpu profile; None: not shown)
    n_processes: int  # processes of every parallel strategy (serial, checkpointed and naive: 1)
    zero_n: list[int]  # the process counts of the ZeRO runs
    base: TrainConfig  # serial training; every strategy's run starts from it
    strategies: list[str]  # the strategies run against serial training (keys of ``STRATEGIES``)
    strategy_options: dict[str, dict[str, Any]]  # engine options of some strategies (micro-batches, stages)
    tolerance_rel: float  # max |w - w_serial| relative to serial training's largest move
    tolerance: float  # absolute, for the tests of the lab's job command
    memory_tolerance: float  # ZeRO memory per rank against the formula
    bubble: dict[str, Any]  # the pipeline sweep: stages, micro-batches, emulated stage compute, steps, batch
    bubble_excess_rel: float  # how far the measured bubble may exceed (p-1)/(m+p-1), a share of it
    job: dict[str, Any]  # options of every submission (``submit(..., **s.job)``)
    timeout_s: int  # how long a cell waits for its jobs

    def as_dict(self) -> dict[str, Any]:
        """The fields in order (``budget`` only where there is one)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "budget" or self.budget is not None}


def typed_settings(profile: str) -> ModelParallelSettings:
    """Lab 08's settings in ``profile`` ("cpu" or "gpu")."""
    cpu = profile == "cpu"
    if cpu:
        # a GPT of 4 blocks, width 64 (about 0.2 M parameters), fp32 SGD with momentum on gloo processes: about a
        # second a run, so the notebook puts the runs of one shape into one job (starting Python, torch and
        # torch.distributed costs each process ~6 CPU-s). SGD, not AdamW: Adam divides each gradient by its own
        # running size, so a gradient N or m times too large (a missing 1/N or 1/m) moves the weights just as far
        # and the equality claim could not see it; SGD moves them N or m times as far. 256 samples keep the
        # validation after the last step short
        base = TrainConfig(model="gpt", dataset="tokens", gpt_layers=4, gpt_dim=64, gpt_heads=4, seq_len=32,
                           vocab_size=32, num_samples=256, batch_size=16, optimizer="sgd", lr=0.1, steps=4,
                           **QUIET)
        # stage compute emulated by sleeping: forward X ms, backward 2X per batch, X/m per micro-batch (20 ms at
        # m = 4: shorter sleeps drown in a busy machine's per-micro-batch costs)
        stage_delay_ms, microbatches = 80.0, [1, 2, 4]
    else:
        # course size on 2 GPUs: 4 blocks of width 1024 (about 0.07 B parameters), bf16, 30 steps a job (a 4xH100
        # dry run with 8 blocks, 30 steps and m up to 16 took over 8 minutes). Micro-batches of at least 8
        # sequences: there the measured bubble fell with m (1F1B 0.38 -> 0.28 for m = 2 -> 4); with 2-4
        # sequences per micro-batch the fixed costs per micro-batch (P2P sends, small kernels) kept it at ~0.35
        # SGD with momentum (see the cpu profile: a missing 1/N or 1/m shows as a move N or m times too large);
        # lr 0.05: this GPT's loss fell steadily over 30 steps (width 1024, bf16 autocast, measured on a CPU at
        # sequence length 64), and SGD only rescales the gradient, so rounding differences stay as small
        # relative to the move as the gradients' own (AdamW amplified them near zero gradients: 0.04-0.14x)
        base = TrainConfig(model="gpt", dataset="tokens", gpt_layers=4, gpt_dim=1024, gpt_heads=16, seq_len=512,
                           vocab_size=8192, num_samples=16384, batch_size=32, optimizer="sgd", lr=0.05,
                           precision="bf16", steps=30, **QUIET)
        stage_delay_ms, microbatches = 0.0, [1, 2, 4]
    pipeline = {"microbatches": 4}
    return ModelParallelSettings(
        # gpu: the notebook's jobs hold 2 GPUs; the whole gpu profile ran in 5.5-5.7 min on 2 and 4 H100s, 6.1 min
        # with 30 steps and the pipeline exercise (bench/REPORT-notebooks-gpu.md), start-ups included
        budget=None if cpu else workshop_budget({"strategies, ZeRO, bubbles, checkpointing (2 GPUs)": (1, 2 * 6.0)}),
        n_processes=2, zero_n=[2],  # cpu: N = 4 would start 4 processes on CI's 2 cores (~25 CPU-s)
        base=base,
        strategies=["ddp", "naive", "gpipe", "1f1b", "tensor", "zero1", "zero2", "zero3"],
        strategy_options={"naive": {"pp": 2}, "gpipe": pipeline, "1f1b": pipeline},
        # max |w - w_serial| relative to serial training's largest move. With SGD a gradient k times too large
        # moves every weight k times as far: off by (k - 1)x, 1x for a sum over N = 2 ranks or m = 2 micro-batches
        # that forgot to divide, 3x at m = 4; a strategy that never updated is off by 1x; one tensor left at half
        # its move, up to 0.5x. 0.05 on both profiles: with SGD every strategy stayed within 0.00027x of serial on
        # 2xH200 under bf16 autocast (2026-11-30, bench/results/gpu_notebooks_08.json), 185 times below it (under
        # AdamW, which amplifies rounding near zero gradients, they had reached 0.14x)
        tolerance_rel=0.05,
        # absolute, for the tests of the lab's job command: 4 SGD steps at lr 0.1 move the least-moved tensor of
        # the cpu model by 7.6e-4 (measured), 10x this tolerance
        tolerance=5e-5 if cpu else 2e-2,
        # ZeRO memory per rank vs the formula: measured 1.000-1.002 on 2xH100 and H200s, 1.000 on CPUs; a ZeRO-1 that
        # kept the whole optimizer state (SGD with momentum, fp32: 12 bytes per parameter against 4 + 4 + 4/2) reads 1.2
        memory_tolerance=0.05,
        # gpu: batch 128 for the bubble sweep, micro-batches of 32-128 sequences (2xH100 at batch 32: GPipe's
        # bubble went 0.42 -> 0.43 from m = 2 to 4, tokens/s halved: fixed costs per micro-batch of 8 sequences;
        # at batch 128: 0.53 / 0.43 / 0.36, 1F1B 0.37 / 0.27, within 0.17 of theory)
        bubble={"stages": 2, "microbatches": microbatches, "stage_delay_ms": stage_delay_ms, "steps": 4 if cpu else 10,
                "batch_size": base.batch_size if cpu else 128},
        # the measured bubble may exceed (p-1)/(m+p-1) by this share of itself (fixed costs per micro-batch); a
        # bubble twice the theory (+100 %) fails in both profiles. gpu: GPipe / 1F1B at m = 4 measured 0.32-0.33
        # against 0.2 on H200s (+60-67 %), 0.25 in the benchmark (+27 %), 0.35 once on 4xH100 (+75 %); at m = 1
        # +8 %. cpu: +1-9 % (+52 % on a machine at load 12); no overlap at all would be +150 % at m = 4
        bubble_excess_rel=0.75 if cpu else 0.9,
        job=job_options(profile, "00:10:00" if cpu else "00:20:00"), timeout_s=300 if cpu else 1200,
    )


def settings(profile: str) -> dict[str, Any]:
    """Lab 08's numbers in ``profile`` ("cpu" or "gpu"); ``profile.settings("08")`` shows them."""
    return typed_settings(profile).as_dict()
