#!/usr/bin/env bash
# A multi-node Slurm on one machine for workshops and tests: munge, MariaDB + slurmdbd (accounting),
# slurmctld, and one slurmd per node, each in its own network namespace with its own hostname and address
# on a bridge inside this machine (node1 10.203.0.11, node2 10.203.0.12, ...; nothing is routed out),
# GRES GPUs per node (real /dev/nvidiaN where nvidia-smi lists GPUs, stand-in devices otherwise).
#
#   bash slurm/cluster.sh install            Debian packages (apt-get), skipped when present
#   bash slurm/cluster.sh start [--nodes N] [--gpus N] [--cpus N]
#                                            configure and start everything, wait until usable
#   bash slurm/cluster.sh status             exit 0 only when every node takes jobs and sacct answers
#                                            (resumes a node Slurm drained or set down first)
#   bash slurm/cluster.sh stop               stop every daemon started by `start`, remove the namespaces
#   bash slurm/cluster.sh stop-controller    stop slurmctld only (tests: "controller down")
#   bash slurm/cluster.sh start-controller   start slurmctld again, resume drained nodes, wait for them
#   bash slurm/cluster.sh logs [N]           last N lines of every daemon's log
#   bash slurm/cluster.sh account NAME COORDINATOR [USER...]
#                                            a course's account in accounting, as a site makes one: USERs (and
#                                            COORDINATOR) in it, their default; COORDINATOR its coordinator, who
#                                            may then cancel (scancel) and modify every job of the account
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
DEFAULT_NODES=2
DEFAULT_GPUS=4                 # per node
CPUS_PER_GPU=4                 # each node declares at least GPUs x this many CPUs
MEMORY_KEPT_PERCENT=90         # each node's RealMemory = this share of what slurmd -C detects

# the nodes' network: a bridge in this (root) namespace, one veth pair and namespace per node, a private
# /24 with no route out of it, so no node traffic leaves this machine
NODE_PREFIX="node"             # node names node1, node2, ...; also their namespaces and hostnames
NETWORK_PREFIX="10.203.0"
NETWORK_BITS=24
CONTROLLER_ADDR="$NETWORK_PREFIX.1"   # the bridge's address: slurmctld and slurmdbd, seen from the nodes
NODE_ADDR_OFFSET=10            # nodeI has $NETWORK_PREFIX.(NODE_ADDR_OFFSET + I)
BRIDGE="ckslurm0"
VETH_PREFIX="ckveth-"          # this namespace's end of nodeI's link; eth0 is the node's end
NODE_IFACE="eth0"
HOSTS_FILE="/etc/hosts"
NETNS_DIR="/run/netns"          # where `ip netns add` keeps its namespaces
HOSTS_BEGIN="# coursekit slurm nodes (slurm/cluster.sh): begin"
HOSTS_END="# coursekit slurm nodes (slurm/cluster.sh): end"
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
RESUME_SETTLE_TIMEOUT_S=10     # status: how long a resumed node may take to show idle
DAEMON_STOP_TIMEOUT_S=20
POLL_INTERVAL_S=0.5
LOG_EXCERPT_LINES=25

PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
REQUIRED_COMMANDS=(munged munge unmunge mysqld_safe mysqladmin mysql slurmdbd slurmctld slurmd sacctmgr
                   scontrol sinfo sacct sbatch)
HEALTHY_NODE_STATES="idle mixed allocated completing"
RESUMABLE_NODE_STATES="drained draining drain down"   # set by Slurm after an outage; resumed by start/status
NODE_STATE_FLAGS='*~#!%$@^-'   # sinfo %T suffixes (e.g. down* = not responding)

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

NODE_COUNT=""
GPU_COUNT=""
CPU_COUNT=""
CHANGED_CONFIGS=()

# node_names COUNT: node1 ... nodeCOUNT, one a line
node_names() {
    local index
    for ((index = 1; index <= $1; index++)); do echo "$NODE_PREFIX$index"; done
}

# node_addr NAME: the node's address on the bridge (node3 -> 10.203.0.13)
node_addr() { echo "$NETWORK_PREFIX.$((NODE_ADDR_OFFSET + ${1#"$NODE_PREFIX"}))"; }

# node_hostlist COUNT: Slurm's hostlist expression for the nodes (node1, node[1-2])
node_hostlist() {
    if (($1 == 1)); then echo "${NODE_PREFIX}1"; else echo "$NODE_PREFIX[1-$1]"; fi
}

