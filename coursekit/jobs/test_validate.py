"""Parameter checks: the message names the parameter and what is allowed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coursekit.jobs import validate


@pytest.mark.parametrize("text, minutes", [
    ("30", 30), ("10:30", 11), ("02:00:00", 120), ("1-00", 1440), ("1-02:30", 1590), ("0-00:00:30", 1),
    (45, 45),
])
def test_slurm_time_syntax(text: str | int, minutes: int) -> None:
    assert validate.parse_time(text) == minutes


@pytest.mark.parametrize("bad", ["2h", "", "00:00:00", "1:61:00", "10:75", "-5", 0, -3, 1.5, True, None, "1 day"])
def test_bad_time_names_time_max_and_the_syntax(bad: object) -> None:
    with pytest.raises(ValueError, match=r"time_max=.*HH:MM:SS"):
        validate.parse_time(bad)


@pytest.mark.parametrize("bad", ["my job", "a\nb", "x;rm -rf", "$(id)", "../up", "", "-lead", "é", "a" * 65, None, 3])
def test_names_with_whitespace_newlines_or_shell_characters_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="name=.*letters, digits"):
        validate.check_name(bad)


def test_good_names_pass() -> None:
    for name in ("pseudo", "run-1", "lab_03.bs256", "a+b"):
        assert validate.check_name(name) == name


@pytest.mark.parametrize("command, name", [
    ("train.py --lr 0.1", "train"), ("./script.py", "script"), ("-m coursekit.train --epochs 1", "train"),
    ("-c 'print(1)'", "python-c"), ("'dir/my model.py' --x", "my_model"),
])
def test_default_names_are_never_empty(command: str, name: str) -> None:
    assert validate.default_name(command) == name


@pytest.mark.parametrize("count, per_node, expected", [(1, 4, 1), (4, 4, 4), (8, 4, 8), (16, 8, 16), (3, 4, 3)])
def test_gpu_counts_that_fit(count: int, per_node: int, expected: int) -> None:
    assert validate.check_gpu_count(count, per_node, "site") == expected


def test_gpu_count_not_a_multiple_of_a_node_suggests_neighbours() -> None:
    with pytest.raises(ValueError, match=r"n_gpu=6: .* 4 GPUs per node.*e\.g\. 4 or 8"):
        validate.check_gpu_count(6, 4, "jean-zay")


@pytest.mark.parametrize("bad", [0, -1, 2.0, "4", True, None])
def test_gpu_counts_must_be_positive_whole_numbers(bad: object) -> None:
    with pytest.raises(ValueError, match="n_gpu=.*whole numbers >= 1"):
        validate.check_gpu_count(bad, 4, "site")


def test_one_machine_has_no_second_node() -> None:
    with pytest.raises(ValueError, match="one machine with 2 GPUs"):
        validate.check_gpu_count(4, 2, "local", multi_node=False)


def test_gpus_per_task_must_divide() -> None:
    assert validate.check_gpus_per_task(2, 4, 4) == 2
    with pytest.raises(ValueError, match=r"n_gpu_per_task=3: .* allowed: \[1, 2, 4\]"):
        validate.check_gpus_per_task(3, 4, 4)


@pytest.mark.parametrize("bad", ["python", "python3 -u", "srun python t.py", "torchrun t.py", "", "a.py\nrm x",
                                 "t.py 'unclosed", "-m", "python3 -m", 12])
def test_bad_commands(bad: object) -> None:
    with pytest.raises(ValueError, match="srun_commands"):
        validate.check_command(bad)


def test_commands_split_like_a_shell_without_running_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    assert validate.check_command("t.py --msg 'a b; rm -rf /'") == ["t.py", "--msg", "a b; rm -rf /"]


@pytest.mark.parametrize("command, interpreter, rest", [
    ("python3 t.py --x 1", "python3", ["t.py", "--x", "1"]),  # idr_pytools: srun python3 t.py
    ("python -u t.py", "python", ["t.py"]),  # coursekit adds -u itself
    ("python3.11 -m coursekit.train", "python3.11", ["-m", "coursekit.train"]),
    ("/opt/env/bin/python -c 'print(1)'", "/opt/env/bin/python", ["-c", "print(1)"]),
    ("t.py --x", None, ["t.py", "--x"]),
    ("-m coursekit.train", None, ["-m", "coursekit.train"]),
])
def test_an_explicit_interpreter_is_accepted(command: str, interpreter: str | None, rest: list[str],
                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")
    words = validate.check_command(command)
    assert validate.split_interpreter(words) == (interpreter, rest)
    assert validate.default_name(command) in ("t", "train", "python-c")


def test_a_script_that_does_not_exist_is_refused_before_anything_runs(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for command in ("missing.py --lr 1", "python3 sub/missing.py"):
        with pytest.raises(ValueError, match=r"srun_commands=.*no script '.*missing\.py'"):
            validate.check_command(command)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "missing.py").write_text("")
    assert validate.check_command("python3 sub/missing.py")[1] == "sub/missing.py"


def test_slurm_addon_lines_become_sbatch_options() -> None:
    options = validate.parse_slurm_addon(["#SBATCH --mem=32G", "--reservation course", "#SBATCH --requeue", ""])
    assert options == {"mem": "32G", "reservation": "course", "requeue": True}


@pytest.mark.parametrize("bad, reason", [
    ("#SBATCH --output=/tmp/x", "not allowed"), ("echo hi", "one sbatch option per line"),
    ("#SBATCH --comment=$(id)", "not allowed in a value"), ("#SBATCH --array=0-9", "not allowed"),
    ("#SBATCH --uid=0", "--uid is not allowed"), ("#SBATCH --gid=0", "--gid is not allowed"),
    ("#SBATCH --chdir=/", "--chdir is not allowed"), ("#SBATCH --dependency=afterok:1", "not allowed"),
    ("#SBATCH --export=NONE", "not allowed"), ("#SBATCH --wrap=x", "not allowed"),
    ("#SBATCH --time=999", "time_max=... instead"), ("#SBATCH --job-name=x", "name=... instead"),
    ("#SBATCH --partition=big", "partition=... instead"), ("#SBATCH --account=vip", "account=... instead"),
    ("#SBATCH --qos=vip", "qos=... instead"), ("#SBATCH --gres=gpu:8", "n_gpu=... instead"),
    ("#SBATCH -t 999", "one sbatch option per line"),
])
def test_slurm_addon_refuses_what_it_cannot_keep_safe(bad: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"slurm_addon line.*{re.escape(reason)}"):
        validate.parse_slurm_addon(bad)


@pytest.mark.parametrize("bad", ["#SBATCH --time=999", "export A=1\n#SBATCH --job-name=x", "  #sbatch --uid=0"])
def test_script_addon_may_not_hold_sbatch_lines(bad: str) -> None:
    with pytest.raises(ValueError, match="script_addon line .*sbatch options do not belong"):
        validate.check_script_addon(bad)
    assert validate.check_script_addon(["export NCCL_DEBUG=INFO", "# a comment"]) == [
        "export NCCL_DEBUG=INFO", "# a comment"]


def test_values_and_choices() -> None:
    assert validate.check_value("abc@v100", "account") == "abc@v100"
    with pytest.raises(ValueError, match="qos='a b'"):
        validate.check_value("a b", "qos")
    with pytest.raises(ValueError, match=r"qos='qos_x': allowed here: \['qos_gpu-t3'\]"):
        validate.check_value("qos_x", "qos", allowed=["qos_gpu-t3"])
    assert validate.check_value("v100-32g&ib", "constraint", validate.CONSTRAINT_PATTERN) == "v100-32g&ib"
    with pytest.raises(ValueError, match="launcher='mpirun'.*srun"):
        validate.check_choice("mpirun", "launcher", validate.LAUNCHERS)


def test_modules_email_env() -> None:
    assert validate.check_modules("pytorch-gpu/py3/2.5.0 cuda/12.1") == ["pytorch-gpu/py3/2.5.0", "cuda/12.1"]
    with pytest.raises(ValueError, match="module="):
        validate.check_modules("torch; rm -rf /")
    assert validate.check_email("ada@example.org") == "ada@example.org"
    with pytest.raises(ValueError, match="email="):
        validate.check_email("ada at example")
    assert validate.check_env({"OMP_NUM_THREADS": 4}) == {"OMP_NUM_THREADS": "4"}
    with pytest.raises(ValueError, match="env key '1X'"):
        validate.check_env({"1X": "a"})
