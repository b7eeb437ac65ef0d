#!/usr/bin/env bash
# A real SLURM cluster on this one machine, for accelrl's `slurm` tests (and for trying the
# launcher). Debian/Ubuntu, run as root; no systemd needed: every daemon is started directly and
# tracked through its pid file.
#
#   bash slurm/testing/local_cluster.sh [start]  install what is missing, write the configs,
#                                                start what is not running, wait until every
#                                                node is idle, print READY
#   bash slurm/testing/local_cluster.sh status   exit 0 when every daemon is up
#   bash slurm/testing/local_cluster.sh stop     stop the daemons this script started
#   bash slurm/testing/local_cluster.sh purge    stop, then delete all state (job DB, spool, logs)
#
# `start` is idempotent: on a running cluster it only checks it (under a second). When the
# generated config differs from the installed one (other knobs), the daemons that read it are
# restarted.
#
# What runs: munged (authentication), a private MariaDB + slurmdbd (accounting: submitit reads
# job states only from `sacct`; without it a cancelled or timed-out job never counts as done),
# slurmctld, and one slurmd per fake node. Nodes node1..nodeN all live on 127.0.0.1, each slurmd
# on its own port, so `--nodes 2` jobs run; each node advertises all cores of the machine
# (oversubscribed, no cgroups, memory not enforced).
#
# Knobs (environment variables):
#   LOCAL_SLURM_DIR         state, spool, logs and database (default /tmp/local-slurm)
#   LOCAL_SLURM_NODES       fake nodes (default 2)
#   LOCAL_SLURM_CPUS        CPUs per node (default: nproc)
#   LOCAL_SLURM_MEM_MB      RealMemory per node (default: 75% of MemTotal)
#   LOCAL_SLURM_GPUS        fake GPUs per node (default 0), backed by mknod'ed character devices
#                           (needs CAP_MKNOD); jobs get CUDA_VISIBLE_DEVICES but no real device
#   LOCAL_SLURM_ACCOUNTING  1 (default) MariaDB + slurmdbd; 0 none (submitit then cannot see
#                           CANCELLED/TIMEOUT/FAILED states)
#   LOCAL_SLURM_CRED_EXPIRE credential lifetime in s (default 30); a requeued job waits this
#                           + 1 s before it may start again (SLURM's default is 120)
#   LOCAL_SLURM_DB_PORT     port of the private MariaDB on 127.0.0.1 (default 3307)
#   LOCAL_SLURM_SMOKE       1 (default): after starting daemons, run `srun -N<nodes> hostname`
set -euo pipefail

ACTION=${1:-start}
BASE=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
NODES=${LOCAL_SLURM_NODES:-2}
CPUS=${LOCAL_SLURM_CPUS:-$(nproc)}
MEM_MB=${LOCAL_SLURM_MEM_MB:-$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.75}' /proc/meminfo)}
GPUS=${LOCAL_SLURM_GPUS:-0}
ACCOUNTING=${LOCAL_SLURM_ACCOUNTING:-1}
CRED_EXPIRE=${LOCAL_SLURM_CRED_EXPIRE:-30}
DB_PORT=${LOCAL_SLURM_DB_PORT:-3307}
SMOKE=${LOCAL_SLURM_SMOKE:-1}

CLUSTER=accelrl-local
HOST=$(hostname -s 2>/dev/null || uname -n)
HOST=${HOST%%.*}
SLURMD_PORT0=17000                # slurmd of nodeI listens on SLURMD_PORT0 + I
ETC=/etc/slurm                    # the default path, so sbatch/srun/sacct need no SLURM_CONF
DB_DIR=$BASE/mariadb
DB_SOCKET=$DB_DIR/mariadb.sock
T0=$EPOCHREALTIME

log() { printf '[local-slurm %5ss] %s\n' "$(awk -v a="$EPOCHREALTIME" -v b="$T0" 'BEGIN {printf "%.1f", a - b}')" "$*"; }

