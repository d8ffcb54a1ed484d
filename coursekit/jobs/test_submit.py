"""Submitting through submitit with a fake ``sbatch`` on PATH (it records what it is given), and for
real through submitit's local executor. The real Slurm is exercised in tests/integration."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from submitit.core.utils import DelayedSubmission

from coursekit import slurm_cli
from coursekit.jobs import registry
from coursekit.jobs.submit import gpu_jobs_submitter, submit_function, submit_jobs
from coursekit.jobs.tasks import CommandTask
from coursekit.sites import SITE_ENV
from coursekit.slurm_cli import SlurmError

FIRST_FAKE_JOB_ID = 100
FAKE_SBATCH = f"""#!/bin/bash
state="$FAKE_SLURM_DIR"
n=$(cat "$state/counter" 2>/dev/null || echo {FIRST_FAKE_JOB_ID})
echo $((n + 1)) > "$state/counter"
echo "$@" >> "$state/calls"
env | grep -c '^SLURM_' > "$state/slurm_vars_$n"
if [ -f "$state/refuse" ]; then cat "$state/refuse" >&2; exit 1; fi
echo "Submitted batch job $n"
"""

FAKE_SCONTROL = """#!/bin/bash
state="$FAKE_SLURM_DIR"
if [ "$1 $3" != "update StartTime=now" ]; then echo "fake scontrol: $* not faked" >&2; exit 1; fi
if [ -f "$state/refuse_start" ]; then cat "$state/refuse_start" >&2; exit 1; fi
for id in $(echo "${2#JobId=}" | tr , ' '); do  # with the number of the array's folders made by then
    echo "$id:$(find "$COURSEKIT_COURSE_DIR/jobs" -mindepth 2 -maxdepth 2 -type d -name "${id}_*" | wc -l)"
done >> "$state/started"
"""


class FakeSlurm:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def calls(self) -> list[str]:
        path = self.folder / "calls"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def cancelled(self) -> list[str]:
        path = self.folder / "cancelled"
        return path.read_text().split() if path.exists() else []

    @property
    def started(self) -> list[str]:
        path = self.folder / "started"
        return path.read_text().split() if path.exists() else []

    def refuse(self, message: str) -> None:
        (self.folder / "refuse").write_text(message)

    def refuse_from(self, job_id: int, message: str) -> None:
        """Accept sbatch until ``job_id``, then refuse with ``message``."""
        script = self.folder.parent / "bin" / "sbatch"
        script.write_text(script.read_text().replace(
            'if [ -f "$state/refuse" ]', f'if [ "$n" -ge {job_id} ] && echo {message!r} > "$state/refuse" && [ -f "$state/refuse" ]'))


SCRIPTS = ("a.py", "b.py", "t.py", "ok.py")


@pytest.fixture()
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A course folder, the current folder, holding the scripts the tests submit."""
    course = tmp_path / "course"
    course.mkdir()
    for script in SCRIPTS:
        (course / script).write_text("print('hello')\n")
    monkeypatch.setenv("COURSEKIT_COURSE_DIR", str(course))
    monkeypatch.chdir(course)
    monkeypatch.delenv(SITE_ENV, raising=False)
    return course


@pytest.fixture()
def fake_slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, course: Path) -> FakeSlurm:
    bin_dir, state = tmp_path / "bin", tmp_path / "slurm-state"
    bin_dir.mkdir()
    state.mkdir()
    scancel = '#!/bin/bash\necho "$@" >> "$FAKE_SLURM_DIR/cancelled"\n'
    scontrol = FAKE_SCONTROL
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", "#!/bin/bash\nexit 1\n"), ("scancel", scancel),
                       ("scontrol", scontrol)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    return FakeSlurm(state)


def submitted_task(job_folder: Path) -> CommandTask:
    delayed = DelayedSubmission.load(job_folder / f"{job_folder.name}_submitted.pkl")
    return delayed.function


JZ = {"site": "jean-zay", "account": "abc"}


