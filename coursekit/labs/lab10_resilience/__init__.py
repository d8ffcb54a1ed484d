"""Lab 10: when the cluster fights back — time limits, requeue and exact resume, a failure clinic, what the GPU
is doing, the environment a job runs in.

One module per part, every public name re-exported here (``from coursekit.labs import lab10_resilience as rs``):

- ``settings``: the lab's numbers per profile, :class:`ResilienceSettings` (a frozen dataclass of typed fields;
  ``settings(profile)`` gives them as the dict ``profile.settings("10")`` shows);
- ``resume`` and ``resume_check``: a job given less time than it needs is signalled, checkpoints, is requeued and
  resumes; the resumed run against the uninterrupted one; the participant's save and resume checked
  (``labs.check_resume_script``); the script ships in ``scripts/lab10_resilience/``, the only copy;
- ``clinic``: four broken distributed jobs to submit, read and diagnose;
- ``gpu_view``: a running job's GPU utilisation, memory and power, sampled inside the job, and the energy per image;
- ``environment``: the same job from the participants' Python and from a container, and the versions each ran;
- ``claims``: the lab's claims, each able to fail on planted rows (``test_*.py`` beside them).
"""

from __future__ import annotations

from pathlib import Path

from coursekit.labs.lab10_resilience.settings import GPUS, ResilienceSettings, settings

SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab10_resilience"  # the participants' lab10_resilience/

__all__ = ["GPUS", "SCRIPTS", "ResilienceSettings", "settings"]
