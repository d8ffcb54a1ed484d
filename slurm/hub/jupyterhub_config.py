"""JupyterHub for a workshop on Slurm: each participant's JupyterLab is a Slurm job, submitted as them.

Started by ``bash slurm/hub.sh start`` on the local two-node Slurm (``slurm/cluster.sh``); an instructor
starts from this file for their own site: change what the SITE block says (partition, account, the GPU
and time choices, the hub's address the compute nodes reach), the users and the authenticator.

- the proxy (the participants' URL) listens on loopback; the hub's API on the address the nodes reach
  (the bridge ``ckslurm0`` here), where each server registers its port (batchspawner's API);
- ``CourseSlurmSpawner`` submits a short batch script with ``runuser -u <user> -- /usr/bin/sbatch`` (no
  sudo on the image) and absolute command paths: JupyterHub >= 5.2 passes no PATH to the spawner's
  commands, and the server's environment is this file's ``environment`` only (``env_keep`` empty);
- the spawn form (GPUs, time limit) is checked here, on the hub: a value outside the choices is refused with
  a message on the form and never reaches sbatch; so is one sent through the REST API;
- ``cleanup_servers``: stopping the hub cancels every server job.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path
from typing import Any

from batchspawner import SlurmSpawner
from tornado import web
from traitlets import default

# ---------------------------------------------------------------------------------------------- SITE
HUB_ROOT = Path(os.environ.get("COURSEKIT_HUB_ROOT", "/opt/coursekit-hub"))  # slurm/hub.sh install
STATE_DIR = Path(os.environ.get("COURSEKIT_HUB_STATE", "/var/lib/coursekit-hub"))
PARTICIPANT_PYTHON = HUB_ROOT / "python" / "bin" / "python"  # runnable by every user (not under /root)
PROXY_COMMAND = HUB_ROOT / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_TEMPLATE = HUB_ROOT / "course"  # copied to ~/course at the first spawn, as the participant
COURSE_SUBDIR = "course"  # each participant's course folder, in their home
PUBLIC_PORT = int(os.environ.get("COURSEKIT_HUB_PORT", "8000"))
HUB_API_IP = "10.203.0.1"  # slurm/cluster.sh's bridge: the compute nodes reach the hub here
HUB_API_PORT = 8081
PARTITION = "gpu"
ACCOUNT = ""  # a site that charges a project: its account, e.g. "abc@v100"
SITE = "slurm"  # coursekit's site profile inside the servers (COURSEKIT_SITE)
GPU_CHOICES = (0, 1, 2, 4)
TIME_CHOICES_MIN = (30, 60, 120)
SERVER_CPUS = 1  # the server and its kernels; training runs in the jobs the notebooks submit
PARTICIPANTS = ("ada", "bob")
INSTRUCTOR = "instructor"
PASSWORDS_FILE = STATE_DIR / "passwords.json"  # written by slurm/hub.sh install (mode 600)
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
SLURM_BIN = "/usr/bin"
RUNUSER = "/usr/sbin/runuser"
# ----------------------------------------------------------------------------------------------

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=jupyterhub-{{username}}
#SBATCH --output={{homedir}}/.jupyterhub-slurm-%j.log
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --partition={{partition}}
#SBATCH --time={{runtime}}
#SBATCH --cpus-per-task={{nprocs}}
{% if gres %}#SBATCH --gres={{gres}}
{% endif %}{% if options %}#SBATCH {{options}}
{% endif %}
set -euo pipefail
umask 027
trap 'echo SIGTERM received' TERM
[ -d "$COURSEKIT_COURSE_DIR" ] || cp -r {{course_template}} "$COURSEKIT_COURSE_DIR"
{{srun}} {{cmd}}
echo "jupyterhub-singleuser ended gracefully"
"""

OPTIONS_FORM = """
<label for="gpus">GPUs</label>
<select name="gpus" id="gpus" class="form-control">{gpus}</select>
<label for="time_min">Time limit (minutes)</label>
<select name="time_min" id="time_min" class="form-control">{times}</select>
"""


def _options(values: tuple[int, ...], selected: int) -> str:
    return "".join(f'<option value="{v}"{" selected" if v == selected else ""}>{v}</option>' for v in values)


def validated_options(options: dict[str, Any]) -> dict[str, int]:
    """``{"gpus": int, "time_min": int}`` from the form or the REST API; ValueError naming the field when a
    value is missing, not a whole number, or not one of the choices."""
    chosen = {}
    for name, choices in (("gpus", GPU_CHOICES), ("time_min", TIME_CHOICES_MIN)):
        raw = options.get(name)
        if isinstance(raw, list):  # the form sends lists
            raw = raw[0] if len(raw) == 1 else None
        if raw is None or raw == "":
            raise ValueError(f"{name}: missing; choose one of {', '.join(map(str, choices))}")
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"{name}: {str(raw)[:20]!r} is not a whole number; choose one of "
                             f"{', '.join(map(str, choices))}") from None
        if value not in choices:
            raise ValueError(f"{name}: {value} is not allowed here; choose one of {', '.join(map(str, choices))}")
        chosen[name] = value
    return chosen


