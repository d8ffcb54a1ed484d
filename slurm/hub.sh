#!/usr/bin/env bash
# JupyterHub on the local two-node Slurm (slurm/cluster.sh): each participant's JupyterLab is a Slurm job
# on node1 or node2, submitted as that participant's Unix user (batchspawner's SlurmSpawner through runuser).
#
#   bash slurm/hub.sh install   hub packages (pip: jupyterhub, batchspawner; npm: configurable-http-proxy),
#                               the participants' Python (/opt/coursekit-hub/python), the users ada, bob and
#                               instructor, and the course template every participant's ~/course starts from
#   bash slurm/hub.sh start     the course's Slurm account (instructor its coordinator: cancels the room's jobs),
#                               then start the hub (its own process session) and wait until its API answers
#   bash slurm/hub.sh stop      stop the hub (it cancels every server job), then its whole process group
#   bash slurm/hub.sh status    exit 0 only when the hub answers
#   bash slurm/hub.sh add-user NAME...   more participants (Unix users with the same home layout); the hub's
#                               REST API (service coursekit-room) can then start their servers; they join the
#                               course's Slurm account when the cluster's accounting answers
#
# Runs as root on Debian 12 (no sudo, no systemd). Every command is idempotent. The top README's "Running a
# workshop on a JupyterHub" and slurm/README.md have the layout and the reasons.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
CONFIG="$SCRIPT_DIR/hub/jupyterhub_config.py"

JUPYTERHUB_VERSION="6.1.1"
BATCHSPAWNER_VERSION="1.3.0"
PROXY_VERSION="5.2.0"            # configurable-http-proxy (npm)

HUB_ROOT="${COURSEKIT_HUB_ROOT:-/opt/coursekit-hub}"
PARTICIPANT_PYTHON_DIR="$HUB_ROOT/python"   # a hard-linked copy of this Python (/root is mode 700)
PROXY_DIR="$HUB_ROOT/proxy"
COURSE_TEMPLATE="$HUB_ROOT/course"          # `coursekit instructor setup` output: copied to ~/course at spawn
COURSE_SUBDIR="course"                      # each participant's copy in their home (slurm/hub/jupyterhub_config.py)
STATE_DIR="/var/lib/coursekit-hub"          # the hub's database, cookie secret, proxy token
LOG_DIR="/var/log/coursekit-hub"
PID_FILE="/run/coursekit-hub.pid"
HUB_LOG="$LOG_DIR/hub.log"
HUB_URL="http://127.0.0.1:${COURSEKIT_HUB_PORT:-8000}"
JOB_PREFIX="ws"
USERS=(ada bob)                 # participants; more with `add-user` (bench/room_slurm.py)
INSTRUCTOR="instructor"
ACCOUNT="workshop"              # the course's Slurm account (slurm/cluster.sh account): the instructor coordinates it

START_TIMEOUT_S=60
STOP_TIMEOUT_S=60               # the hub cancels every server job (scancel) before it exits
POLL_INTERVAL_S=0.5

say() { echo "[slurm/hub.sh] $*"; }

die() {
    echo "slurm/hub.sh: error: $*" >&2
    exit 1
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "run as root (it creates users, writes $HUB_ROOT and runs jobs as the users)"
}

python_bin() {
    command -v python >/dev/null || die "no 'python' on PATH"
    python -c 'import sys; print(sys.executable)'
}

# ---------------------------------------------------------------------------------------------- install

install_hub_packages() {
    if python - "$JUPYTERHUB_VERSION" "$BATCHSPAWNER_VERSION" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(0 if (version("jupyterhub"), version("batchspawner")) == tuple(sys.argv[1:3]) else 1)
PY
        say "jupyterhub $JUPYTERHUB_VERSION and batchspawner $BATCHSPAWNER_VERSION already installed"
    else
        say "pip: jupyterhub==$JUPYTERHUB_VERSION batchspawner==$BATCHSPAWNER_VERSION"
        python -m pip install --quiet "jupyterhub==$JUPYTERHUB_VERSION" "batchspawner==$BATCHSPAWNER_VERSION"
    fi
    local proxy="$PROXY_DIR/node_modules/.bin/configurable-http-proxy"
    if [[ -x $proxy ]] && [[ $("$proxy" --version 2>/dev/null) == "$PROXY_VERSION" ]]; then
        say "configurable-http-proxy $PROXY_VERSION already installed"
    else
        command -v npm >/dev/null || die "no npm on PATH (Node.js >= 18 is needed for configurable-http-proxy)"
        say "npm: configurable-http-proxy@$PROXY_VERSION into $PROXY_DIR"
        mkdir -p "$PROXY_DIR"
        npm install --prefix "$PROXY_DIR" --no-audit --no-fund --silent "configurable-http-proxy@$PROXY_VERSION"
    fi
}

