"""Lab 10's transfer question: the work a job redoes after an end without warning, computed from the lab's idea."""

from __future__ import annotations

# the exit ticket's case: a long run checkpointing every so many steps, killed without a signal
TRANSFER_STEPS, TRANSFER_EVERY, TRANSFER_KILLED_AT, TRANSFER_STEP_S = 5_000, 250, 3_940, 1.2


def steps_redone(killed_at_step: int, checkpoint_every: int) -> int:
    """Steps a job computes twice when it ends without warning after ``killed_at_step`` steps and resumes from its
    last periodic checkpoint (one every ``checkpoint_every`` steps): those since that checkpoint."""
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every={checkpoint_every} must be at least 1 (steps between checkpoints)")
    if killed_at_step < 0:
        raise ValueError(f"killed_at_step={killed_at_step} must be 0 or more (steps done when the job ended)")
    return killed_at_step % checkpoint_every


def minutes_lost(killed_at_step: int, checkpoint_every: int, step_s: float) -> float:
    """The GPU-minutes those redone steps cost (one GPU, ``step_s`` seconds a step)."""
    if step_s <= 0:
        raise ValueError(f"step_s={step_s} must be positive (seconds per training step)")
    return steps_redone(killed_at_step, checkpoint_every) * step_s / 60
