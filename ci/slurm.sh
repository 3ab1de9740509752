#!/usr/bin/env bash
# A one-node SLURM on this host (munged, slurmctld, slurmd) for the tests marked `slurm`.
# Needs root and apt (Debian/Ubuntu). No cgroups: they seldom work inside containers.
#
#   ci/slurm.sh start    install slurm-wlm + munge if missing, write the config, start the daemons
#   ci/slurm.sh stop     stop the daemons that `start` recorded, by pid, and nothing else
#   ci/slurm.sh status   the recorded daemons, sinfo and squeue
#   ci/slurm.sh check    an sbatch job runs to its end
#
# RFOL_SLURM_DIR (default /tmp/rfol-slurm) holds state, spool, logs and the pid file.
set -euo pipefail

dir=${RFOL_SLURM_DIR:-/tmp/rfol-slurm}
pids=$dir/pids
conf=/etc/slurm/slurm.conf
node=$(hostname -s)

say() { echo "ci/slurm.sh: $*" >&2; }
running() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

install() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && return
    say "installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
}

launch() {  # name command...: run a daemon in the foreground mode, in the background; record its pid
    local name=$1
    shift
    nohup "$@" >"$dir/log/$name.out" 2>&1 &
    echo "$name $!" >>"$pids"
}

wait_for() {  # tries command...: retry every 0.2 s
    local n=$1
    shift
    for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    return 1
}

recorded_running() {  # is a daemon that `start` recorded still running?
    [ -f "$pids" ] || return 1
    local name pid
    while read -r name pid; do running "$pid" && return 0; done <"$pids"
    return 1
}

node_up() { sinfo -h -N -o '%T' | grep -Eq '^(idle|mixed|allocated)'; }
munge_ok() { munge -n </dev/null | unmunge; }

start() {
    if recorded_running; then
        say "already running: $(sinfo -h -o '%P %T')"
        return 0
    fi
    install
    mkdir -p "$dir/log" "$dir/state" "$dir/spool" /etc/slurm /run/munge /var/lib/munge /var/log/munge
    : >"$pids"
    [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
    chmod 400 /etc/munge/munge.key
    launch munged runuser -u munge -- /usr/sbin/munged --foreground --force
    wait_for 50 munge_ok || { say "munge does not answer: see $dir/log/munged.out"; exit 1; }
    local cpus mem
    cpus=$(nproc)
    mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
    if [ -f "$conf" ] && ! grep -q '^# written by ci/slurm.sh' "$conf"; then
        cp "$conf" "$conf.orig"  # a site's own configuration: kept aside
    fi
    cat >"$conf" <<CONF
# written by ci/slurm.sh: one node, $node, no cgroups, root runs everything
ClusterName=rfol
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
MinJobAge=30
KillWait=5
InactiveLimit=0
DefMemPerCPU=500
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
    launch slurmctld /usr/sbin/slurmctld -D -i
    wait_for 100 bash -c "scontrol ping | grep -q UP" || { say "slurmctld: see $dir/log"; exit 1; }
    launch slurmd /usr/sbin/slurmd -D
    wait_for 100 node_up || scontrol update nodename="$node" state=resume || true
    wait_for 50 node_up || { say "the node is not up: see $dir/log"; exit 1; }
    say "running: $(sinfo -h -o '%P %D %T %c CPUs %m MiB')"
}

stop() {
    [ -f "$pids" ] || { say "nothing recorded in $pids"; return 0; }
    local name pid
    tac "$pids" | while read -r name pid; do  # slurmd, slurmctld, munged
        running "$pid" || continue
        kill -TERM "$pid" 2>/dev/null || true
        wait_for 50 bash -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
        say "stopped $name ($pid)"
    done
    rm -f "$pids"
}

status() {
    [ -f "$pids" ] && while read -r name pid; do
        echo "$name $pid $(running "$pid" && echo running || echo gone)"
    done <"$pids"
    sinfo || true
    squeue || true
}

check() {
    local out=$dir/check.out job
    rm -f "$out"
    job=$(sbatch --parsable -o "$out" --wrap hostname)
    wait_for 150 test -s "$out" || { say "job $job wrote nothing"; exit 1; }
    echo "sbatch job $job ran on $(cat "$out")"
}

case ${1:-} in
start | stop | status | check) "$1" ;;
*) echo "usage: $0 start|stop|status|check" >&2; exit 2 ;;
esac