# the nodes that `start` set up (recorded in $RUN_DIR/nodes), one a line
started_nodes() { [[ -f $RUN_DIR/nodes ]] && cat "$RUN_DIR/nodes"; return 0; }

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
    local host node_line real_cpus real_memory nodes gpus cpus memory_mb gpu_files password hostlist addrs
    host=$(short_hostname)
    node_line=$(slurmd -C | head -n 1)
    real_cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
    real_memory=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
    [[ -n $real_cpus && -n $real_memory ]] || die "could not read CPUs/RealMemory from 'slurmd -C': $node_line"
    nodes=${NODE_COUNT:-$DEFAULT_NODES}
    gpus=${GPU_COUNT:-$(detected_gpu_count)}
    ((gpus >= 1)) || die "--gpus must be at least 1 (got $gpus)"
    cpus=${CPU_COUNT:-$((gpus * CPUS_PER_GPU > real_cpus ? gpus * CPUS_PER_GPU : real_cpus))}
    memory_mb=$((real_memory * MEMORY_KEPT_PERCENT / 100))
    gpu_files=$(gpu_device_files "$gpus")
    password=$(database_password)
    hostlist=$(node_hostlist "$nodes")
    addrs=$(node_names "$nodes" | while read -r name; do node_addr "$name"; done | paste -sd,)
    local values=(CLUSTER="$CLUSTER_NAME" HOST="$host" CONTROLLER_ADDR="$CONTROLLER_ADDR" NODES="$hostlist"
                  NODE_ADDRS="$addrs" PARTITION="$PARTITION" CPUS="$cpus" MEMORY_MB="$memory_mb" GPUS="$gpus"
                  GPU_FILES="$gpu_files" LOG_DIR="$LOG_DIR" RUN_DIR="$RUN_DIR" SPOOL_DIR="$SPOOL_DIR"
                  MIN_JOB_AGE="$MIN_JOB_AGE_S" KILL_WAIT="$KILL_WAIT_S" DB_USER="$DB_USER" DB_PASS="$password"
                  DB_NAME="$DB_NAME")
    install_config slurm.conf 644 "$(render "$CONF_TEMPLATES/slurm.conf.in" "${values[@]}")"
    install_config gres.conf 644 "$(render "$CONF_TEMPLATES/gres.conf.in" "${values[@]}")"
    install_config slurmdbd.conf 600 "$(render "$CONF_TEMPLATES/slurmdbd.conf.in" "${values[@]}")"
    ensure_database "$password"
    node_names "$nodes" >"$RUN_DIR/nodes.new"
    say "nodes $hostlist ($addrs): $cpus CPUs, ${memory_mb} MB, gpu:$gpus ($gpu_files) each;" \
        "partition $PARTITION; controller $host ($CONTROLLER_ADDR)"
}

config_changed() {
    local name
    for name in "${CHANGED_CONFIGS[@]+"${CHANGED_CONFIGS[@]}"}"; do
        [[ $name == "$1" ]] && return 0
    done
    return 1
}

prepare_dirs() {
    mkdir -p "$SLURM_ETC" "$LOG_DIR" "$RUN_DIR" "$SPOOL_DIR/slurmctld"
}

# ---------------------------------------------------------------------------------------------- network

netns_exists() { ip netns list 2>/dev/null | grep -q "^$1\( \|$\)"; }

# the bridge and its address: slurmctld and slurmdbd, as the nodes reach them
ensure_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge || die "could not create the bridge $BRIDGE (ip link add ... type bridge)"
    fi
    ip addr replace "$CONTROLLER_ADDR/$NETWORK_BITS" dev "$BRIDGE"
    ip link set "$BRIDGE" up
}

# ensure_node_network NAME: its namespace, a veth pair to the bridge, its address; no route out
ensure_node_network() {
    local name=$1 veth="$VETH_PREFIX$1"
    netns_exists "$name" || ip netns add "$name" || die "could not create the network namespace $name (ip netns add)"
    if ! ip -n "$name" link show "$NODE_IFACE" >/dev/null 2>&1; then
        ip link del "$veth" >/dev/null 2>&1 || true   # a leftover end whose namespace is gone
        ip link add "$veth" type veth peer name "$NODE_IFACE" netns "$name" \
            || die "could not link namespace $name to $BRIDGE (ip link add $veth type veth ...)"
    fi
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$name" addr replace "$(node_addr "$name")/$NETWORK_BITS" dev "$NODE_IFACE"
    ip -n "$name" link set lo up
    ip -n "$name" link set "$NODE_IFACE" up
}

