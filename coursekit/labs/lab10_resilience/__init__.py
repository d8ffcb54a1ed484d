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
- ``transfer``: the exit ticket's question, computed from the lab's idea (the steps a job redoes after an end
  without warning).

Each part's claims are in its module and fail on planted rows in its test (``test_*.py`` beside them). The parts
import torch; this package imports only the settings (``from coursekit.labs.lab10_resilience import clinic``).
"""

from __future__ import annotations

from pathlib import Path

from coursekit.labs.kit.lab import Lab
from coursekit.labs.lab10_resilience.settings import GPUS, SCRIPT_PATHS, ResilienceSettings, settings
from coursekit.labs.lab10_resilience.transfer import minutes_lost, steps_redone

# the lab, declared once (coursekit.labs.kit.lab): its lists derive from it; read as text, so literals only
LAB = Lab(number="10", slug="lab10_resilience", title="When the cluster fights back",
          notebook="10_resilience.ipynb", gpus=2, script_folders=("lab10_resilience",),
          exercises=("resume_check.check_resume_script",))

SCRIPTS = Path(__file__).resolve().parent / "scripts" / "lab10_resilience"  # the participants' lab10_resilience/

__all__ = ["GPUS", "SCRIPTS", "SCRIPT_PATHS", "ResilienceSettings", "minutes_lost", "settings", "steps_redone"]