def test_cartesian_product_gpu_counts_outer_like_idr_pytools(fake_slurm: FakeSlurm, course: Path) -> None:
    ids = gpu_jobs_submitter(["a.py --x 1", "b.py"], n_gpu=[1, 2, 4], name="sweep", **JZ)
    first = FIRST_FAKE_JOB_ID  # idr_pytools: for n in n_gpu: for command in srun_commands: sbatch
    assert ids == [f"{first}_0", f"{first}_1", f"{first + 1}_0", f"{first + 1}_1", f"{first + 2}_0", f"{first + 2}_1"]
    assert len(fake_slurm.calls) == 3  # one sbatch per GPU count, each an array of both commands
    # each array is submitted to begin later and started once both its jobs' folders exist (a job started
    # before submitit made its folder cannot open its log and fails at 0 s)
    assert fake_slurm.started == [f"{first}:2", f"{first + 1}:2", f"{first + 2}:2"]
    tasks = {i: submitted_task(course / "jobs" / "sweep" / i) for i in ids}
    assert [tasks[i].words for i in ids[:2]] == [["a.py", "--x", "1"], ["b.py"]]
    assert [tasks[i].nproc_per_node for i in ids] == [1, 1, 2, 2, 4, 4]
    assert {t.env["COURSEKIT_RUN_ROOT"] for t in tasks.values()} == {str(course / "jobs" / "sweep")}
    assert [tasks[i].env["COURSEKIT_EXPECTED_WORLD_SIZE"] for i in ids] == ["1", "1", "2", "2", "4", "4"]


def test_jobs_not_started_at_once_start_at_their_begin_time_and_a_warning_says_so(fake_slurm: FakeSlurm) -> None:
    (fake_slurm.folder / "refuse_start").write_text("slurm_update error: Access/permission denied")
    with pytest.warns(UserWarning, match=f"job\\(s\\) {FIRST_FAKE_JOB_ID} start within {slurm_cli.BEGIN_AFTER_S} s"):
        ids = gpu_jobs_submitter(["a.py", "b.py"], n_gpu=1, name="later", **JZ)
    assert ids == [f"{FIRST_FAKE_JOB_ID}_0", f"{FIRST_FAKE_JOB_ID}_1"] and fake_slurm.cancelled == []


def test_a_sweep_that_does_not_fit_the_profile_submits_nothing(fake_slurm: FakeSlurm) -> None:
    with pytest.raises(ValueError, match="cpus_per_task=50: 1 task"):
        gpu_jobs_submitter("a.py", n_gpu=[1, 4], cpus_per_task=50, **JZ)  # gpu_p13: 40 cores per node
    assert fake_slurm.calls == []


def test_sbatch_refusing_mid_sweep_cancels_what_was_submitted(fake_slurm: FakeSlurm) -> None:
    fake_slurm.refuse_from(FIRST_FAKE_JOB_ID + 2, "sbatch: error: More processors requested than permitted")
    with pytest.raises(SlurmError) as raised:
        gpu_jobs_submitter(["a.py", "b.py"], n_gpu=[1, 2, 4], name="half", **JZ)
    text = str(raised.value)  # what the notebook shows
    assert "More processors requested than permitted" in text
    assert f"the 4 job(s) this call had already submitted were cancelled ({FIRST_FAKE_JOB_ID}, " in text
    assert fake_slurm.cancelled == [str(FIRST_FAKE_JOB_ID), str(FIRST_FAKE_JOB_ID + 1)]  # the two arrays


def test_an_explicit_interpreter_runs_the_command(fake_slurm: FakeSlurm, course: Path) -> None:
    ids = gpu_jobs_submitter(["python3 a.py --x 1", "/opt/env/bin/python -u -m mod"], name="interp", **JZ)
    first, second = (submitted_task(course / "jobs" / "interp" / i) for i in ids)
    assert first.argv()[-5:] == ["python3", "-u", "a.py", "--x", "1"]
    assert second.argv()[-4:] == ["/opt/env/bin/python", "-u", "-m", "mod"]
    script = Path(fake_slurm.calls[0].split()[-1]).read_text()  # one array, one script
    assert 'echo "coursekit: 1 node(s) x 1 task(s)' in script and "${COURSEKIT_COMMANDS[${SLURM_ARRAY_TASK_ID:-0}]}" in script
    assert "#   [0] python3 -u a.py --x 1" in script and "#   [1] /opt/env/bin/python -u -m mod" in script


