"""Parameter checks: each raises ``ValueError`` naming the parameter and what is allowed.

Nothing here talks to Slurm; ``submit.py`` calls these on every entry of a sweep before it submits any.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
NAME_MAX_LENGTH = 64
VALUE_PATTERN = re.compile(r"^[A-Za-z0-9._@+:/=,-]+$")  # partition, qos, account, module names
CONSTRAINT_PATTERN = re.compile(r"^[A-Za-z0-9._@+:\-&|\[\]*()]+$")
EMAIL_PATTERN = re.compile(r"^[^@\s'\"`$;|&<>]+@[^@\s'\"`$;|&<>]+\.[A-Za-z]{2,}$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SBATCH_LINE_PATTERN = re.compile(r"^(?:#SBATCH\s+)?--([a-z][a-z0-9-]*)(?:[=\s]\s*(\S.*?))?\s*$")
LAUNCHERS = ("srun", "torchrun")
GPU_BINDINGS = ("task", "node")
INTERPRETER_PATTERN = re.compile(r"^python(?:[23](?:\.\d+)?)?$")  # python, python3, python3.11 (a path's name)
LAUNCHER_WORDS = ("srun", "torchrun", "mpirun", "mpiexec")  # coursekit itself launches the command
UNBUFFERED_FLAG = "-u"
# sbatch options a slurm_addon line may set; everything else is either set by coursekit (see
# SBATCH_OPTION_PARAMETER) or could change who runs the job, where it writes or when it ends
ALLOWED_SLURM_ADDON = frozenset({
    "mem", "mem-per-cpu", "mem-per-gpu", "reservation", "requeue", "no-requeue", "comment", "exclude",
    "nodelist", "licenses", "switches", "tmp", "gres-flags", "gpu-bind", "cpu-bind", "cpu-freq",
    "distribution", "threads-per-core", "cores-per-socket", "sockets-per-node", "contiguous", "spread-job",
    "mail-type", "nice", "network", "acctg-freq", "profile", "wckey", "hint", "mcs-label", "core-spec",
})
SBATCH_OPTION_PARAMETER = {  # an sbatch option coursekit sets -> the parameter that sets it
    "time": "time_max", "time-min": "time_max", "job-name": "name", "partition": "partition", "qos": "qos",
    "account": "account", "constraint": "constraint", "exclusive": "exclusive", "mail-user": "email",
    "nodes": "n_gpu", "ntasks": "n_gpu", "ntasks-per-node": "n_gpu", "gpus": "n_gpu", "gpus-per-node": "n_gpu",
    "gpus-per-task": "n_gpu_per_task", "gres": "n_gpu", "cpus-per-task": "cpus_per_task",
    "cpus-per-gpu": "cpus_per_task", "signal": "signal_delay_s",
}
SBATCH_DIRECTIVE = "#SBATCH"
SLURM_TIME_PATTERNS = (  # Slurm's --time syntax, as days, hours, minutes, seconds groups
    re.compile(r"^(?P<m>\d+)$"),
    re.compile(r"^(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)$"),
    re.compile(r"^(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)$"),
)
MINUTES_PER_DAY = 24 * 60


def as_list(value: Any, parameter: str) -> list[Any]:
    """A value or a list/tuple of values -> a non-empty list."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items:
        raise ValueError(f"{parameter}: give at least one value (got an empty list)")
    return items


