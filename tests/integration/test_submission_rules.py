"""The submission rules on the real local Slurm: nothing half-submitted, no #SBATCH smuggled in, a failing
rank ends the job, what a job sees (its GPUs, its world size), idr_pytools' explicit interpreter.

The cluster's shape (nodes, GPUs per node, memory) is read from sinfo, never assumed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import submitit

import coursekit
from coursekit import slurm_cli
from coursekit.jobs import plan
from coursekit.sites import load_site
from coursekit.slurm_cli import SlurmError

REPO = Path(__file__).resolve().parents[2]
END_S = 120  # a tiny job, waiting behind other tests' jobs on a small cluster
FAIL_FAST_S = 30  # a job whose rank fails must end well before its other rank's sleep
SURVIVOR_SLEEP_S = 90
COMMAND_TIMEOUT_S = 30


def default_partition() -> dict:
    rows = slurm_cli.sinfo_partitions()
    row = next(r for r in rows if r["default"]) if any(r["default"] for r in rows) else rows[0]
    return {**row, "total_nodes": sum(r["nodes"] for r in rows if r["name"] == row["name"]
                                      and r["gpus_per_node"] == row["gpus_per_node"])}


def jobs_named(name: str) -> list[dict[str, str]]:
    return slurm_cli.squeue(name=name)


def time_limit(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id.split("_")[0], "-o", "%l"], capture_output=True, text=True,
                          check=True, timeout=COMMAND_TIMEOUT_S).stdout.strip()


def test_a_sweep_larger_than_the_cluster_is_refused_before_any_sbatch(course: Path) -> None:
    part = default_partition()
    too_many = (part["total_nodes"] + 1) * part["gpus_per_node"]
    with pytest.raises(ValueError, match=f"n_gpu={too_many}: the cluster has {part['total_nodes']} node"):
        coursekit.gpu_jobs_submitter("-c 'print(1)'", n_gpu=[1, part["gpus_per_node"], too_many], name="toobig")
    assert jobs_named("toobig") == []  # the 1- and N-GPU jobs were not sent either


def test_sbatch_refusing_mid_sweep_cancels_the_jobs_already_sent(course: Path) -> None:
    """A 2-node job with every node but one excluded passes coursekit's checks (the cluster has the
    nodes) and is refused by sbatch, after the 1-GPU job of the same sweep was sent."""
    part = default_partition()
    assert part["total_nodes"] >= 2, f"this test needs the two-node local cluster (sinfo: {part})"
    nodes = subprocess.run(["sinfo", "-h", "-N", "-p", part["name"], "-o", "%N"], capture_output=True, text=True,
                           check=True, timeout=COMMAND_TIMEOUT_S).stdout.split()
    others = ",".join(sorted(set(nodes))[1:])
    with pytest.raises(SlurmError) as raised:
        coursekit.gpu_jobs_submitter("-c 'import time; time.sleep(60)'", name="halfsweep",
                                     n_gpu=[1, 2 * part["gpus_per_node"]], slurm_addon=f"#SBATCH --exclude={others}")
    text = str(raised.value)  # what the participant sees
    assert "Batch job submission failed" in text
    assert "the 1 job(s) this call had already submitted were cancelled" in text
    first = text.rsplit("(", 1)[1].rstrip(")")
    deadline = time.monotonic() + END_S
    rows = slurm_cli.squeue([first])
    while time.monotonic() < deadline and not all(r["state"] == "CANCELLED" for r in rows):
        time.sleep(1)
        rows = slurm_cli.squeue([first])
    assert rows and all(r["state"] == "CANCELLED" for r in rows), rows


def test_script_addon_with_sbatch_lines_is_refused_and_nothing_is_sent(course: Path) -> None:
    with pytest.raises(ValueError, match="script_addon line '#SBATCH --time=999'"):
        coursekit.gpu_jobs_submitter("-c 'print(1)'", name="smuggle", time_max=10,
                                     script_addon=["export A=1", "#SBATCH --time=999"])
    with pytest.raises(ValueError, match="slurm_addon line '#SBATCH --uid=0': --uid is not allowed"):
        coursekit.gpu_jobs_submitter("-c 'print(1)'", name="smuggle", slurm_addon="#SBATCH --uid=0")
    assert jobs_named("smuggle") == []


def test_sbatch_does_not_read_script_addon_as_options(course: Path) -> None:
    """Even a line that slipped past the check (built here by hand) comes after a command: sbatch ignores it."""
    site = load_site("slurm")
    options = plan.Options(name="addonpos", time_min=3, signal_delay_s=30,
                           script_addon=("#SBATCH --time=999", "#SBATCH --job-name=renamed", "echo addon-ran"))
    shape = plan.job_shape(1, site.node_shape(), site)
    params = plan.executor_parameters(shape, site, options, ["python -u -c 'print(1)'"])
    executor = submitit.AutoExecutor(folder=course / "jobs" / "addonpos" / "%j", cluster="slurm")
    executor.update_parameters(**params)
    job = executor.submit(print, "from the job")
    slurm_cli.start_now([job.job_id])  # submitted to begin later (slurm_cli.BEGIN_AFTER_S): its folder exists now
    try:
        assert time_limit(job.job_id) == "3:00"  # not 16:39:00
        assert [r["name"] for r in slurm_cli.squeue([job.job_id])] == ["addonpos"]
        deadline = time.monotonic() + END_S
        while not job.done() and time.monotonic() < deadline:
            time.sleep(1)
        log = Path(job.paths.stdout).read_text()
        assert "addon-ran" in log and "coursekit: 1 node(s) x 1 task(s)" in log
    finally:
        slurm_cli.scancel([job.job_id])


def test_a_rank_that_dies_ends_the_job_at_once(course: Path) -> None:
    rank_one_fails = ("-c 'import os, sys, time; rank = int(os.environ[\"SLURM_PROCID\"]); "
                      f"time.sleep({SURVIVOR_SLEEP_S}) if rank == 0 else sys.exit(3)'")
    job = coursekit.submit_jobs(rank_one_fails, n_gpu=2, name="rankdies", time_max=5)[0]
    deadline = time.monotonic() + END_S
    while job.state in ("PENDING", "CONFIGURING") and time.monotonic() < deadline:
        time.sleep(0.5)
    started = time.monotonic()
    assert job.wait(END_S) == "FAILED", job.tail(20, "err")
    assert time.monotonic() - started < FAIL_FAST_S, "rank 0 kept the job alive after rank 1 failed"
    assert "--kill-on-bad-exit=1" in job.submission_script.read_text()


def test_multi_gpu_tasks_see_the_nodes_gpus_and_the_expected_world_size(course: Path) -> None:
    show = ("-c 'import os; print(\"seen\", os.environ[\"SLURM_PROCID\"], os.environ.get(\"CUDA_VISIBLE_DEVICES\"), "
            "os.environ[\"COURSEKIT_EXPECTED_WORLD_SIZE\"])'")
    job = coursekit.submit_jobs(show, n_gpu=2, name="nodebind")[0]
    assert job.wait(END_S) == "COMPLETED", job.tail(20, "err")
    lines = []
    for task in range(job.num_tasks):
        text = (job.folder / f"{job.job_id}_{task}_log.out").read_text()
        lines += [line.split() for line in text.splitlines() if line.startswith("seen ")]
    assert sorted(int(words[1]) for words in lines) == [0, 1]
    assert all(len(words[2].split(",")) == 2 for words in lines), lines  # both GPUs of the node, each task
    assert {words[3] for words in lines} == {"2"}
    first_log = (job.folder / f"{job.job_id}_0_log.out").read_text()
    assert "coursekit: 1 node(s) x 2 task(s) (srun --kill-on-bad-exit=1); each process runs: python -u -c" in first_log


def test_an_explicit_interpreter_runs_like_idr_pytools(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(course)  # the job starts here: it must still import this checkout's coursekit
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    (course / "hello.py").write_text("import sys\nprint('hello from', sys.argv[1:])\n")
    job_id = coursekit.gpu_jobs_submitter("python3 hello.py --x 1", name="interp")[0]
    job = coursekit.get_job(job_id)
    assert job.wait(END_S) == "COMPLETED", job.tail(20, "err")
    assert "hello from ['--x', '1']" in job.stdout.read_text()
    with pytest.raises(ValueError, match="srun_commands=.*no script 'absent.py'"):
        coursekit.gpu_jobs_submitter("python3 absent.py", name="interp")
