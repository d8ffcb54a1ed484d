"""The sbatch templates in slurm/templates and slurm/cluster.sh: parsed, run with fake Slurm commands,
and (marker ``slurm``) checked by the real cluster's ``sbatch --test-only``."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from coursekit.train.config import parse_args

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "slurm" / "templates"
CLUSTER_SCRIPT = REPO / "slurm" / "cluster.sh"
TEMPLATE_NAMES = ("single_gpu.sbatch", "ddp_torchrun.sbatch", "multinode_srun_torchrun.sbatch")
SLURM_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")
COMMAND_TIMEOUT_S = 30
FAKE_NODES = ("node-a", "node-b")
FAKE_GPUS_PER_NODE = 4
FAKE_CPUS_PER_TASK = 16


def sbatch_directives(path: Path) -> dict[str, str]:
    """``#SBATCH --key=value`` lines before the first command, as {key: value}."""
    directives: dict[str, str] = {}
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # sbatch stops reading directives at the first command
        match = re.match(r"#SBATCH\s+--([\w-]+)(?:[= ](\S+))?", stripped)
        if match:
            key, value = match.group(1), match.group(2) or ""
            assert key not in directives, f"{path.name}: --{key} given twice"
            directives[key] = value
    return directives


def default_train_args(path: Path) -> list[str]:
    match = re.search(r"^DEFAULT_TRAIN_ARGS=\((.*)\)$", path.read_text(), re.MULTILINE)
    assert match, f"{path.name} has no DEFAULT_TRAIN_ARGS"
    return shlex.split(match.group(1))


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_template_directives_are_complete_and_valid(name: str) -> None:
    path = TEMPLATES / name
    directives = sbatch_directives(path)
    for key in ("job-name", "nodes", "ntasks-per-node", "gres", "cpus-per-task", "time", "output", "error"):
        assert key in directives, f"{name}: missing #SBATCH --{key}"
    assert re.fullmatch(r"gpu:[1-9]\d*", directives["gres"]), directives["gres"]
    assert SLURM_TIME.match(directives["time"]), directives["time"]
    assert re.fullmatch(r"[\w.-]+", directives["job-name"])
    assert int(directives["nodes"]) >= 1 and int(directives["cpus-per-task"]) >= 1


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_template_is_valid_bash_and_runs_the_engine(name: str) -> None:
    path = TEMPLATES / name
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=COMMAND_TIMEOUT_S)
    text = path.read_text()
    assert "-m coursekit.train" in text
    assert '"$@"' in text, "extra sbatch arguments must reach the engine"
    parse_args(default_train_args(path))  # the default run uses real engine options


def test_launch_shapes_of_the_templates() -> None:
    single = sbatch_directives(TEMPLATES / "single_gpu.sbatch")
    assert single["gres"] == "gpu:1" and single["nodes"] == "1"
    ddp = sbatch_directives(TEMPLATES / "ddp_torchrun.sbatch")
    assert ddp["nodes"] == "1" and ddp["ntasks-per-node"] == "1", "torchrun spawns the per-GPU processes"
    multi = sbatch_directives(TEMPLATES / "multinode_srun_torchrun.sbatch")
    assert int(multi["nodes"]) >= 2 and multi["ntasks-per-node"] == "1"