def test_the_script_shows_what_runs_and_ends_the_job_when_a_task_fails(fake_slurm: FakeSlurm, course: Path) -> None:
    job_id = gpu_jobs_submitter("t.py --lr 0.1", n_gpu=8, name="show", **JZ)[0]
    script = (course / "jobs" / "show" / job_id / f"{job_id}_submission.sh").read_text()
    assert "# coursekit: 2 node(s) x 4 task(s) (srun --kill-on-bad-exit=1); each process runs:" in script
    assert "echo 'coursekit: 2 node(s) x 4 task(s) (srun --kill-on-bad-exit=1); each process runs: python -u " \
           "t.py --lr 0.1'" in script
    assert "srun --unbuffered" in script and "--kill-on-bad-exit=1" in script.split("srun --unbuffered")[1]
    assert submitted_task(course / "jobs" / "show" / job_id).env["COURSEKIT_EXPECTED_WORLD_SIZE"] == "8"


def test_multi_gpu_jobs_see_the_nodes_gpus_by_default(fake_slurm: FakeSlurm, course: Path) -> None:
    one, four = gpu_jobs_submitter("t.py", n_gpu=[1, 4], name="bind", **JZ)
    scripts = [(course / "jobs" / "bind" / i / f"{i}_submission.sh").read_text() for i in (one, four)]
    assert "#SBATCH --gpus-per-task=1" in scripts[0] and "--gres" not in scripts[0]  # one GPU: as before
    assert "#SBATCH --gres=gpu:4" in scripts[1] and "--gpus-per-task" not in scripts[1]
    task_bound = gpu_jobs_submitter("t.py", n_gpu=4, gpu_binding="task", name="bind", **JZ)[0]
    assert "#SBATCH --gpus-per-task=1" in (course / "jobs" / "bind" / task_bound /
                                            f"{task_bound}_submission.sh").read_text()


def test_short_jobs_get_a_signal_delay_that_fits(fake_slurm: FakeSlurm, course: Path) -> None:
    two_minutes = gpu_jobs_submitter("t.py", time_max=2, name="short", **JZ)[0]
    assert "#SBATCH --signal=USR2@30" in (course / "jobs" / "short" / two_minutes /
                                          f"{two_minutes}_submission.sh").read_text()
    with pytest.warns(UserWarning, match="may send it up to 60 s early"):
        gpu_jobs_submitter("t.py", time_max=1, name="short", **JZ)
    with pytest.raises(ValueError, match="signal_delay_s=300: the job's time limit is 120 s"):
        submit_jobs("t.py", time_max=2, signal_delay_s=300, **JZ)


def test_a_32_job_sweep_is_one_sbatch(fake_slurm: FakeSlurm) -> None:
    ids = gpu_jobs_submitter([f"t.py --seed {s}" for s in range(32)], n_gpu=2, name="race", **JZ)
    assert len(ids) == 32 and len(set(ids)) == 32
    assert len(fake_slurm.calls) == 1
    script = (Path(fake_slurm.calls[0].split()[-1])).read_text()
    assert "#SBATCH --array=0-31%32" in script


@pytest.mark.parametrize("bad_call, words", [
    ({"n_gpu": [1, 6]}, "n_gpu=6"),
    ({"n_gpu": [2, 0]}, "n_gpu=0"),
    ({"srun_commands": ["ok.py", "python missing.py"]}, "srun_commands=.*no script"),
    ({"srun_commands": ["ok.py", "srun python ok.py"]}, "srun_commands"),
    ({"n_gpu": [1, 4], "cpus_per_task": 11}, "cpus_per_task=11"),
    ({"constraint": "a100", "partition": "gpu_p13"}, "constraint='a100' selects partition 'gpu_p5'"),
    ({"script_addon": "#SBATCH --time=999"}, "script_addon"),
    ({"slurm_addon": "#SBATCH --uid=0"}, "--uid is not allowed"),
    ({"gpu_binding": "socket"}, "gpu_binding="),
    ({"n_gpu_per_task": 3, "n_gpu": 4}, "n_gpu_per_task=3"),
    ({"time_max": "2 hours"}, "time_max"),
    ({"name": "my job"}, "name="),
    ({"name": "x\n#SBATCH --qos=vip"}, "name="),
    ({"partition": "gpu_p99"}, "partition='gpu_p99'"),
    ({"account": None}, "account: site 'jean-zay' needs"),
    ({"site": "atlantis"}, "site='atlantis' is unknown"),
    ({"launcher": "mpirun"}, "launcher="),
    ({"qos": "qos_vip"}, "qos='qos_vip'"),
    ({"slurm_addon": "#SBATCH --output=/tmp/x"}, "slurm_addon"),
    ({"email": "not-an-address"}, "email="),
])
def test_bad_input_submits_nothing(fake_slurm: FakeSlurm, course: Path, bad_call: dict, words: str) -> None:
    call = {"srun_commands": ["a.py", "b.py"], "n_gpu": [1, 4], "name": "sweep", **JZ, **bad_call}
    with pytest.raises(ValueError, match=words):
        gpu_jobs_submitter(**call)
    assert fake_slurm.calls == []
    assert not (course / "jobs").exists()