def apply_course_options(spawner: Any, user_options: dict[str, Any] | None) -> None:
    """JupyterHub's ``apply_user_options`` hook (form and REST API alike): the checked choices become the
    job's ``--gres`` and ``--time``; a value outside the choices is an HTTP 400 with the reason."""
    try:
        chosen = validated_options(user_options or {"gpus": GPU_CHOICES[0], "time_min": TIME_CHOICES_MIN[0]})
    except ValueError as error:
        raise web.HTTPError(400, f"spawn options refused: {error}") from None
    spawner.user_options = chosen
    spawner.req_gres = f"gpu:{chosen['gpus']}" if chosen["gpus"] else ""
    spawner.req_runtime = str(chosen["time_min"])


def course_dir_of(spawner: Any) -> str:
    """The participant's course folder (``~/course``)."""
    return str(Path(pwd.getpwnam(spawner.user.name).pw_dir) / COURSE_SUBDIR)


class CourseSlurmSpawner(SlurmSpawner):
    """batchspawner's SlurmSpawner with the course's spawn form, checked on the hub."""

    @default("options_form")
    def _options_form_default(self) -> str:
        return OPTIONS_FORM.format(gpus=_options(GPU_CHOICES, 0), times=_options(TIME_CHOICES_MIN, 30))

    def options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, int]:
        return validated_options(formdata)

    def get_req_subvars(self) -> dict[str, Any]:
        subvars = super().get_req_subvars()
        subvars["course_template"] = str(COURSE_TEMPLATE)
        return subvars


c = get_config()  # noqa: F821 - defined by JupyterHub when it loads this file

c.JupyterHub.bind_url = f"http://127.0.0.1:{PUBLIC_PORT}"
c.JupyterHub.hub_ip = HUB_API_IP
c.JupyterHub.hub_port = HUB_API_PORT
c.JupyterHub.hub_connect_ip = HUB_API_IP
c.JupyterHub.db_url = f"sqlite:///{STATE_DIR / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE_DIR / "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True  # a hub stop cancels every server job
c.JupyterHub.cleanup_proxy = True
c.ConfigurableHTTPProxy.command = [str(PROXY_COMMAND)]
c.ConfigurableHTTPProxy.pid_file = str(STATE_DIR / "proxy.pid")

c.JupyterHub.authenticator_class = "shared-password"  # a workshop on this machine; PAM/OAuth on a real site
_passwords = json.loads(PASSWORDS_FILE.read_text()) if PASSWORDS_FILE.exists() else {}
c.SharedPasswordAuthenticator.user_password = _passwords.get("user")
c.SharedPasswordAuthenticator.admin_password = _passwords.get("admin")
c.Authenticator.allowed_users = {*PARTICIPANTS, INSTRUCTOR}
c.Authenticator.admin_users = {INSTRUCTOR}
# a service token for scripts (bench/room_slurm.py, tests/hub): start, stop and list the servers
if _passwords.get("service"):
    c.JupyterHub.services = [{"name": "coursekit-room", "api_token": _passwords["service"]}]
    c.JupyterHub.load_roles = [{"name": "coursekit-room", "services": ["coursekit-room"],
                                "scopes": ["admin:users", "admin:servers", "access:servers"]}]

c.JupyterHub.spawner_class = CourseSlurmSpawner
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = f"~/{COURSE_SUBDIR}"
c.Spawner.apply_user_options = apply_course_options
c.Spawner.start_timeout = 300  # queue wait included
c.Spawner.http_timeout = 120
c.Spawner.env_keep = []  # nothing of root's environment reaches a participant's server
c.Spawner.environment = {
    "PATH": f"{PARTICIPANT_PYTHON.parent}:{SYSTEM_PATH}",
    "LANG": "C.UTF-8",
    "COURSEKIT_SITE": SITE,
    "COURSEKIT_COURSE_DIR": course_dir_of,
}
# no update checks (compute nodes have no internet); window.jupyterapp for the browser tests (tests/hub)
c.Spawner.args = ["--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
                  "--LabApp.expose_app_in_browser=True"]
c.Spawner.cmd = [str(PARTICIPANT_PYTHON.parent / "jupyterhub-singleuser")]
c.BatchSpawnerBase.batchspawner_singleuser_cmd = f"{PARTICIPANT_PYTHON} -m batchspawner.singleuser"
c.BatchSpawnerBase.exec_prefix = f"{RUNUSER} -u {{username}} --"
c.SlurmSpawner.batch_script = BATCH_SCRIPT
c.SlurmSpawner.batch_submit_cmd = f"{SLURM_BIN}/sbatch --parsable"
c.SlurmSpawner.batch_query_cmd = f"{SLURM_BIN}/squeue -h -j {{job_id}} -o '%T %B'"
c.SlurmSpawner.batch_cancel_cmd = f"{SLURM_BIN}/scancel {{job_id}}"
c.SlurmSpawner.req_srun = f"{SLURM_BIN}/srun"
c.SlurmSpawner.req_partition = PARTITION
c.SlurmSpawner.req_nprocs = str(SERVER_CPUS)
c.SlurmSpawner.req_options = f"--account={ACCOUNT}" if ACCOUNT else ""
