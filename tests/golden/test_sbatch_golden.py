"""Golden files: the sbatch script submitit writes for coursekit's parameters, byte for byte.

The scripts are rendered by submitit's own SlurmExecutor (no cluster needed) with a fixed folder; the
interpreter path is replaced by ``PYTHON``. Regenerate after an intended change with
``COURSEKIT_UPDATE_GOLDEN=1 python -m pytest tests/golden``, and read the diff.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
import submitit

from coursekit.jobs import plan
from coursekit.jobs.submit import _options
from coursekit.sites import SITE_ENV, load_site

GOLDEN_DIR = Path(__file__).resolve().parent
JOB_FOLDER = "/course/jobs/demo/%j"
UPDATE_ENV = "COURSEKIT_UPDATE_GOLDEN"

CASES = {
    "jean_zay_8gpu_two_nodes.sbatch": dict(
        site="jean-zay", n_gpu=8, launcher="srun", partition=None, qos="qos_gpu-dev", account="abc",
        module="pytorch-gpu/py3/2.5.0", script_addon=["export NCCL_DEBUG=INFO"],
        slurm_addon=["#SBATCH --reservation=course"], exclusive=True, email="ada@example.org"),
    "jean_zay_a100_torchrun.sbatch": dict(
        site="jean-zay", n_gpu=8, launcher="torchrun", partition="gpu_p5", qos=None, account="abc",
        module=None, script_addon=None, slurm_addon=None, exclusive=False, email=None),
    "hipergator_typed_gpus.sbatch": dict(
        site="hipergator-ai", n_gpu=2, launcher="srun", partition=None, qos=None, account=None,
        module=None, script_addon=None, slurm_addon=None, exclusive=False, email=None),
}


def render(case: dict, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("submitit.slurm.slurm.shutil.which", lambda name: f"/usr/bin/{name}")
    site = load_site(case["site"])
    options = _options(site, "demo", "01:30:00", case["qos"], case["partition"], None, case["account"],
                       case["module"], case["script_addon"], case["slurm_addon"], case["exclusive"], case["email"],
                       "task", plan.SIGNAL_DELAY_S)
    shape = plan.job_shape(case["n_gpu"], site.node_shape(case["partition"]), site, 1, case["launcher"])
    executor = submitit.AutoExecutor(folder=JOB_FOLDER, cluster="slurm")
    executor.update_parameters(**plan.executor_parameters(shape, site, options))
    inner = executor._executor
    text = inner._make_submission_file_text(inner._submitit_command_str, "uid")
    return text.replace(shlex.quote(sys.executable), "PYTHON")


@pytest.mark.parametrize("golden_name", sorted(CASES))
def test_generated_sbatch_matches_golden_file(golden_name: str, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(tmp_path))
    monkeypatch.delenv(SITE_ENV, raising=False)
    text = render(CASES[golden_name], monkeypatch)
    golden = GOLDEN_DIR / golden_name
    if os.environ.get(UPDATE_ENV) == "1":
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden_name} changed; see the module docstring to regenerate"
