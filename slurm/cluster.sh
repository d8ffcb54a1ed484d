#!/usr/bin/env bash
# A single-node Slurm for workshops and tests: munge, MariaDB + slurmdbd (accounting), slurmctld,
# slurmd, GRES GPUs (real /dev/nvidiaN where nvidia-smi lists GPUs, stand-in devices otherwise).
#
#   bash slurm/cluster.sh install            Debian packages (apt-get), skipped when present
#   bash slurm/cluster.sh start [--gpus N] [--cpus N]
#                                            configure and start everything, wait until usable
#   bash slurm/cluster.sh status             exit 0 only when the node takes jobs and sacct answers
#   bash slurm/cluster.sh stop               stop every daemon started by `start`
#   bash slurm/cluster.sh stop-controller    stop slurmctld only (tests: "controller down")
#   bash slurm/cluster.sh start-controller   start slurmctld again and wait for the node
#   bash slurm/cluster.sh logs [N]           last N lines of every daemon's log
#
# Runs as root on Debian 12 without systemd (containers, CI). Every command is idempotent.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONF_TEMPLATES="$SCRIPT_DIR/conf"

SLURM_ETC="/etc/slurm"
LOG_DIR="/var/log/slurm"
RUN_DIR="/run/slurm"
SPOOL_DIR="/var/spool/slurm"
MUNGE_KEY="/etc/munge/munge.key"
MUNGE_RUN_DIR="/run/munge"
MUNGE_PID_FILE="$MUNGE_RUN_DIR/munged.pid"
MYSQL_RUN_DIR="/run/mysqld"
MYSQL_DATA_DIR="/var/lib/mysql"

CLUSTER_NAME="coursekit"
PARTITION="gpu"
DEFAULT_GPUS=4
CPUS_PER_GPU=4                 # the node declares at least GPUs x this many CPUs
MEMORY_KEPT_PERCENT=90         # RealMemory = this share of what slurmd -C detects
MIN_JOB_AGE_S=30               # finished jobs leave squeue after this (sacct keeps them)
KILL_WAIT_S=5                  # SIGTERM -> SIGKILL delay on cancel and time limit
STANDIN_GPU_PREFIX="/dev/coursekit-gpu"
STANDIN_GPU_FILE_PREFIX="/var/spool/slurm/stand-in-gpus/gpu"   # used only where mknod is refused
STANDIN_DEVICE_MAJOR=1         # mknod c 1 3 = a /dev/null-like character device
STANDIN_DEVICE_MINOR=3
DB_NAME="slurm_acct_db"
DB_USER="slurm"

DAEMON_START_TIMEOUT_S=60
NODE_READY_TIMEOUT_S=60
DAEMON_STOP_TIMEOUT_S=20
POLL_INTERVAL_S=0.5
LOG_EXCERPT_LINES=25

PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
REQUIRED_COMMANDS=(munged munge unmunge mysqld_safe mysqladmin mysql slurmdbd slurmctld slurmd sacctmgr
                   scontrol sinfo sacct sbatch)
HEALTHY_NODE_STATES="idle mixed allocated completing"

# ---------------------------------------------------------------------------------------------- helpers

say() { echo "[slurm/cluster.sh] $*"; }

die() {
    echo "slurm/cluster.sh: error: $*" >&2
    exit 1
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "run as root (it starts system daemons and writes $SLURM_ETC)"
}