# The participants' Python: this Python's whole prefix (torch, jupyterlab, jupyterhub, batchspawner), hard-
# linked (seconds, no disk: the same files) where /opt is on the same file system, copied otherwise; its
# libpython search path pointed at its own lib/ (pyenv writes the absolute /root/... one); coursekit
# installed into it from this checkout, not as an editable link into a folder the users may not read.
install_participant_python() {
    local prefix
    prefix=$(python -c 'import sys; print(sys.prefix)')
    [[ $prefix != "$PARTICIPANT_PYTHON_DIR" ]] || die "run install with the root Python, not $PARTICIPANT_PYTHON_DIR"
    rm -rf "$PARTICIPANT_PYTHON_DIR.new"
    mkdir -p "$HUB_ROOT"
    if runuser -u nobody -- "$prefix/bin/python" -c 'import coursekit.course, batchspawner' 2>/dev/null; then
        rm -rf "$PARTICIPANT_PYTHON_DIR"        # every user can run this Python already: use it as it is
        ln -s "$prefix" "$PARTICIPANT_PYTHON_DIR"
        say "participants' Python: $PARTICIPANT_PYTHON_DIR -> $prefix (readable by every user)"
        return 0
    fi
    if ! cp -al "$prefix" "$PARTICIPANT_PYTHON_DIR.new" 2>/dev/null; then
        rm -rf "$PARTICIPANT_PYTHON_DIR.new"
        say "$HUB_ROOT is on another file system than $prefix: copying it (slower)"
        cp -a "$prefix" "$PARTICIPANT_PYTHON_DIR.new"
    fi
    # libpython's search path, and every console script's first line (#!<root's Python>: "bad interpreter:
    # Permission denied" for the users) pointed at the copy
    python "$SCRIPT_DIR/hub/relocate_python.py" "$prefix" "$PARTICIPANT_PYTHON_DIR.new" "$PARTICIPANT_PYTHON_DIR"
    rm -rf "$PARTICIPANT_PYTHON_DIR"
    mv "$PARTICIPANT_PYTHON_DIR.new" "$PARTICIPANT_PYTHON_DIR"
    # coursekit: this checkout's editable install when every user can read the checkout (participants then
    # run the code of this folder), else installed into the copy
    if ! runuser -u nobody -- test -r "$REPO/coursekit/__init__.py"; then
        say "$REPO is not readable by other users: installing coursekit into $PARTICIPANT_PYTHON_DIR"
        "$PARTICIPANT_PYTHON_DIR/bin/python" -m pip install --quiet --no-deps --no-build-isolation --force-reinstall \
            --no-warn-script-location "$REPO" >"$LOG_DIR/pip-coursekit.log" 2>&1 \
            || { cat "$LOG_DIR/pip-coursekit.log" >&2; die "could not install coursekit into $PARTICIPANT_PYTHON_DIR"; }
    else
        # the users run this checkout but cannot write its __pycache__: without it every process they start
        # (kernels, jobs, ranks) compiles each module it imports again (~0.2 CPU-s for the training stack)
        "$PARTICIPANT_PYTHON_DIR/bin/python" -m compileall -q "$REPO/coursekit" >/dev/null \
            || die "could not compile $REPO/coursekit for the users (python -m compileall)"
    fi
    runuser -u nobody -- "$PARTICIPANT_PYTHON_DIR/bin/python" -c 'import coursekit.course, batchspawner' \
        || die "user nobody cannot run $PARTICIPANT_PYTHON_DIR/bin/python with coursekit and batchspawner"
    runuser -u nobody -- "$PARTICIPANT_PYTHON_DIR/bin/coursekit" --help >/dev/null \
        || die "user nobody cannot run $PARTICIPANT_PYTHON_DIR/bin/coursekit (its first line: $(head -n 1 \
            "$PARTICIPANT_PYTHON_DIR/bin/coursekit"))"
    say "participants' Python: $PARTICIPANT_PYTHON_DIR ($("$PARTICIPANT_PYTHON_DIR/bin/python" --version))"
}

