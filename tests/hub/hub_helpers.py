"""Helpers of the hub tests and of bench/room_slurm.py: the hub's REST API (as the service coursekit-room),
Slurm's view of a user's jobs, and commands run as a participant (``runuser``)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HUB_SCRIPT = REPO / "slurm" / "hub.sh"
HUB_URL = "http://127.0.0.1:8000"
PASSWORDS_FILE = Path("/var/lib/coursekit-hub/passwords.json")  # slurm/hub.sh install
PARTICIPANT_PYTHON = Path("/opt/coursekit-hub/python/bin/python")
COURSE_TEMPLATE = Path("/opt/coursekit-hub/course")
COURSE_SUBDIR = "course"
NODES = ("node1", "node2")
RUNUSER = "/usr/sbin/runuser"
USER_PATH = "/usr/local/bin:/usr/bin:/bin"  # a login's PATH: the users' Python is called by its absolute path
COMMAND_TIMEOUT_S = 60
POLL_S = 0.5
API_TIMEOUT_S = 30


def passwords() -> dict[str, str]:
    """The hub's shared passwords and the service token (root only)."""
    return json.loads(PASSWORDS_FILE.read_text())


def api(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One call of the hub's REST API as the service coursekit-room: (HTTP status, decoded JSON or None)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{HUB_URL}/hub/api{path}", data=data, method=method,
                                     headers={"Authorization": f"token {passwords()['service']}"})
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as answer:
            text = answer.read()
            return answer.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, json.loads(text) if text else None


def server_of(user: str) -> dict[str, Any] | None:
    """The user's default server as the hub sees it (``ready``, ``pending``, ``url``), None when stopped."""
    status, model = api("GET", f"/users/{user}")
    assert status == 200, f"GET /users/{user}: {status} {model}"
    return model.get("servers", {}).get("")


def stop_server(user: str, timeout_s: float = 120) -> None:
    """Stop the user's server (the hub scancels its job) and wait until the hub and Slurm agree it is gone."""
    status, body = api("DELETE", f"/users/{user}/server")
    assert status in (202, 204, 400), f"DELETE /users/{user}/server: {status} {body}"  # 400: not running
    deadline = time.monotonic() + timeout_s
    while server_of(user) is not None or server_jobs(user):
        assert time.monotonic() < deadline, f"{user}'s server still there after {timeout_s} s: {server_of(user)}"
        time.sleep(POLL_S)