def _fake_slurm_bin(folder: Path) -> Path:
    """srun/torchrun/python that print their arguments, scontrol that expands FAKE_NODES."""
    folder.mkdir()
    scripts = {
        "srun": 'echo "srun $*"; exec "$@"',
        # the jobs folder comes from coursekit itself (python -m coursekit.sites); anything else is printed
        "python": f'[[ "$1 $2" == "-m coursekit.sites" ]] && exec {sys.executable} "$@"; '
                  'echo "COURSEKIT_RUN_ROOT=$COURSEKIT_RUN_ROOT"; echo "python $*"',
        "torchrun": 'echo "COURSEKIT_RUN_ROOT=$COURSEKIT_RUN_ROOT"; echo "torchrun $*"',
        "scontrol": f'[[ "$1 $2" == "show hostnames" ]] && printf "%s\\n" {" ".join(FAKE_NODES)}',
    }
    for name, body in scripts.items():
        script = folder / name
        script.write_text(f"#!/bin/bash\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def _run_with_fake_slurm(tmp_path: Path, name: str, *args: str) -> str:
    env = {
        **os.environ,
        "PATH": f"{_fake_slurm_bin(tmp_path / 'bin')}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NAME": name.split(".")[0],
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NUM_NODES": str(len(FAKE_NODES)),
        "SLURM_GPUS_ON_NODE": str(FAKE_GPUS_PER_NODE),
        "SLURM_CPUS_PER_TASK": str(FAKE_CPUS_PER_TASK),
    }
    env.pop("COURSEKIT_RUN_ROOT", None)
    env["COURSEKIT_COURSE_DIR"] = str(tmp_path / "course")
    env.pop("COURSEKIT_SITE", None)
    done = subprocess.run(["bash", str(TEMPLATES / name), *args], env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_multinode_template_rendezvous_on_first_node(tmp_path: Path) -> None:
    out = _run_with_fake_slurm(tmp_path, "multinode_srun_torchrun.sbatch", "--epochs", "3")
    torchrun = next(line for line in out.splitlines() if line.startswith("torchrun "))
    argv = shlex.split(torchrun)
    assert argv[argv.index("--rdzv_endpoint") + 1] == f"{FAKE_NODES[0]}:{29500 + 77}"  # a port per job (id 77)
    assert argv[argv.index("--rdzv_backend") + 1] == "c10d"
    assert argv[argv.index("--nnodes") + 1] == str(len(FAKE_NODES))
    assert argv[argv.index("--nproc_per_node") + 1] == str(FAKE_GPUS_PER_NODE)
    assert argv[argv.index("--rdzv_id") + 1] == "77"
    assert argv[-4:] == ["-m", "coursekit.train", "--epochs", "3"], "user arguments replace the defaults"


def test_ddp_template_one_process_per_gpu_and_default_run(tmp_path: Path) -> None:
    out = _run_with_fake_slurm(tmp_path, "ddp_torchrun.sbatch")
    argv = shlex.split(next(line for line in out.splitlines() if line.startswith("torchrun ")))
    assert argv[argv.index("--nproc_per_node") + 1] == str(FAKE_GPUS_PER_NODE)
    assert argv[argv.index("-m") + 2:] == default_train_args(TEMPLATES / "ddp_torchrun.sbatch")


def test_single_gpu_template_runs_python_under_srun(tmp_path: Path) -> None:
    out = _run_with_fake_slurm(tmp_path, "single_gpu.sbatch", "--model", "linear")
    assert "srun python -u -m coursekit.train --model linear" in out


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_templates_keep_job_folders_where_coursekit_does(tmp_path: Path, name: str) -> None:
    """One owner of "where job folders live": coursekit.course.CoursePaths, which the templates ask through
    ``python -m coursekit.sites`` (here the course's jobs/)."""
    out = _run_with_fake_slurm(tmp_path, name)
    expected = tmp_path / "course" / "jobs" / name.split(".")[0]
    assert f"COURSEKIT_RUN_ROOT={expected}\n" in out, out


def test_cluster_script_is_valid_bash_and_rejects_unknown_commands() -> None:
    subprocess.run(["bash", "-n", str(CLUSTER_SCRIPT)], check=True, timeout=COMMAND_TIMEOUT_S)
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "no-such-command"], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode != 0 and "unknown command" in done.stderr
    for conf in ("slurm.conf.in", "gres.conf.in", "slurmdbd.conf.in"):
        assert (REPO / "slurm" / "conf" / conf).is_file()


def _source_cluster_script(tmp_path: Path, snippet: str, gpus_listed: int) -> subprocess.CompletedProcess[str]:
    """Run ``snippet`` after sourcing cluster.sh, with a stand-in nvidia-smi listing ``gpus_listed`` GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    listing = "".join(f"echo 'GPU {i}: NVIDIA H100 (UUID: GPU-{i})'\n" for i in range(gpus_listed))
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/bash\n{listing}")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(CLUSTER_SCRIPT))}; {snippet}"], env=env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


def test_cluster_script_uses_real_gpu_devices_where_nvidia_smi_lists_gpus(tmp_path: Path) -> None:
    done = _source_cluster_script(tmp_path, "detected_gpu_count; gpu_device_files 2", gpus_listed=2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "/dev/nvidia[0-1]"]
    too_many = _source_cluster_script(tmp_path / "again", "gpu_device_files 3", gpus_listed=2)
    assert too_many.returncode == 1 and "this machine has 2 GPUs" in too_many.stderr


def test_cluster_config_templates_have_every_placeholder_filled() -> None:
    script = CLUSTER_SCRIPT.read_text()
    values_block = script[script.index("local values=("):]
    values_block = values_block[:values_block.index(")")]
    filled = set(re.findall(r"([A-Z_]+)=", values_block))
    for conf in (REPO / "slurm" / "conf").glob("*.in"):
        placeholders = set(re.findall(r"@([A-Z_]+)@", conf.read_text()))
        assert placeholders and placeholders <= filled, f"{conf.name}: {placeholders - filled} never filled"
    slurm_conf = (REPO / "slurm" / "conf" / "slurm.conf.in").read_text()
    for setting in ("AccountingStorageType=accounting_storage/slurmdbd", "GresTypes=gpu", "Gres=gpu:@GPUS@",
                    "Default=YES", "SelectType=select/cons_tres"):
        assert setting in slurm_conf


# ------------------------------------------------------------------------------------ real cluster


@pytest.mark.slurm
def test_cluster_status_reports_healthy() -> None:
    done = subprocess.run(["bash", str(CLUSTER_SCRIPT), "status"], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, f"the local Slurm is not up (bash slurm/cluster.sh start):\n{done.stdout}"


@pytest.mark.slurm
@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_template_accepted_by_sbatch_test_only(name: str, tmp_path: Path) -> None:
    # on a one-node cluster the multi-node template is checked with its node count set to 1
    nodes = int(subprocess.run(["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, check=True,
                               timeout=COMMAND_TIMEOUT_S).stdout.split()[0])
    overrides = ["--nodes=1"] if name.startswith("multinode") and nodes < 2 else []
    done = subprocess.run(["sbatch", "--test-only", *overrides, str(TEMPLATES / name)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert "to start at" in done.stderr, done.stderr