def test_scripts_are_kept_never_overwritten(fake_slurm: FakeSlurm, course: Path) -> None:
    first = gpu_jobs_submitter("a.py", name="same", **JZ)[0]
    script = course / "jobs" / "same" / first / f"{first}_submission.sh"
    before = script.read_text()
    second = gpu_jobs_submitter("b.py", name="same", **JZ)[0]
    assert second != first and script.read_text() == before
    assert (course / "jobs" / "same" / second / f"{second}_submission.sh").exists()


def test_the_kernels_slurm_variables_do_not_leak(fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "1", "SLURM_JOB_GPUS": "0"}.items():
        monkeypatch.setenv(name, value)
    gpu_jobs_submitter("a.py", **JZ)
    assert (fake_slurm.folder / f"slurm_vars_{FIRST_FAKE_JOB_ID}").read_text().strip() == "0"
    assert os.environ["SLURM_JOB_ID"] == "7"  # restored for the kernel


def test_sbatch_refusal_carries_slurms_message(fake_slurm: FakeSlurm) -> None:
    fake_slurm.refuse("sbatch: error: Batch job submission failed: Invalid account or account/partition combination")
    with pytest.raises(SlurmError, match="Invalid account or account/partition combination"):
        gpu_jobs_submitter("a.py", **JZ)