# ada and bob (participants) and instructor: real Unix users. A participant's home is theirs and readable by
# the instructor's group only (mode 2750, group instructor: new files keep the group), never by another
# participant.
# ensure_user NAME: a real Unix user with a home; a participant's home is theirs and readable by the
# instructor's group only (mode 2750, group instructor: new files keep the group), never by another participant
ensure_user() {
    local user=$1 home
    [[ $user =~ ^[a-z][a-z0-9]{0,15}$ ]] || die "user name: '$user' is not 1-16 lower-case letters and digits"
    if ! id "$user" >/dev/null 2>&1; then
        useradd --create-home --shell /bin/bash --user-group "$user"
        say "user $user created"
    fi
    home=$(getent passwd "$user" | cut -d: -f6)
    if [[ $user == "$INSTRUCTOR" ]]; then
        chmod 0750 "$home"
    else
        chgrp "$INSTRUCTOR" "$home"
        chmod 2750 "$home"
    fi
}

# course_account USER...: the users in the course's Slurm account (their jobs carry it), the instructor its
# coordinator, as a site's admins set it up (slurm/cluster.sh account); a warning when accounting does not answer
course_account() {
    if ! bash "$SCRIPT_DIR/cluster.sh" account "$ACCOUNT" "$INSTRUCTOR" "$@"; then
        say "warning: the Slurm account $ACCOUNT was not set up (is the cluster up? bash slurm/cluster.sh start):" \
            "$INSTRUCTOR cannot cancel the participants' jobs (coursekit instructor cancel --course) until it is"
    fi
}

install_users() {
    local user
    ensure_user "$INSTRUCTOR"
    for user in "${USERS[@]}"; do ensure_user "$user"; done
}

# the folder holding the participants' homes (useradd's HOME base: /home), for the course's `participants` glob
participant_homes() { dirname "$(getent passwd "${USERS[0]}" | cut -d: -f6)"; }

# The course every participant's ~/course starts from (copied at their first spawn, as them): its
# coursekit.toml (site slurm, job prefix, shared data folder and leaderboard) and the shipped notebooks.
install_course_template() {
    rm -rf "$COURSE_TEMPLATE"
    PYTHONPATH="$REPO" python -m coursekit instructor setup "$COURSE_TEMPLATE" --site slurm \
        --job-prefix "$JOB_PREFIX" --data-dir "$HUB_ROOT/data" --leaderboard "$HUB_ROOT/race/leaderboard.jsonl" \
        --instructor "$INSTRUCTOR" --participants "$(participant_homes)/*/$COURSE_SUBDIR" --no-doctor \
        >"$LOG_DIR/course-setup.log" 2>&1 \
        || { cat "$LOG_DIR/course-setup.log" >&2; die "coursekit instructor setup failed"; }
    mkdir -p "$HUB_ROOT/data" "$HUB_ROOT/race"
    # lab 09's race: each user posts to their own <user>.jsonl here (made by them, mode 0644) and claims a
    # pseudonym with <pseudonym>.claim; sticky: nobody removes or replaces another's file. No shared file:
    # a leaderboard.jsonl of an earlier install (mode 0666, anyone could forge it) is kept read-only
    chmod 1777 "$HUB_ROOT/race"
    # the instructor owns it: in a sticky folder the folder's owner may move anyone's file, so that
    # `coursekit instructor race clear` ends a round without root (the files go to race/archive/<time>/)
    chown "$INSTRUCTOR" "$HUB_ROOT/race"
    if [[ -f $HUB_ROOT/race/leaderboard.jsonl ]]; then chmod go-w "$HUB_ROOT/race/leaderboard.jsonl"; fi
    chmod -R a+rX "$COURSE_TEMPLATE" "$HUB_ROOT/data"
    # the instructor stages the room's data (coursekit instructor data ... --dir $HUB_ROOT/data) without root
    chown "$INSTRUCTOR" "$HUB_ROOT/data"
    say "course template: $COURSE_TEMPLATE (job prefix $JOB_PREFIX)"
}

