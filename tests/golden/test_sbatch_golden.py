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

COMMAND = "train.py --epochs 1"

CASES = {
    "jean_zay_8gpu_two_nodes.sbatch": dict(  # V100, gpu_p13: 4 GPUs and 40 cores per node
        site="jean-zay", n_gpu=8, launcher="srun", partition=None, constraint=None, qos="qos_gpu-dev",
        account="abc", module="pytorch-gpu/py3/2.5.0", script_addon=["export NCCL_DEBUG=INFO"],
        slurm_addon=["#SBATCH --reservation=course"], exclusive=True, email="ada@example.org"),
    "jean_zay_a100_torchrun.sbatch": dict(  # constraint='a100' -> gpu_p5: -C a100, 8 CPUs per GPU, cpuarch/amd
        site="jean-zay", n_gpu=8, launcher="torchrun", partition=None, constraint="a100", qos=None,
        account="abc", module="pytorch-gpu/py3/2.5.0", script_addon=None, slurm_addon=None, exclusive=False,
        email=None),
    "jean_zay_h100_account.sbatch": dict(  # account abc@h100 -> gpu_p6: -C h100, 24 CPUs per GPU, arch/h100
        site="jean-zay", n_gpu=4, launcher="srun", partition=None, constraint=None, qos="qos_gpu_h100-dev",
        account="abc@h100", module="pytorch-gpu/py3/2.5.0", script_addon=None, slurm_addon=None,
        exclusive=False, email=None),
    "jean_zay_v100_one_gpu_addon.sbatch": dict(  # no module: script_addon still comes after a command
        site="jean-zay", n_gpu=1, launcher="srun", partition=None, constraint=None, qos=None, account="abc",
        module=None, script_addon=["export OMP_NUM_THREADS=1", "# SBATCH-looking comments are harmless"],
        slurm_addon=None, exclusive=False, email=None),
    "hipergator_typed_gpus.sbatch": dict(
        site="hipergator-ai", n_gpu=2, launcher="srun", partition=None, constraint=None, qos=None,
        account=None, module=None, script_addon=None, slurm_addon=None, exclusive=False, email=None),
}


def render(case: dict, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr("submitit.slurm.slurm.shutil.which", lambda name: f"/usr/bin/{name}")
    site = load_site(case["site"])
    options = _options(site, "demo", "01:30:00", case["qos"], case["partition"], case["constraint"],
                       case["account"], case["module"], case["script_addon"], case["slurm_addon"],
                       case["exclusive"], case["email"], None, None)
    shape = plan.job_shape(case["n_gpu"], site.node_shape(options.partition), site, 1, case["launcher"])
    executor = submitit.AutoExecutor(folder=JOB_FOLDER, cluster="slurm")
    commands = [plan.display_command(shlex.split(COMMAND))]
    executor.update_parameters(**plan.executor_parameters(shape, site, options, commands, case["launcher"]))
    inner = executor._executor
    text = inner._make_submission_file_text(inner._submitit_command_str, "uid")
    return text.replace(shlex.quote(sys.executable), "PYTHON")


def sbatch_header(text: str) -> list[str]:
    """The ``#SBATCH`` lines sbatch obeys: those before the script's first command."""
    header = []
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            header.append(stripped)
    return header


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


@pytest.mark.parametrize("golden_name", sorted(CASES))
def test_script_addon_is_never_part_of_the_sbatch_header(golden_name: str) -> None:
    text = (GOLDEN_DIR / golden_name).read_text()
    header = sbatch_header(text)
    assert header == [line for line in text.splitlines() if line.startswith("#SBATCH")]  # every one obeyed
    for line in CASES[golden_name]["script_addon"] or []:
        assert line not in header and text.index(line) > text.index("\necho ")  # after the first command
    assert "echo 'coursekit: " in text and f"python -u {COMMAND}" in text  # the script says what runs


def test_jean_zay_gpu_types_follow_idris_rules() -> None:
    a100 = (GOLDEN_DIR / "jean_zay_a100_torchrun.sbatch").read_text()
    assert "#SBATCH --constraint=a100" in a100 and "--partition" not in a100
    assert "#SBATCH --cpus-per-task=64" in a100 and "#SBATCH --account=abc@a100" in a100  # 8 GPUs x 8 CPUs
    assert "module purge\nmodule load cpuarch/amd\nmodule load pytorch-gpu/py3/2.5.0" in a100
    h100 = (GOLDEN_DIR / "jean_zay_h100_account.sbatch").read_text()
    assert "#SBATCH --constraint=h100" in h100 and "--partition" not in h100
    assert "#SBATCH --cpus-per-task=24" in h100 and "#SBATCH --gres=gpu:4" in h100
    assert "module load arch/h100\nmodule load pytorch-gpu" in h100
    v100 = (GOLDEN_DIR / "jean_zay_8gpu_two_nodes.sbatch").read_text()
    assert "#SBATCH --partition=gpu_p13" in v100 and "#SBATCH --cpus-per-task=10" in v100
    assert "cpuarch" not in v100 and "arch/h100" not in v100