def check_name(name: Any, parameter: str = "name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or len(name) > NAME_MAX_LENGTH:
        raise ValueError(
            f"{parameter}={name!r}: use 1-{NAME_MAX_LENGTH} letters, digits, '.', '_', '+' or '-', starting "
            "with a letter or digit (no spaces, newlines, '/' or shell characters)")
    return name


def safe_name(text: str, fallback: str = "job") -> str:
    """``text`` made into a valid job name (unsafe characters -> ``_``), or ``fallback``."""
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("._+-")[:NAME_MAX_LENGTH]
    return cleaned or fallback


def default_name(command: str) -> str:
    """A job name from a command: ``./train.py --lr 1`` -> ``train``; ``-m coursekit.train`` -> ``train``."""
    words = split_interpreter(shlex.split(command))[1]
    if words[:1] == ["-m"] and len(words) > 1:
        stem = words[1].rsplit(".", 1)[-1]
    elif words[:1] == ["-c"]:
        stem = "python-c"
    else:
        stem = Path(words[0]).stem if words else ""
    return safe_name(stem)


def is_interpreter(word: str) -> bool:
    """``python``, ``python3``, ``python3.11`` or a path to one (``/opt/conda/bin/python3``)."""
    return bool(INTERPRETER_PATTERN.match(Path(word).name))


def split_interpreter(words: Sequence[str]) -> tuple[str | None, list[str]]:
    """``["python3", "-u", "t.py"]`` -> ``("python3", ["t.py"])``; without an interpreter ``(None, words)``.
    coursekit adds ``-u`` itself (unbuffered output), as idr_pytools does."""
    if not words or not is_interpreter(words[0]):
        return None, list(words)
    rest = list(words[1:])
    if rest[:1] == [UNBUFFERED_FLAG]:
        rest = rest[1:]
    return words[0], rest


def check_command(command: Any, parameter: str = "srun_commands") -> list[str]:
    """A command as idr_pytools takes it: ``script.py args``, ``-m module args``, ``-c code``, or any of
    these after an explicit interpreter (``python3 script.py``, ``/path/to/python -m module``).
    coursekit runs it as ``python -u <command>`` (through srun or torchrun); a ``.py`` script must exist."""
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{parameter}: each command is a non-empty string like 'train.py --lr 0.1' (got {command!r})")
    if "\n" in command or "\r" in command or "\0" in command:
        raise ValueError(f"{parameter}={command!r}: one command per string, without newlines")
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise ValueError(f"{parameter}={command!r}: cannot split it like a shell would ({error})") from error
    if not words:
        raise ValueError(f"{parameter}={command!r}: give a script and its arguments, e.g. 'train.py --lr 0.1'")
    if Path(words[0]).name in LAUNCHER_WORDS:
        raise ValueError(
            f"{parameter}={command!r}: leave out {words[0]!r}: coursekit itself starts the command through "
            "srun or torchrun (launcher=...); give e.g. 'train.py --lr 0.1' or 'python3 train.py --lr 0.1'")
    interpreter, rest = split_interpreter(words)
    if not rest:
        raise ValueError(f"{parameter}={command!r}: give a script, -m module or -c code after {interpreter!r}")
    if rest[0] in ("-m", "-c") and len(rest) < 2:
        raise ValueError(f"{parameter}={command!r}: {rest[0]} needs a module or code after it")
    if rest[0].endswith(".py") and not Path(rest[0]).expanduser().is_file():
        raise ValueError(f"{parameter}={command!r}: no script {rest[0]!r} in {Path.cwd()} (the job starts "
                         "in the folder you submit from); give its path, relative to that folder or absolute")
    return words


def check_positive_int(value: Any, parameter: str, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{parameter}={value!r}: use a whole number >= 1")
    return value


def check_gpu_count(n_gpu: Any, gpus_per_node: int, site: str, cpu_only: bool = False,
                    multi_node: bool = True) -> int:
    """GPU count fits one node, or is a whole number of nodes."""
    unit = "CPU processes" if cpu_only else "GPUs"
    if isinstance(n_gpu, bool) or not isinstance(n_gpu, int) or n_gpu <= 0:
        raise ValueError(f"n_gpu={n_gpu!r}: use whole numbers >= 1 ({unit} per job)")
    if n_gpu <= gpus_per_node:
        return n_gpu
    if not multi_node:
        raise ValueError(f"n_gpu={n_gpu}: site {site!r} is one machine with {gpus_per_node} {unit}; "
                         f"use at most {gpus_per_node}")
    if n_gpu % gpus_per_node:
        lower, upper = n_gpu // gpus_per_node * gpus_per_node, (n_gpu // gpus_per_node + 1) * gpus_per_node
        raise ValueError(
            f"n_gpu={n_gpu}: site {site!r} has {gpus_per_node} GPUs per node, so use at most {gpus_per_node} "
            f"(one node) or a multiple of {gpus_per_node} (whole nodes), e.g. {lower} or {upper}")
    return n_gpu


def check_gpus_per_task(n_gpu_per_task: Any, gpus_on_node: int, n_gpu: int) -> int:
    check_positive_int(n_gpu_per_task, "n_gpu_per_task")
    if gpus_on_node % n_gpu_per_task:
        divisors = [d for d in range(1, gpus_on_node + 1) if gpus_on_node % d == 0]
        raise ValueError(
            f"n_gpu_per_task={n_gpu_per_task}: it must divide the {gpus_on_node} GPUs each node of a "
            f"{n_gpu}-GPU job uses; allowed: {divisors}")
    return n_gpu_per_task


def parse_time(time_max: Any, parameter: str = "time_max") -> int:
    """Slurm's --time syntax (or whole minutes) -> minutes, rounded up; at least 1."""
    if isinstance(time_max, int) and not isinstance(time_max, bool) and time_max > 0:
        return time_max
    text = time_max.strip() if isinstance(time_max, str) else ""
    for pattern in SLURM_TIME_PATTERNS:
        match = pattern.match(text)
        if match:
            parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
            if parts.get("s", 0) >= 60 or ("h" in parts and "m" in parts and parts["m"] >= 60):
                break
            seconds = ((parts.get("d", 0) * 24 + parts.get("h", 0)) * 60 + parts.get("m", 0)) * 60 + parts.get("s", 0)
            if seconds <= 0:
                break
            return math.ceil(seconds / 60)
    raise ValueError(
        f"{parameter}={time_max!r}: use Slurm's time syntax: 'MM', 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM' "
        "or 'D-HH:MM:SS' (e.g. '02:00:00'), or whole minutes as an int, more than zero")


def check_value(value: Any, parameter: str, pattern: re.Pattern[str] = VALUE_PATTERN,
                allowed: Sequence[str] = ()) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise ValueError(f"{parameter}={value!r}: use letters, digits and . _ @ + : / = , - only (one word)")
    if allowed and value not in allowed:
        raise ValueError(f"{parameter}={value!r}: allowed here: {list(allowed)}")
    return value


def check_modules(module: Any) -> list[str]:
    """``module``: one name, a space-separated list, or a list -> module names."""
    if module is None:
        return []
    names: list[str] = []
    for item in as_list(module, "module"):
        if not isinstance(item, str):
            raise ValueError(f"module={item!r}: give module names as strings")
        for word in item.split():
            names.append(check_value(word, "module"))  # type: ignore[arg-type]
    return names


def check_email(email: Any) -> str | None:
    if email is None:
        return None
    if not isinstance(email, str) or not EMAIL_PATTERN.match(email):
        raise ValueError(f"email={email!r}: give one address like 'name@example.org'")
    return email


def check_lines(lines: Any, parameter: str) -> list[str]:
    """Lines given as one string (newlines allowed) or a list of strings -> one line per item."""
    if lines is None:
        return []
    result = []
    for item in as_list(lines, parameter):
        if not isinstance(item, str) or "\0" in item:
            raise ValueError(f"{parameter}={item!r}: give shell lines as strings")
        result += item.splitlines()
    return result


def check_script_addon(script_addon: Any) -> list[str]:
    """``script_addon``: shell lines run in the job script before the command (kept verbatim, after the
    first command of the script so that sbatch never reads them as options); ``#SBATCH`` lines are refused."""
    lines = check_lines(script_addon, "script_addon")
    for line in lines:
        if line.lstrip().upper().startswith(SBATCH_DIRECTIVE):
            raise ValueError(f"script_addon line {line!r}: sbatch options do not belong in script_addon; "
                             "use the matching parameter (time_max, name, ...) or slurm_addon")
    return lines


def parse_slurm_addon(slurm_addon: Any) -> dict[str, str | bool]:
    """``#SBATCH --opt=value`` lines (or ``--opt value``) -> sbatch options for submitit's
    ``additional_parameters``; anything else, or an option coursekit sets itself, is refused."""
    options: dict[str, str | bool] = {}
    for line in check_lines(slurm_addon, "slurm_addon"):
        if not line.strip():
            continue
        match = SBATCH_LINE_PATTERN.match(line.strip())
        if not match:
            raise ValueError(f"slurm_addon line {line!r}: write one sbatch option per line, "
                             "like '#SBATCH --mem=32G' or '--reservation=course'")
        option, value = match.group(1), match.group(2)
        if option in SBATCH_OPTION_PARAMETER:
            raise ValueError(f"slurm_addon line {line!r}: --{option} is set by coursekit; use the parameter "
                             f"{SBATCH_OPTION_PARAMETER[option]}=... instead")
        if option not in ALLOWED_SLURM_ADDON:
            raise ValueError(f"slurm_addon line {line!r}: --{option} is not allowed here (it could change who "
                             "runs the job, where it writes or when it ends); allowed options: "
                             f"{sorted(ALLOWED_SLURM_ADDON)}")
        if value is not None and ("'" in value or '"' in value or "`" in value or "$" in value):
            raise ValueError(f"slurm_addon line {line!r}: quotes, '`' and '$' are not allowed in a value")
        options[option.replace("-", "_")] = True if value is None else value
    return options


def check_env(env: Any) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise ValueError(f"env={env!r}: give a dict of environment variables, e.g. {{'OMP_NUM_THREADS': '4'}}")
    result = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_PATTERN.match(key):
            raise ValueError(f"env key {key!r}: use a variable name (letters, digits, '_', not starting with a digit)")
        text = str(value)
        if "\0" in text:
            raise ValueError(f"env[{key!r}]: the value may not hold a NUL character")
        result[key] = text
    return result


def check_choice(value: Any, parameter: str, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{parameter}={value!r}: use one of {list(choices)}")
    return value


def check_singularity(image: Any) -> str | None:
    if image is None:
        return None
    if not isinstance(image, str) or not image.strip() or any(c in image for c in "\n\r\0"):
        raise ValueError(f"singularity={image!r}: give the path of a container image (.sif)")
    return image