die() {
  log "ERROR: $*"
  # CI shows this output only: include the end of every daemon log
  local f
  for f in "$BASE"/log/*.log "$DB_DIR"/mariadbd.err; do
    [ -s "$f" ] || continue
    echo "---- tail $f"
    tail -n 15 "$f"
  done
  exit 1
}

# running PIDFILE NAME: the pid in PIDFILE is alive and is NAME (a stale file after a reboot can
# name an unrelated process)
running() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

# stop_daemon PIDFILE NAME: TERM that one pid, wait up to 20 s, then KILL it
stop_daemon() {
  local pid _
  if ! running "$1" "$2"; then rm -f "$1"; return 0; fi
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$1"
  log "stopped $2 (pid $pid)"
}

# wait_until SECONDS WHAT CMD...: poll CMD four times a second
wait_until() {
  local secs=$1 what=$2 _
  shift 2
  for _ in $(seq $((secs * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  die "$what not ready after ${secs}s"
}

install_packages() {
  local pkgs=(munge slurmctld slurmd slurm-client) missing=() p
  if [ "$ACCOUNTING" = 1 ]; then pkgs+=(slurmdbd mariadb-server); fi
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
  [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root"
  log "installing ${missing[*]}"
  apt-get update -qq
  # The packages' postinst scripts try to start their services and print "invoke-rc.d ...
  # denied" without systemd; that is expected, this script starts the daemons itself.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >"$BASE/apt.log" 2>&1 || { tail -n 30 "$BASE/apt.log"; die "apt-get install failed"; }
  log "installed $(dpkg-query -W -f='${Package}=${Version} ' "${pkgs[@]}")"
}

# submitit's TorchDistributedEnvironment uses the first node's *name* as MASTER_ADDR, so the
# fake node names must resolve (to this machine).
add_hosts() {
  local names="" n i unresolved=0
  for i in $(seq "$NODES"); do names+=" node$i"; done
  for n in $names; do getent hosts "$n" >/dev/null || unresolved=1; done
  [ $unresolved = 0 ] && return 0
  local tmp
  tmp=$(mktemp)
  grep -v '# accelrl-local-slurm$' /etc/hosts >"$tmp" || true
  echo "127.0.0.1$names # accelrl-local-slurm" >>"$tmp"
  # write in place: /etc/hosts is often a bind mount that cannot be replaced by a rename
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
  log "added$names to /etc/hosts"
}

start_munge() {
  # /run is a tmpfs: its munge folder is gone after a reboot or in a fresh container
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then # normally created by the package's postinst
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  if ! running /run/munge/munged.pid munged; then
    rm -f /run/munge/munge.socket.2.lock
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
    log "started munged"
  fi
  wait_until 10 munged bash -c 'munge -n | unmunge'
}

# install_if_changed NEW DEST: move NEW over DEST when they differ; exit status 0 when it did
install_if_changed() {
  if cmp -s "$1" "$2"; then rm -f "$1"; return 1; fi
  mv "$1" "$2"
}

write_configs() {
  mkdir -p "$BASE"/{state,spool,log,run,etc} "$ETC"
  local i node_lines="" gres="" gres_types=""
  if [ "$GPUS" -gt 0 ]; then
    # SLURM rejects GPUs without File= and files that are not devices (node state INVAL), so
    # fake them as character devices with NVIDIA's major number
    mkdir -p "$BASE/fakegpu"
    for i in $(seq 0 $((GPUS - 1))); do
      [ -c "$BASE/fakegpu/nvidia$i" ] || mknod "$BASE/fakegpu/nvidia$i" c 195 "$i" ||
        die "mknod failed: fake GPUs need CAP_MKNOD (use LOCAL_SLURM_GPUS=0)"
    done
    echo "Name=gpu File=$BASE/fakegpu/nvidia[0-$((GPUS - 1))]" >"$BASE/etc/gres.conf"
    gres=" Gres=gpu:$GPUS"
    gres_types="GresTypes=gpu"
  else
    : >"$BASE/etc/gres.conf"
  fi
  for i in $(seq "$NODES"); do
    mkdir -p "$BASE/spool/node$i"
    node_lines+="NodeName=node$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT0 + i))"
    node_lines+=" CPUs=$CPUS RealMemory=$MEM_MB$gres State=UNKNOWN"$'\n'
  done
  local accounting="AccountingStorageType=accounting_storage/none"
  if [ "$ACCOUNTING" = 1 ]; then
    accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819"
  fi
  cat >"$BASE/etc/slurm.conf" <<EOF
# Written by accelrl's slurm/testing/local_cluster.sh: a test cluster on one machine.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=6817
# root runs the daemons and may submit: this cluster exists for tests only
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again only after the credential lifetime (+1 s)
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups in containers: track processes through /proc, bind no CPUs
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# let nodes declare more CPUs/memory than the machine has
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# schedule every 2 s, not every 60 s, so an eligible (e.g. requeued) job starts promptly
SchedulerParameters=sched_interval=2,bf_interval=5
$accounting
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
$gres_types
# a node that was DOWN comes back as soon as its slurmd registers
ReturnToService=2
InactiveLimit=0
KillWait=5
# keep finished jobs in slurmctld for 5 minutes (squeue/scontrol show them)
MinJobAge=300
Waittime=0
SlurmctldTimeout=60
SlurmdTimeout=60
$node_lines
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  CONF_CHANGED=0
  install_if_changed "$BASE/etc/slurm.conf" "$ETC/slurm.conf" && CONF_CHANGED=1
  install_if_changed "$BASE/etc/gres.conf" "$ETC/gres.conf" && CONF_CHANGED=1
  if [ "$CONF_CHANGED" = 1 ]; then
    log "wrote $ETC/slurm.conf: $NODES node(s) x $CPUS CPUs, ${MEM_MB} MB, $GPUS GPU(s)"
  fi
  DBD_CHANGED=0
  if [ "$ACCOUNTING" = 1 ]; then
    cat >"$BASE/etc/slurmdbd.conf" <<EOF
# Written by accelrl's slurm/testing/local_cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$BASE/log/slurmdbd.log
PidFile=$BASE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm-local
StorageLoc=slurm_acct_db
EOF
    install_if_changed "$BASE/etc/slurmdbd.conf" "$ETC/slurmdbd.conf" && DBD_CHANGED=1
    # slurmdbd refuses a config (it holds the DB password) that others may read
    chown root:root "$ETC/slurmdbd.conf"
    chmod 0600 "$ETC/slurmdbd.conf"
  fi
}

start_mariadb() {
  # A private instance (own data dir, socket and port) leaves any system MariaDB alone.
  mkdir -p "$DB_DIR"
  chown mysql:mysql "$DB_DIR"
  if [ ! -d "$DB_DIR/data/mysql" ]; then
    log "creating the MariaDB data dir"
    mariadb-install-db --user=mysql --datadir="$DB_DIR/data" --skip-test-db \
      --auth-root-authentication-method=socket >"$DB_DIR/install.log" 2>&1 ||
      { tail -n 30 "$DB_DIR/install.log"; die "mariadb-install-db failed"; }
  fi
  if ! running "$DB_DIR/mariadbd.pid" mariadbd; then
    setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DB_DIR/data" \
      --socket="$DB_SOCKET" --pid-file="$DB_DIR/mariadbd.pid" --log-error="$DB_DIR/mariadbd.err" \
      --bind-address=127.0.0.1 --port="$DB_PORT" \
      --innodb-buffer-pool-size=256M --innodb-lock-wait-timeout=900 \
      </dev/null >/dev/null 2>&1 &
    log "started mariadbd"
  fi
  wait_until 60 mariadbd mariadb-admin --socket="$DB_SOCKET" ping
  mariadb --socket="$DB_SOCKET" -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm-local';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm-local';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

start_slurmdbd() {
  if [ "$DBD_CHANGED" = 1 ]; then stop_daemon "$BASE/run/slurmdbd.pid" slurmdbd; fi
  if ! running "$BASE/run/slurmdbd.pid" slurmdbd; then
    slurmdbd </dev/null >>"$BASE/log/slurmdbd.out" 2>&1
    log "started slurmdbd"
  fi
  # slurmctld registers the cluster itself; here we only wait until slurmdbd answers
  wait_until 120 slurmdbd sacctmgr -n -P list cluster
}

start_slurmctld() {
  if [ "$CONF_CHANGED" = 1 ]; then stop_daemon "$BASE/run/slurmctld.pid" slurmctld; fi
  if ! running "$BASE/run/slurmctld.pid" slurmctld; then
    slurmctld </dev/null >>"$BASE/log/slurmctld.out" 2>&1
    log "started slurmctld"
    STARTED=1
  fi
  wait_until 60 slurmctld bash -c 'scontrol ping | grep -q "is UP"'
}

start_slurmds() {
  local f name i
  # stop the slurmd's of nodes no longer configured, and all of them after a config change
  for f in "$BASE"/run/slurmd-*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    name=${name#slurmd-}
    if [ "$CONF_CHANGED" = 1 ] || ! [[ $name =~ ^node([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -gt "$NODES" ]; then
      stop_daemon "$f" slurmd
    fi
  done
  for i in $(seq "$NODES"); do
    if ! running "$BASE/run/slurmd-node$i.pid" slurmd; then
      slurmd -N "node$i" </dev/null >>"$BASE/log/slurmd-node$i.out" 2>&1
      log "started slurmd for node$i"
      STARTED=1
    fi
  done
}

# every configured node registered and usable
nodes_ready() {
  local states
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
  [ "$(echo "$states" | awk '{print $1}' | sort -u | grep -c .)" -eq "$NODES" ] &&
    ! echo "$states" | awk '{print $2}' | grep -qvE '^(idle|mixed|allocated|completing)$'
}

do_start() {
  STARTED=0
  mkdir -p "$BASE"
  install_packages
  add_hosts
  start_munge
  write_configs
  if [ "$ACCOUNTING" = 1 ]; then
    start_mariadb
    start_slurmdbd
  fi
  start_slurmctld
  start_slurmds
  local _
  for _ in $(seq 120); do nodes_ready && break; sleep 0.25; done
  if ! nodes_ready; then
    # a node left DOWN or DRAINED by an earlier run of the cluster: resume it once, then wait again
    scontrol update nodename="node[1-$NODES]" state=resume 2>/dev/null || true
    for _ in $(seq 120); do nodes_ready && break; sleep 0.25; done
  fi
  nodes_ready || { sinfo -N || true; die "nodes not ready"; }
  if [ "$STARTED" = 1 ] && [ "$SMOKE" = 1 ]; then
    timeout 60 srun -N "$NODES" -n "$NODES" -t 1 hostname >/dev/null || die "srun -N$NODES hostname failed"
    log "srun -N$NODES hostname ok"
  fi
  sinfo -N -o '%N %P %T %c %m %G' | sed 's/^/    /'
  log "READY: cluster $CLUSTER, $NODES node(s), accounting=$ACCOUNTING, logs in $BASE/log"
}

do_stop() {
  local f
  # TERM every slurmd and slurmctld first so that they shut down in parallel, then wait for each
  for f in "$BASE"/run/slurmd-*.pid "$BASE/run/slurmctld.pid"; do
    [ -e "$f" ] || continue
    if running "$f" slurmd || running "$f" slurmctld; then kill "$(cat "$f")" 2>/dev/null || true; fi
  done
  for f in "$BASE"/run/slurmd-*.pid; do
    if [ -e "$f" ]; then stop_daemon "$f" slurmd; fi
  done
  stop_daemon "$BASE/run/slurmctld.pid" slurmctld
  stop_daemon "$BASE/run/slurmdbd.pid" slurmdbd
  stop_daemon "$DB_DIR/mariadbd.pid" mariadbd
  stop_daemon /run/munge/munged.pid munged
  log "stopped"
}

do_status() {
  local rc=0 f name
  check() { if running "$1" "$2"; then echo "$3 up"; else echo "$3 DOWN"; rc=1; fi; }
  check /run/munge/munged.pid munged munged
  if grep -q 'accounting_storage/slurmdbd' "$ETC/slurm.conf" 2>/dev/null; then
    check "$DB_DIR/mariadbd.pid" mariadbd mariadbd
    check "$BASE/run/slurmdbd.pid" slurmdbd slurmdbd
  fi
  check "$BASE/run/slurmctld.pid" slurmctld slurmctld
  for f in "$BASE"/run/slurmd-*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    check "$f" slurmd "$name"
  done
  if [ $rc = 0 ]; then sinfo -N -o '%N %P %T %c %m %G'; fi
  return $rc
}

case "$ACTION" in
  start) do_start ;;
  status) do_status ;;
  stop) do_stop ;;
  purge)
    do_stop
    rm -rf "$BASE"
    log "removed $BASE"
    ;;
  *)
    echo "usage: $0 [start|status|stop|purge]" >&2
    exit 2
    ;;
esac