# write_hosts_block NODE...: name -> address lines for the nodes in /etc/hosts (rewritten in place: it
# may be a bind mount), so that jobs resolve each other's hostnames (torchrun's rendezvous, gloo)
write_hosts_block() {
    local kept block="" name
    kept=$(awk -v begin="$HOSTS_BEGIN" -v end="$HOSTS_END" \
        '$0 == begin {skip = 1} !skip {print} $0 == end {skip = 0}' "$HOSTS_FILE")
    if (($# > 0)); then
        block="$HOSTS_BEGIN"$'\n'
        for name in "$@"; do block+="$(node_addr "$name") $name"$'\n'; done
        block+="$HOSTS_END"
    fi
    local wanted="$kept${block:+$'\n'$block}"
    [[ "$(cat "$HOSTS_FILE")" == "$wanted" ]] && return 0
    printf '%s\n' "$wanted" >"$HOSTS_FILE" \
        || die "could not write the node names into $HOSTS_FILE (jobs resolve them there)"
}

setup_network() {
    local name
    ensure_bridge
    for name in "$@"; do ensure_node_network "$name"; done
    write_hosts_block "$@"
}

# remove_node_network NAME: end what still runs in it (job leftovers), remove the namespace and link
remove_node_network() {
    local name=$1 pid
    if netns_exists "$name"; then
        for pid in $(ip netns pids "$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$name" 2>/dev/null || true
    fi
    ip link del "$VETH_PREFIX$name" >/dev/null 2>&1 || true
}

teardown_network() {
    local name
    for name in $(started_nodes); do remove_node_network "$name"; done
    ip link del "$BRIDGE" >/dev/null 2>&1 || true
    write_hosts_block
    rm -f "$RUN_DIR/nodes"
    say "node namespaces, $BRIDGE and the $HOSTS_FILE entries removed"
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

slurmd_pid_file() { echo "$RUN_DIR/slurmd-$1.pid"; }
slurmd_log_file() { echo "$LOG_DIR/slurmd-$1.log"; }

# start_slurmd NAME: slurmd for node NAME inside its network namespace, with its own hostname (UTS
# namespace): jobs there see hostname NAME and the node's address, as on a separate machine
start_slurmd() {
    local name=$1
    if pid_alive "$(slurmd_pid_file "$name")"; then
        say "slurmd $name already running"
        return 0
    fi
    mkdir -p "$SPOOL_DIR/slurmd-$name"
    # nsenter, not `ip netns exec`: that one remounts /sys, hiding /sys/fs/cgroup, which slurmd needs
    nsenter --net="$NETNS_DIR/$name" unshare --uts sh -c 'hostname "$1" && exec slurmd -N "$1"' slurmd-start "$name" \
        || fail_with_logs "slurmd $name did not start" "$(slurmd_log_file "$name")"
    say "slurmd $name started (namespace $name, $(node_addr "$name"))"
}

# node_rows: "name state reason" for every node slurmctld knows, state without sinfo's flag suffixes
node_rows() {
    sinfo -h -N -o '%N|%T|%E' 2>/dev/null | sort -u | while IFS='|' read -r name state reason; do
        echo "$name ${state%%["$NODE_STATE_FLAGS"]*} $reason"
    done
}

node_state() { sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n 1; }

# every configured node takes jobs (and there is at least one)
nodes_healthy() {
    local rows name state _reason count=0
    rows=$(node_rows)
    [[ -n $rows ]] || return 1
    while read -r name state _reason; do
        [[ " $HEALTHY_NODE_STATES " == *" $state "* ]] || return 1
        count=$((count + 1))
    done <<<"$rows"
    ((count > 0))
}

# resume_drained_nodes: `scontrol update state=resume` for every node Slurm drained or set down (after a
# controller outage: "Kill task failed", "Not responding"); prints what it resumed and why; 0 if none
resume_drained_nodes() {
    local name state reason resumed=1
    while read -r name state reason; do
        [[ -n $name && " $RESUMABLE_NODE_STATES " == *" $state "* ]] || continue
        if scontrol update nodename="$name" state=resume >/dev/null 2>&1; then
            say "node $name was $state (reason: ${reason:-none}): resumed"
            resumed=0
        fi
    done < <(node_rows)
    return "$resumed"
}

wait_nodes_ready() {
    local deadline=$((SECONDS + NODE_READY_TIMEOUT_S)) next_resume=$SECONDS
    until nodes_healthy; do
        # a node left down or drained by an earlier run: resume it (again every few seconds: a slurmd
        # that has not registered yet keeps its node down*)
        if ((SECONDS >= next_resume)); then
            resume_drained_nodes >/dev/null || true
            next_resume=$((SECONDS + 2))
        fi
        if ((SECONDS >= deadline)); then
            echo "sinfo -R:" >&2
            sinfo -R >&2 || true
            local logs=("$LOG_DIR/slurmctld.log") name
            for name in $(started_nodes); do logs+=("$(slurmd_log_file "$name")"); done
            fail_with_logs "nodes not idle after ${NODE_READY_TIMEOUT_S}s: $(node_rows | paste -sd';')" "${logs[@]}"
        fi
        sleep "$POLL_INTERVAL_S"
    done
    say "nodes: $(node_rows | awk '{print $1, $2}' | paste -sd, | sed 's/,/, /g')"
}

stop_slurm_daemons() {
    local name
    if controller_up; then
        scontrol shutdown >/dev/null 2>&1 || true
        wait_until "$DAEMON_STOP_TIMEOUT_S" bash -c "! { [[ -s $RUN_DIR/slurmctld.pid ]] && kill -0 \$(cat $RUN_DIR/slurmctld.pid); }" || true
        say "slurmctld and slurmd shut down (scontrol shutdown)"
    fi
    stop_pid_file slurmctld "$RUN_DIR/slurmctld.pid"
    stop_pid_file slurmd "$RUN_DIR/slurmd.pid"   # the single-node layout of earlier versions
    for name in $(started_nodes); do stop_pid_file "slurmd $name" "$(slurmd_pid_file "$name")"; done
}

# ---------------------------------------------------------------------------------------------- commands

cmd_start() {
    while (($# > 0)); do
        case $1 in
            --nodes) NODE_COUNT=${2:?--nodes needs a number}; shift 2 ;;
            --gpus) GPU_COUNT=${2:?--gpus needs a number}; shift 2 ;;
            --cpus) CPU_COUNT=${2:?--cpus needs a number}; shift 2 ;;
            *) die "start: unknown option '$1' (allowed: --nodes N, --gpus N, --cpus N)" ;;
        esac
    done
    [[ -z $NODE_COUNT || $NODE_COUNT =~ ^[1-9][0-9]?$ ]] \
        || die "--nodes must be an integer from 1 to 99 (got '$NODE_COUNT')"
    [[ -z $GPU_COUNT || $GPU_COUNT =~ ^[1-9][0-9]*$ ]] || die "--gpus must be a positive integer (got '$GPU_COUNT')"
    [[ -z $CPU_COUNT || $CPU_COUNT =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a positive integer (got '$CPU_COUNT')"
    local started=$SECONDS name nodes=()
    need_root
    need_commands
    prepare_dirs
    start_munge
    start_mariadb
    ensure_bridge   # the controller's address, where slurmdbd and slurmctld are reached
    write_configs
    start_slurmdbd
    if config_changed slurm.conf || config_changed gres.conf || ! cmp -s "$RUN_DIR/nodes.new" "$RUN_DIR/nodes"; then
        if controller_up || pid_alive "$RUN_DIR/slurmctld.pid"; then
            say "configuration changed: restarting slurmctld and slurmd"
        fi
        stop_slurm_daemons
        local old_nodes
        old_nodes=$(started_nodes)
        for name in $old_nodes; do grep -qx "$name" "$RUN_DIR/nodes.new" || remove_node_network "$name"; done
    fi
    mv "$RUN_DIR/nodes.new" "$RUN_DIR/nodes"
    mapfile -t nodes <"$RUN_DIR/nodes"
    setup_network "${nodes[@]}"
    start_slurmctld
    for name in "${nodes[@]}"; do start_slurmd "$name"; done
    wait_nodes_ready
    wait_until "$DAEMON_START_TIMEOUT_S" accounting_answers \
        || fail_with_logs "sacct does not answer: accounting is not working" "$LOG_DIR/slurmdbd.log" "$LOG_DIR/slurmctld.log"
    say "cluster $CLUSTER_NAME is up in $((SECONDS - started)) s: partition $PARTITION," \
        "$(sinfo -h -o '%D node(s) %N, %G, %c CPUs' | head -n 1)"
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
    teardown_network
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
    resume_drained_nodes || true
    wait_nodes_ready
}

# status: one line per part; exit 0 only when every node takes jobs and sacct answers. A node that Slurm
# drained or set down (e.g. "Kill task failed" after a controller outage) is resumed first.
cmd_status() {
    local healthy=0 name state reason
    check() {
        local label=$1
        shift
        if "$@" >/dev/null 2>&1; then echo "ok    $label"; else echo "FAIL  $label"; healthy=1; fi
    }
    check "munge (munge -n | unmunge)" munge_works
    check "MariaDB (mysqladmin ping)" mysql_alive
    check "slurmdbd (sacctmgr show cluster)" dbd_answers
    check "slurmctld (scontrol ping)" controller_up
    if controller_up && resume_drained_nodes; then
        wait_until "$RESUME_SETTLE_TIMEOUT_S" nodes_healthy || true
    fi
    local rows
    rows=$(node_rows)
    if [[ -z $rows ]]; then
        echo "FAIL  nodes (sinfo lists none)"
        healthy=1
    fi
    while read -r name state reason; do
        [[ -n $name ]] || continue
        if [[ " $HEALTHY_NODE_STATES " == *" $state "* ]]; then
            echo "ok    node $name takes jobs (state: $state)"
        else
            echo "FAIL  node $name takes jobs (state: $state${reason:+, reason: $reason})"
            healthy=1
        fi
    done <<<"$rows"
    check "accounting (sacct)" accounting_answers
    return "$healthy"
}

cmd_logs() {
    local lines=${1:-$LOG_EXCERPT_LINES} logs=("$LOG_DIR/slurmctld.log") name
    for name in $(started_nodes); do logs+=("$(slurmd_log_file "$name")"); done
    LOG_EXCERPT_LINES=$lines log_excerpt "${logs[@]}" "$LOG_DIR/slurmdbd.log" 2>&1
}

# ---------------------------------------------------------------------------------------------- account

account_has_user() { sacctmgr -n -P show assoc where "account=$1" "user=$2" format=user | grep -qx "$2"; }

# account NAME COORDINATOR [USER...]: what a site's admins do for a course (sacctmgr): an account, the course's
# users in it (it becomes their default account: their jobs carry it) and the instructor as its coordinator.
# Slurm lets a coordinator cancel, hold and modify the jobs of their account's users (scancel as the instructor:
# "Access/permission denied" without it). Idempotent.
cmd_account() {
    (($# >= 2)) || die "usage: bash slurm/cluster.sh account NAME COORDINATOR [USER...]"
    local account=$1 coordinator=$2 user
    shift 2
    [[ $account =~ ^[a-z][a-z0-9_-]{0,31}$ ]] || die "account name: '$account' is not 1-32 lower-case letters, digits, - or _"
    dbd_answers || die "accounting (slurmdbd) does not answer: bash slurm/cluster.sh start first"
    if ! sacctmgr -n -P show account "$account" format=account | grep -qx "$account"; then
        sacctmgr -i add account "$account" "cluster=$CLUSTER_NAME" "description=course $account" \
            "organization=coursekit" >/dev/null || die "sacctmgr could not add account $account"
        say "account $account added"
    fi
    for user in "$coordinator" "$@"; do
        id "$user" >/dev/null 2>&1 || die "no Unix user '$user'"
        if ! account_has_user "$account" "$user"; then
            sacctmgr -i add user "$user" "account=$account" "defaultaccount=$account" >/dev/null \
                || die "sacctmgr could not add user $user to account $account"
        fi
        sacctmgr -i modify user "$user" set "defaultaccount=$account" >/dev/null 2>&1 || true  # "nothing to change"
    done
    if ! sacctmgr -n -P show user "$coordinator" withcoord format=coordinators | tr ',' '\n' | grep -qx "$account"; then
        sacctmgr -i add coordinator "account=$account" "names=$coordinator" >/dev/null \
            || die "sacctmgr could not make $coordinator a coordinator of $account"
    fi
    say "account $account: users $coordinator${*:+ $*}; coordinator $coordinator"
}

usage() {
    sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
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
        account) cmd_account "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; die "unknown command '${command}'" ;;
    esac
}

# run unless sourced (tests source it to check single functions)
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
