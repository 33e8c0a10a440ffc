#!/usr/bin/env bash
# A private one-node Slurm 22.05 cluster for tests: munged, slurmctld and slurmd on this host.
#   tests/hpc/slurm_cluster.sh start DIR   # munged, slurmctld, slurmd; waits until the node is idle
#   tests/hpc/slurm_cluster.sh stop DIR    # kills them by their recorded PIDs
# After start, `source DIR/env.sh` (or export SLURM_CONF=DIR/slurm.conf) to use it.
# Installs nothing: needs the Debian packages slurm-wlm and munge. Must run as root.
set -euo pipefail

die() { echo "slurm_cluster: $*" >&2; exit 1; }

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || die "usage: $0 start|stop DIR"

stop_cluster() {
  local pidfile pid i
  if [[ -f $dir/slurm.conf ]] && command -v scancel >/dev/null; then
    SLURM_CONF=$dir/slurm.conf timeout 5 scancel --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  # slurmd first (its steps), then the controller, then munged.
  for pidfile in slurmd.pid.rec slurmctld.pid.rec munged.pid.rec; do
    [[ -f $dir/$pidfile ]] || continue
    pid=$(<"$dir/$pidfile")
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$dir/$pidfile"
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start_cluster() {
  local missing=() c
  for c in munged munge unmunge slurmctld slurmd sbatch sinfo scontrol squeue setpriv python3; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  ((${#missing[@]} == 0)) || die "missing commands: ${missing[*]} (install the Debian packages: apt-get install -y slurm-wlm munge)"
  [[ $EUID -eq 0 ]] || die "must run as root (SlurmUser=root, munged started as the munge user)"
  [[ -r /etc/munge/munge.key ]] || die "/etc/munge/munge.key missing (reinstall the munge package)"
  id munge >/dev/null 2>&1 || die "no munge user (reinstall the munge package)"

  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  chmod 0755 "$dir"   # munged (as munge) must reach its socket folder
  mkdir -p "$dir"/{munge,state,spool,log,tmp}
  chown munge:munge "$dir/munge"
  chmod 0755 "$dir/munge"
  local sock=$dir/munge/munge.socket.2
  setpriv --reuid=munge --regid=munge --init-groups test -w "$dir/munge" ||
    die "the munge user cannot reach $dir/munge: make its parent folders traversable (chmod o+x)"

  setpriv --reuid=munge --regid=munge --init-groups \
    munged -F --socket="$sock" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed" \
    >"$dir/log/munged.out" 2>&1 &
  echo $! >"$dir/munged.pid.rec"
  local i ok=0
  for ((i = 0; i < 50; i++)); do
    if [[ -S $sock ]] && munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.1
  done
  ((ok)) || { cat "$dir/log/munged.out" "$dir/munge/munged.log" 2>/dev/null >&2; stop_cluster; die "munged did not come up"; }

  local host ctl_port d_port node_line
  host=$(hostname -s)
  ctl_port=$(free_port)
  d_port=$(free_port)
  while [[ $d_port == "$ctl_port" ]]; do d_port=$(free_port); done
  node_line=$(slurmd -C | head -n 1)
  [[ $node_line == NodeName=* ]] || { stop_cluster; die "unexpected 'slurmd -C' output: $node_line"; }

  cat >"$dir/slurm.conf" <<EOF
ClusterName=wgtest
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmctldPort=${ctl_port}
SlurmdPort=${d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${sock},cred_expire=10
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/slurmd.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdLogFile=${dir}/log/slurmd.log
TmpFS=${dir}/tmp
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
EnforcePartLimits=ALL
ReturnToService=2
SchedulerParameters=sched_interval=1
# cred_expire (AuthInfo) is also how long a requeued job waits before it may start again (default 120 s).
# MinJobAge: sbatch --wait (22.05) first looks after 2 s and quadruples its wait (8, then 32 s
# at most) while the wait is under MinJobAge / 2. With 300, the default, a 15 s job returned
# after 42 s; 16 holds the wait at 8 s and keeps a finished job's record at least 16 s, long
# enough for the tests' scontrol reads.
MinJobAge=16
KillWait=5
JobRequeue=1
${node_line} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env.sh"

  slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid.rec"
  slurmd -D -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid.rec"

  local state=""
  for ((i = 0; i < 300; i++)); do   # 30 s at most
    state=$(timeout 5 sinfo -h -N -o %t 2>/dev/null | head -n 1 || true)
    [[ $state == idle ]] && break
    sleep 0.1
  done
  if [[ $state != idle ]]; then
    echo "slurm_cluster: node not idle after 30 s (state '${state}'); logs:" >&2
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 2>/dev/null || true
    stop_cluster
    exit 1
  fi
  echo "slurm_cluster: up in $dir (SLURM_CONF=$SLURM_CONF, ports $ctl_port/$d_port)"
}

case $cmd in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) die "usage: $0 start|stop DIR" ;;
esac