# the shared passwords (SharedPasswordAuthenticator): one for the participants, one for the instructor; the
# API token of the service coursekit-room (scripts that start servers: bench/room_slurm.py, tests/hub)
install_passwords() {
    [[ -s $STATE_DIR/passwords.json ]] && return 0
    (umask 077 && python -c 'import json, secrets; print(json.dumps({"user": secrets.token_urlsafe(12),
        "admin": secrets.token_urlsafe(32), "service": secrets.token_hex(32)}))' >"$STATE_DIR/passwords.json")
    say "passwords: $STATE_DIR/passwords.json (root only)"
}

cmd_install() {
    need_root
    if hub_pid >/dev/null; then
        die "the hub is running (its servers use $PARTICIPANT_PYTHON_DIR): 'bash slurm/hub.sh stop' first"
    fi
    mkdir -p "$LOG_DIR" "$STATE_DIR"
    chmod 700 "$STATE_DIR"
    install_passwords
    install_hub_packages
    install_participant_python
    install_users
    install_course_template
}

# ---------------------------------------------------------------------------------------------- start/stop

hub_pid() { [[ -s $PID_FILE ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null && cat "$PID_FILE"; }

hub_answers() { curl -fsS --max-time 5 "$HUB_URL/hub/api/" >/dev/null 2>&1; }

cmd_start() {
    need_root
    [[ -x $PARTICIPANT_PYTHON_DIR/bin/python ]] || die "not installed: run 'bash slurm/hub.sh install' first"
    course_account "${USERS[@]}"
    if hub_pid >/dev/null && hub_answers; then
        say "hub already running (pid $(cat "$PID_FILE")) at $HUB_URL"
        return 0
    fi
    mkdir -p "$LOG_DIR" "$STATE_DIR"
    chmod 700 "$STATE_DIR"
    local hub_python
    hub_python=$(python_bin)
    # its own session (setsid): the proxy it starts is in the same process group, which stop ends whole
    (
        cd "$STATE_DIR"
        export COURSEKIT_HUB_ROOT="$HUB_ROOT" COURSEKIT_HUB_STATE="$STATE_DIR"
        exec setsid "$hub_python" -m jupyterhub -f "$CONFIG" >>"$HUB_LOG" 2>&1 </dev/null
    ) &
    echo $! >"$PID_FILE"
    local deadline=$((SECONDS + START_TIMEOUT_S))
    until hub_answers; do
        if ! hub_pid >/dev/null; then
            tail -n 40 "$HUB_LOG" >&2
            die "the hub exited (log: $HUB_LOG)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 40 "$HUB_LOG" >&2
            die "the hub did not answer at $HUB_URL within $START_TIMEOUT_S s (log: $HUB_LOG)"
        fi
        sleep "$POLL_INTERVAL_S"
    done
    say "hub running (pid $(cat "$PID_FILE")) at $HUB_URL; log $HUB_LOG"
}

cmd_stop() {
    need_root
    local pid
    if ! pid=$(hub_pid); then
        say "hub not running"
        rm -f "$PID_FILE"
        return 0
    fi
    # the hub first (SIGTERM: it stops every server, i.e. scancels their jobs), then what is left of its group
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT_S))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep "$POLL_INTERVAL_S"; done
    kill -TERM -- "-$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while pgrep -g "$pid" >/dev/null 2>&1 && ((SECONDS < deadline)); do sleep "$POLL_INTERVAL_S"; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    say "hub stopped (process group $pid)"
}

cmd_status() {
    local pid
    if pid=$(hub_pid) && hub_answers; then
        echo "ok    hub (pid $pid) answers at $HUB_URL"
        return 0
    fi
    echo "FAIL  hub does not answer at $HUB_URL (start it: bash slurm/hub.sh start; log $HUB_LOG)"
    return 1
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    add-user)
        need_root
        shift
        (($# > 0)) || die "usage: bash slurm/hub.sh add-user NAME..."
        for name in "$@"; do ensure_user "$name"; done
        course_account "$@"
        ;;
    *) die "usage: bash slurm/hub.sh install|start|stop|status|add-user NAME..." ;;
esac