def run(command: list[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True) -> subprocess.CompletedProcess:
    """A command (never through a shell); AssertionError with its output when ``check`` and it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    assert not check or done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def as_user(user: str, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``command`` run as ``user`` (``runuser -u user --``; no sudo on the image), in the user's home, with a
    login's environment only: nothing of the test process (its ``COURSEKIT_*`` course folder, say) leaks in."""
    home = home_of(user)
    login = [f"HOME={home}", f"USER={user}", f"LOGNAME={user}", f"PATH={USER_PATH}", "LANG=C.UTF-8"]
    return run([RUNUSER, "-u", user, "--", "env", "-i", f"--chdir={home}", *login, *command], **kwargs)


def home_of(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def course_of(user: str) -> Path:
    """The participant's course folder (``~/course``, slurm/hub/jupyterhub_config.py)."""
    return home_of(user) / COURSE_SUBDIR


def write_as(user: str, path: Path, content: bytes) -> None:
    """Write ``path`` as ``user`` (owned by them, their umask): the bytes go through stdin."""
    done = subprocess.run([RUNUSER, "-u", user, "--", "tee", str(path)], input=content, capture_output=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, f"{user} could not write {path}: {done.stderr.decode()}"


def server_jobs(user: str) -> list[dict[str, str]]:
    """The user's active JupyterLab server jobs in Slurm: job id, user, node, state."""
    done = run(["squeue", "-h", "-u", user, "-n", f"jupyterhub-{user}", "-o", "%i|%u|%N|%T"])
    rows = [line.split("|") for line in done.stdout.split()]
    return [{"job_id": r[0], "user": r[1], "node": r[2], "state": r[3]} for r in rows]


def user_job_ids(user: str, name_prefix: str) -> list[str]:
    """Ids of the user's jobs in squeue (any state still listed) whose name starts with ``name_prefix``."""
    done = run(["squeue", "-h", "-t", "all", "-u", user, "-o", "%i|%j"])
    rows = [line.split("|", 1) for line in done.stdout.split()]
    return [job_id for job_id, name in rows if name.startswith(name_prefix)]


def scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o ID`` as a dict of its ``Key=Value`` words ({} once Slurm forgot the job)."""
    done = run(["scontrol", "show", "job", "-o", job_id], check=False)
    if done.returncode != 0:
        return {}
    return dict(word.split("=", 1) for word in done.stdout.split() if "=" in word)


def submitter_host(job: dict[str, str]) -> str:
    """The host name seen by the session that submitted the job (``AllocNode:Sid``'s session id, looked up
    while it lives: the kernel). Slurm's own AllocNode is the host munged encodes in the credential, and on
    this machine one munged serves every node namespace (slurm/README.md): it reads ``localhost`` for all."""
    sid = job.get("AllocNode:Sid", "").rpartition(":")[2]
    if not sid.isdigit():
        return ""
    done = run(["nsenter", f"--target={sid}", "--uts", "hostname"], check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def in_server(user: str, command: list[str], timeout_s: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """``command`` as a process of the user's running JupyterLab server would run it: as the user, in its
    node's namespaces (host name, network), with the server's environment (read from /proc) and folder."""
    found = run(["pgrep", "-n", "-u", user, "-f", "jupyterhub-singleuser"], check=False).stdout.split()  # the server
    assert found, f"no jupyterhub-singleuser process of {user}"
    pid = found[0]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    env = [item.decode() for item in environ if b"=" in item]
    cwd = Path(f"/proc/{pid}/cwd").resolve()
    return run(["nsenter", f"--target={pid}", "--net", "--uts", RUNUSER, "-u", user, "--", "env", "-i",
                f"--chdir={cwd}", *env, *command], timeout_s=timeout_s, check=check)


# --- the real users' homes: what the tests leave there is taken away again --------------------------------

HOME_USERS = ("ada", "bob", "instructor")  # slurm/hub.sh install's users, whose homes the tests run in
JOBS_GONE_TIMEOUT_S = 60


def home_manifest(home: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under ``home`` (relative) -> (type and mode, owner, group, size and mtime of a file, link
    target); the folders' own mtimes are left out (restoring a folder's contents touches it)."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in sorted([home, *home.rglob("*")]):
        info = path.lstat()
        relative = str(path.relative_to(home))
        if path.is_symlink():
            found[relative] = ("link", info.st_uid, os.readlink(path))
        elif path.is_dir():
            found[relative] = (info.st_mode, info.st_uid, info.st_gid)
        else:
            found[relative] = (info.st_mode, info.st_uid, info.st_gid, info.st_size, int(info.st_mtime))
    return found


def _last_job_id() -> int | None:
    """The highest job id Slurm has given so far (the next job's, less one); None when Slurm does not say."""
    said = run(["scontrol", "show", "config"], check=False).stdout
    line = next((x for x in said.splitlines() if x.split("=")[0].strip() == "NEXT_JOB_ID"), "")
    return int(line.split("=")[1]) - 1 if line.partition("=")[2].strip().isdigit() else None


def _jobs_since(users: tuple[str, ...], after: int) -> list[str]:
    """The active jobs of ``users`` with an id above ``after`` (submitted since)."""
    done = run(["squeue", "-h", "-u", ",".join(users), "-o", "%A"], check=False)
    return [j for j in done.stdout.split() if j.isdigit() and int(j) > after]


@contextlib.contextmanager
def homes_kept(users: tuple[str, ...] = HOME_USERS) -> Iterator[None]:
    """Run the block, then put the users' homes back as they were before it (a copy taken first; paths made
    since removed, changed ones restored) and check they are: a hub CI ran on is fresh for its first
    participant. Jobs of theirs submitted in the block and still active are cancelled first (a job still
    running would write into the home again)."""
    homes = {user: home_of(user) for user in users if _exists(user)}
    saved = Path(tempfile.mkdtemp(prefix="coursekit-homes-", dir="/var/tmp"))
    first_job = _last_job_id()
    try:
        for user, home in homes.items():
            run(["cp", "-a", str(home), str(saved / user)])
        yield
        left = _jobs_since(tuple(homes), first_job) if first_job is not None else []
        if left:
            run(["scancel", *left], check=False)
            deadline = time.monotonic() + JOBS_GONE_TIMEOUT_S
            while _jobs_since(tuple(homes), first_job or 0) and time.monotonic() < deadline:
                time.sleep(POLL_S)
        for user, home in homes.items():
            run(["rsync", "-a", "--delete", f"{saved / user}/", f"{home}/"])
        changed = {user: sorted(set(home_manifest(home).items()) ^ set(home_manifest(saved / user).items()))
                   for user, home in homes.items()}
        changed = {user: paths for user, paths in changed.items() if paths}
        assert not changed, f"the tests left traces in the users' homes after the restore: {changed}"
    finally:
        shutil.rmtree(saved, ignore_errors=True)


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True