def test_torchrun_one_task_per_node(fake_slurm: FakeSlurm, course: Path) -> None:
    job_id = gpu_jobs_submitter("-m coursekit.train --epochs 1", n_gpu=8, launcher="torchrun", name="ddp", **JZ)[0]
    folder = course / "jobs" / "ddp" / job_id
    script = (folder / f"{job_id}_submission.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "#SBATCH --gres=gpu:4" in script and "#SBATCH --cpus-per-task=40" in script
    task = submitted_task(folder)
    assert (task.launcher, task.nnodes, task.nproc_per_node) == ("torchrun", 2, 4)


def test_torchrun_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("coursekit.jobs.tasks._rendezvous_endpoint", lambda: "node1:29501")
    task = CommandTask(["-m", "coursekit.train", "--epochs", "1"], launcher="torchrun", nnodes=2, nproc_per_node=4)
    argv = task.argv("77")
    assert argv[1:] == ["-u", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "4",
                        "--rdzv_backend", "c10d", "--rdzv_endpoint", "node1:29501", "--rdzv_id", "77",
                        "--no-python", argv[0], "-u", "-m", "coursekit.train", "--epochs", "1"]
    single = CommandTask(["t.py"], launcher="torchrun", nproc_per_node=2).argv("1")
    assert "--standalone" in single


def test_singularity_wraps_the_command() -> None:
    argv = CommandTask(["t.py", "--x"], singularity="/images/pytorch.sif").argv()
    assert argv == ["singularity", "exec", "--nv", "/images/pytorch.sif", "python", "-u", "t.py", "--x"]


def test_jobs_are_registered(fake_slurm: FakeSlurm) -> None:
    jobs = submit_jobs(["a.py", "b.py"], n_gpu=[1, 4], name="reg", **JZ)
    records = registry.merged_records()
    assert [r["job_id"] for r in records] == sorted(j.job_id for j in jobs)
    assert {r["n_gpu"] for r in records} == {1, 4}
    assert {r["command"] for r in records} == {"a.py", "b.py"}


# ---------------------------------------------------------------- the local executor, for real


def test_local_function_job_returns_its_value_and_its_exception(course: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.jobs.handle import JobFailedError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: n_gpu counts CPU processes

    def rank_and_root(offset: int) -> tuple[int, str]:
        return int(os.environ["SUBMITIT_LOCAL_GLOBALID"]) + offset, os.environ["COURSEKIT_RUN_ROOT"]

    job = submit_function(rank_and_root, 10, n_gpu=2, site="local", name="fn")
    assert job.results(timeout=60) == [(10, str(course / "jobs" / "fn")), (11, str(course / "jobs" / "fn"))]
    assert job.state == "COMPLETED"

    def fails() -> None:
        raise ArithmeticError("from the job")

    failing = submit_function(fails, site="local")
    with pytest.raises(JobFailedError, match="ArithmeticError: from the job"):
        failing.result(timeout=60)
    assert failing.state == "FAILED"


def test_local_command_job_logs_and_fails_with_its_exit_code(course: Path) -> None:
    ok, bad = submit_jobs(["-c 'print(\"hello from the job\")'", "-c 'import sys; sys.exit(4)'"], site="local",
                          name="cmd")
    assert ok.wait(60) == "COMPLETED" and "hello from the job" in ok.stdout.read_text()
    assert bad.wait(60) == "FAILED" and "exited with code 4" in bad.tail(5, "err")


def test_a_refused_submission_leaves_no_files(fake_slurm: FakeSlurm, course: Path) -> None:
    fake_slurm.refuse("sbatch: error: Batch job submission failed: Unable to contact slurm controller")
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        gpu_jobs_submitter(["a.py", "b.py"], name="refused", **JZ)
    assert list((course / "jobs" / "refused").iterdir()) == []


def test_node_binding_asks_gres_like_idr_pytools(fake_slurm: FakeSlurm, course: Path) -> None:
    job_id = gpu_jobs_submitter("t.py", n_gpu=4, gpu_binding="node", name="gres", **JZ)[0]
    script = (course / "jobs" / "gres" / job_id / f"{job_id}_submission.sh").read_text()
    assert "#SBATCH --gres=gpu:4" in script and "--gpus-per-task" not in script
    assert "#SBATCH --ntasks-per-node=4" in script and "#SBATCH --hint=nomultithread" in script


def test_local_tasks_get_their_own_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from coursekit.jobs.tasks import _gpu_slice_for_task

    assert [_gpu_slice_for_task("4,5,6,7", rank, 2) for rank in (0, 1)] == ["4,5", "6,7"]
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv("SUBMITIT_LOCAL_LOCALID", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert CommandTask(["t.py"], bind_local_gpus=1)._environment()["CUDA_VISIBLE_DEVICES"] == "2"


def test_requeue_is_opt_in_for_commands() -> None:
    assert CommandTask(["t.py"]).checkpoint() is None  # a plain command ends at its time limit
    again = CommandTask(["t.py"], requeue=True).checkpoint()
    assert isinstance(again, DelayedSubmission) and again.function.words == ["t.py"]


def test_a_launcher_the_site_cannot_use_is_refused(fake_slurm: FakeSlurm, course: Path) -> None:
    profile = course / "srun-only.toml"
    profile.write_text('name = "srun-only"\nlaunchers = ["srun"]\n[partitions.gpu]\ngpus_per_node = 4\n'
                       'cpus_per_gpu = 4\n')
    with pytest.raises(ValueError, match=r"launcher='torchrun': site 'srun-only' cannot use it; use one of \['srun'\]"):
        gpu_jobs_submitter("t.py", n_gpu=2, launcher="torchrun", site=str(profile))
    assert fake_slurm.calls == []


def test_the_array_script_names_the_command_each_array_task_runs(fake_slurm: FakeSlurm, course: Path) -> None:
    gpu_jobs_submitter(["a.py --msg 'a b $HOME `id`'", "b.py"], name="arr", **JZ)
    script = Path(fake_slurm.calls[0].split()[-1]).read_text()
    setup = script.split("# setup\n")[1].split("\n# command")[0]
    said = [subprocess.run(["bash", "-c", setup.split("\nmodule purge")[0]], env={"SLURM_ARRAY_TASK_ID": str(i)},
                           capture_output=True, text=True, check=True, timeout=30).stdout for i in (0, 1)]
    assert said[0].endswith("each process runs: python -u a.py --msg 'a b $HOME `id`'\n")  # shown, not run
    assert said[1].endswith("each process runs: python -u b.py\n")