need_commands() {
    local missing=() cmd
    for cmd in "${REQUIRED_COMMANDS[@]}"; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    ((${#missing[@]} == 0)) || die "missing commands: ${missing[*]} - run 'bash slurm/cluster.sh install' first"
}

# wait_until TIMEOUT_S COMMAND...: run COMMAND until it succeeds; 1 when the time is up
wait_until() {
    local timeout_s=$1
    shift
    local deadline=$((SECONDS + timeout_s))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep "$POLL_INTERVAL_S"
    done
}

pid_alive() {
    local pid_file=$1
    [[ -s $pid_file ]] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

log_excerpt() {
    local log_file
    for log_file in "$@"; do
        if [[ -f $log_file ]]; then
            echo "--- last $LOG_EXCERPT_LINES lines of $log_file ---" >&2
            tail -n "$LOG_EXCERPT_LINES" "$log_file" >&2
        else
            echo "--- $log_file does not exist ---" >&2
        fi
    done
}

# fail_with_logs MESSAGE LOG...: the message, the end of each log, exit 1
fail_with_logs() {
    local message=$1
    shift
    echo "slurm/cluster.sh: error: $message" >&2
    log_excerpt "$@"
    exit 1
}

# stop_pid_file NAME PID_FILE: SIGTERM the process named in PID_FILE, wait until it is gone
stop_pid_file() {
    local name=$1 pid_file=$2
    if ! pid_alive "$pid_file"; then
        return 0
    fi
    local pid
    pid=$(cat "$pid_file")
    kill "$pid" 2>/dev/null || true
    if ! wait_until "$DAEMON_STOP_TIMEOUT_S" bash -c "! kill -0 $pid" ; then
        say "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$pid_file"
    say "$name stopped"
}

short_hostname() { hostname -s 2>/dev/null || hostname; }

# ---------------------------------------------------------------------------------------------- install

cmd_install() {
    need_root
    local missing=() package
    for package in "${PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
            missing+=("$package")
        fi
    done
    if ((${#missing[@]} == 0)); then
        say "packages already installed: ${PACKAGES[*]}"
        return 0
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
    say "installed ${missing[*]}"
}

# ---------------------------------------------------------------------------------------------- munge

munge_works() { { munge -n </dev/null | unmunge; } >/dev/null 2>&1; }

start_munge() {
    if munge_works; then
        say "munge already running"
        return 0
    fi
    mkdir -p "$MUNGE_RUN_DIR"
    chown munge:munge "$MUNGE_RUN_DIR" 2>/dev/null || true
    chmod 755 "$MUNGE_RUN_DIR"
    if [[ ! -s $MUNGE_KEY ]]; then
        say "creating $MUNGE_KEY"
        mkdir -p "$(dirname "$MUNGE_KEY")"
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
        chown munge:munge "$MUNGE_KEY" 2>/dev/null || true
        chmod 400 "$MUNGE_KEY"
    fi
    munged --force --pid-file="$MUNGE_PID_FILE" 2>>"$LOG_DIR/munged.start.log" \
        || fail_with_logs "munged did not start" "$LOG_DIR/munged.start.log" /var/log/munge/munged.log
    wait_until "$DAEMON_START_TIMEOUT_S" munge_works \
        || fail_with_logs "munge does not answer (munge -n | unmunge)" /var/log/munge/munged.log
    say "munge started"
}

# ---------------------------------------------------------------------------------------------- MariaDB

mysql_alive() { mysqladmin --protocol=socket ping >/dev/null 2>&1; }

start_mariadb() {
    if mysql_alive; then
        say "MariaDB already running"
        return 0
    fi
    mkdir -p "$MYSQL_RUN_DIR"
    chown mysql:mysql "$MYSQL_RUN_DIR"
    if [[ ! -d $MYSQL_DATA_DIR/mysql ]]; then
        say "initialising $MYSQL_DATA_DIR"
        mariadb-install-db --user=mysql --datadir="$MYSQL_DATA_DIR" >"$LOG_DIR/mariadb-install-db.log" 2>&1 \
            || fail_with_logs "mariadb-install-db failed" "$LOG_DIR/mariadb-install-db.log"
    fi
    setsid mysqld_safe --user=mysql >"$LOG_DIR/mysqld_safe.log" 2>&1 </dev/null &
    wait_until "$DAEMON_START_TIMEOUT_S" mysql_alive \
        || fail_with_logs "MariaDB does not answer mysqladmin ping" "$LOG_DIR/mysqld_safe.log" /var/log/mysql/error.log
    say "MariaDB started"
}

# ensure_database PASSWORD: database and user for slurmdbd (idempotent)
ensure_database() {
    local password=$1
    mysql --protocol=socket <<SQL || die "could not create the accounting database $DB_NAME in MariaDB"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$password';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$password';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
FLUSH PRIVILEGES;
SQL
}

# the password already in slurmdbd.conf, else a new random one
database_password() {
    local existing=""
    if [[ -f $SLURM_ETC/slurmdbd.conf ]]; then
        existing=$(sed -n 's/^StoragePass=//p' "$SLURM_ETC/slurmdbd.conf" | head -n 1)
    fi
    if [[ -n $existing ]]; then
        echo "$existing"
    else
        od -An -N16 -tx1 /dev/urandom | tr -d ' \n'
    fi
}

# ---------------------------------------------------------------------------------------------- configs

GPU_COUNT=""
CPU_COUNT=""
CHANGED_CONFIGS=()

# gpu_device_files COUNT: the gres.conf File= expression; makes stand-in devices where no GPU exists
gpu_device_files() {
    local count=$1 real_gpus=0 index
    if command -v nvidia-smi >/dev/null 2>&1; then
        real_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
    if ((real_gpus > 0)); then
        ((count <= real_gpus)) || die "--gpus $count: this machine has $real_gpus GPUs (nvidia-smi -L)"
        echo "/dev/nvidia[0-$((count - 1))]"
        return 0
    fi
    local prefix=$STANDIN_GPU_PREFIX
    for ((index = 0; index < count; index++)); do
        [[ -c $prefix$index ]] && continue
        rm -f "$prefix$index"
        if ! mknod "$prefix$index" c "$STANDIN_DEVICE_MAJOR" "$STANDIN_DEVICE_MINOR" 2>/dev/null; then
            # no CAP_MKNOD or a read-only /dev: plain files still let Slurm schedule gpu:N
            prefix=$STANDIN_GPU_FILE_PREFIX
            mkdir -p "$(dirname "$prefix")"
            echo "[slurm/cluster.sh] WARNING: mknod is not permitted here: stand-in GPUs are plain files" \
                 "($prefix*); Slurm will schedule --gres=gpu:N but set no CUDA_VISIBLE_DEVICES" >&2
            for ((index = 0; index < count; index++)); do touch "$prefix$index"; done
            break
        fi
        chmod 666 "$prefix$index"
    done
    echo "$prefix[0-$((count - 1))]"
}

detected_gpu_count() {
    local real_gpus=0
    if command -v nvidia-smi >/dev/null 2>&1; then
        real_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
    if ((real_gpus > 0)); then echo "$real_gpus"; else echo "$DEFAULT_GPUS"; fi
}

# render TEMPLATE KEY=VALUE...: the template with every @KEY@ replaced
render() {
    local template=$1
    shift
    local script=() pair key value
    for pair in "$@"; do
        key=${pair%%=*}
        value=${pair#*=}
        script+=(-e "s|@$key@|$value|g")
    done
    sed "${script[@]}" "$template"
}

# install_config NAME MODE CONTENT: write $SLURM_ETC/NAME when it differs; remember the change
install_config() {
    local name=$1 mode=$2 content=$3 target="$SLURM_ETC/$1"
    if [[ -f $target ]] && [[ "$(cat "$target")" == "$content" ]]; then
        chmod "$mode" "$target"
        return 0
    fi
    printf '%s\n' "$content" >"$target.new"
    chmod "$mode" "$target.new"
    mv "$target.new" "$target"
    CHANGED_CONFIGS+=("$name")
    say "wrote $target"
}

write_configs() {
    local host node_line real_cpus real_memory gpus cpus memory_mb gpu_files password
    host=$(short_hostname)
    node_line=$(slurmd -C | head -n 1)
    real_cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
    real_memory=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
    [[ -n $real_cpus && -n $real_memory ]] || die "could not read CPUs/RealMemory from 'slurmd -C': $node_line"
    gpus=${GPU_COUNT:-$(detected_gpu_count)}
    ((gpus >= 1)) || die "--gpus must be at least 1 (got $gpus)"
    cpus=${CPU_COUNT:-$((gpus * CPUS_PER_GPU > real_cpus ? gpus * CPUS_PER_GPU : real_cpus))}
    memory_mb=$((real_memory * MEMORY_KEPT_PERCENT / 100))
    gpu_files=$(gpu_device_files "$gpus")
    password=$(database_password)
    local values=(CLUSTER="$CLUSTER_NAME" HOST="$host" PARTITION="$PARTITION" CPUS="$cpus"
                  MEMORY_MB="$memory_mb" GPUS="$gpus" GPU_FILES="$gpu_files" LOG_DIR="$LOG_DIR"
                  RUN_DIR="$RUN_DIR" SPOOL_DIR="$SPOOL_DIR" MIN_JOB_AGE="$MIN_JOB_AGE_S"
                  KILL_WAIT="$KILL_WAIT_S" DB_USER="$DB_USER" DB_PASS="$password" DB_NAME="$DB_NAME")
    install_config slurm.conf 644 "$(render "$CONF_TEMPLATES/slurm.conf.in" "${values[@]}")"
    install_config gres.conf 644 "$(render "$CONF_TEMPLATES/gres.conf.in" "${values[@]}")"
    install_config slurmdbd.conf 600 "$(render "$CONF_TEMPLATES/slurmdbd.conf.in" "${values[@]}")"
    ensure_database "$password"
    say "node $host: $cpus CPUs, ${memory_mb} MB, gpu:$gpus ($gpu_files), partition $PARTITION"
}

config_changed() {
    local name
    for name in "${CHANGED_CONFIGS[@]+"${CHANGED_CONFIGS[@]}"}"; do
        [[ $name == "$1" ]] && return 0
    done
    return 1
}

prepare_dirs() {
    mkdir -p "$SLURM_ETC" "$LOG_DIR" "$RUN_DIR" "$SPOOL_DIR/slurmctld" "$SPOOL_DIR/slurmd"
}

# ---------------------------------------------------------------------------------------------- slurm

dbd_answers() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }
controller_up() { scontrol ping 2>/dev/null | grep -q "is UP"; }
accounting_answers() { sacct -n -X -a -S now >/dev/null 2>&1; }

start_slurmdbd() {
    if pid_alive "$RUN_DIR/slurmdbd.pid" && config_changed slurmdbd.conf; then
        stop_pid_file slurmdbd "$RUN_DIR/slurmdbd.pid"
    fi
    if pid_alive "$RUN_DIR/slurmdbd.pid"; then
        say "slurmdbd already running"
    else
        slurmdbd || fail_with_logs "slurmdbd did not start" "$LOG_DIR/slurmdbd.log"
        say "slurmdbd started"
    fi
    wait_until "$DAEMON_START_TIMEOUT_S" dbd_answers \
        || fail_with_logs "slurmdbd does not answer sacctmgr" "$LOG_DIR/slurmdbd.log"
    if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null || die "sacctmgr could not add cluster $CLUSTER_NAME"
        say "cluster $CLUSTER_NAME registered in accounting"
    fi
}

start_slurmctld() {
    if pid_alive "$RUN_DIR/slurmctld.pid"; then
        say "slurmctld already running"
    else
        slurmctld || fail_with_logs "slurmctld did not start" "$LOG_DIR/slurmctld.log"
        say "slurmctld started"
    fi
    wait_until "$DAEMON_START_TIMEOUT_S" controller_up \
        || fail_with_logs "slurmctld does not answer 'scontrol ping'" "$LOG_DIR/slurmctld.log"
}

start_slurmd() {
    if pid_alive "$RUN_DIR/slurmd.pid"; then
        say "slurmd already running"
    else
        slurmd || fail_with_logs "slurmd did not start" "$LOG_DIR/slurmd.log"
        say "slurmd started"
    fi
}

node_state() { sinfo -h -N -n "$(short_hostname)" -o %T 2>/dev/null | head -n 1; }

node_healthy() {
    local state
    state=$(node_state)
    [[ -n $state ]] && [[ " $HEALTHY_NODE_STATES " == *" $state "* ]]
}

wait_node_ready() {
    local host deadline resumed=0 state
    host=$(short_hostname)
    deadline=$((SECONDS + NODE_READY_TIMEOUT_S))
    until node_healthy; do
        state=$(node_state)
        # a node left down or drained by an earlier run (not one that is merely not responding yet)
        if ((resumed == 0)) && [[ $state == down || $state == drained || $state == draining ]]; then
            scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
            resumed=1
        fi
        if ((SECONDS >= deadline)); then
            echo "sinfo -R:" >&2
            sinfo -R >&2 || true
            fail_with_logs "node $host is '${state:-unknown}' after ${NODE_READY_TIMEOUT_S}s, not idle" \
                "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log"
        fi
        sleep "$POLL_INTERVAL_S"
    done
    say "node $host is $(node_state)"
}

stop_slurm_daemons() {
    if controller_up; then
        scontrol shutdown >/dev/null 2>&1 || true
        wait_until "$DAEMON_STOP_TIMEOUT_S" bash -c "! { [[ -s $RUN_DIR/slurmctld.pid ]] && kill -0 \$(cat $RUN_DIR/slurmctld.pid); }" || true
        say "slurmctld and slurmd shut down (scontrol shutdown)"
    fi
    stop_pid_file slurmctld "$RUN_DIR/slurmctld.pid"
    stop_pid_file slurmd "$RUN_DIR/slurmd.pid"
}

# ---------------------------------------------------------------------------------------------- commands

cmd_start() {
    while (($# > 0)); do
        case $1 in
            --gpus) GPU_COUNT=${2:?--gpus needs a number}; shift 2 ;;
            --cpus) CPU_COUNT=${2:?--cpus needs a number}; shift 2 ;;
            *) die "start: unknown option '$1' (allowed: --gpus N, --cpus N)" ;;
        esac
    done
    [[ -z $GPU_COUNT || $GPU_COUNT =~ ^[1-9][0-9]*$ ]] || die "--gpus must be a positive integer (got '$GPU_COUNT')"
    [[ -z $CPU_COUNT || $CPU_COUNT =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a positive integer (got '$CPU_COUNT')"
    need_root
    need_commands
    prepare_dirs
    start_munge
    start_mariadb
    write_configs
    start_slurmdbd
    if config_changed slurm.conf || config_changed gres.conf; then
        if pid_alive "$RUN_DIR/slurmctld.pid" || pid_alive "$RUN_DIR/slurmd.pid"; then
            say "configuration changed: restarting slurmctld and slurmd"
            stop_slurm_daemons
        fi
    fi
    start_slurmctld
    start_slurmd
    wait_node_ready
    wait_until "$DAEMON_START_TIMEOUT_S" accounting_answers \
        || fail_with_logs "sacct does not answer: accounting is not working" "$LOG_DIR/slurmdbd.log" "$LOG_DIR/slurmctld.log"
    say "cluster $CLUSTER_NAME is up: partition $PARTITION, $(sinfo -h -o '%D node(s), %G' | head -n 1)"
}

cmd_stop() {
    need_root
    stop_slurm_daemons
    stop_pid_file slurmdbd "$RUN_DIR/slurmdbd.pid"
    if mysql_alive; then
        mysqladmin --protocol=socket shutdown >/dev/null 2>&1 || true
        wait_until "$DAEMON_STOP_TIMEOUT_S" bash -c "! mysqladmin --protocol=socket ping" || true
        say "MariaDB stopped"
    fi
    stop_pid_file munged "$MUNGE_PID_FILE"
    say "cluster stopped"
}

cmd_stop_controller() {
    need_root
    if controller_up; then
        scontrol shutdown slurmctld >/dev/null 2>&1 || true
    fi
    wait_until "$DAEMON_STOP_TIMEOUT_S" bash -c "! { [[ -s $RUN_DIR/slurmctld.pid ]] && kill -0 \$(cat $RUN_DIR/slurmctld.pid); }" || true
    stop_pid_file slurmctld "$RUN_DIR/slurmctld.pid"
    say "slurmctld is stopped (slurmd, slurmdbd, MariaDB and munge still run)"
}

cmd_start_controller() {
    need_root
    need_commands
    start_slurmctld
    wait_node_ready
}

# status: one line per part; exit 0 only when the node takes jobs and sacct answers
cmd_status() {
    local healthy=0
    check() {
        local label=$1
        shift
        if "$@" >/dev/null 2>&1; then echo "ok    $label"; else echo "FAIL  $label"; healthy=1; fi
    }
    check "munge (munge -n | unmunge)" munge_works
    check "MariaDB (mysqladmin ping)" mysql_alive
    check "slurmdbd (sacctmgr show cluster)" dbd_answers
    check "slurmctld (scontrol ping)" controller_up
    check "node $(short_hostname) takes jobs (state: $(node_state || true))" node_healthy
    check "accounting (sacct)" accounting_answers
    return "$healthy"
}

cmd_logs() {
    local lines=${1:-$LOG_EXCERPT_LINES}
    LOG_EXCERPT_LINES=$lines log_excerpt "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" "$LOG_DIR/slurmdbd.log" 2>&1
}

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

main() {
    local command=${1:-}
    (($# > 0)) && shift
    case $command in
        install) cmd_install "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        stop-controller) cmd_stop_controller "$@" ;;
        start-controller) cmd_start_controller "$@" ;;
        status) cmd_status "$@" ;;
        logs) cmd_logs "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; die "unknown command '${command}'" ;;
    esac
}

# run unless sourced (tests source it to check single functions)
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
