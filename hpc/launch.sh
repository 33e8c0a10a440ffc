#!/usr/bin/env bash
#SBATCH --job-name=wgtrain
#SBATCH --signal=B:USR1@120
#SBATCH --output=wgtrain-%j.log
#SBATCH --open-mode=append
#
# Launch wgtrain under Slurm, three ways:
#   sbatch hpc/launch.sh --time 60 --config config/mixed.yml [--set K=V]... [--requeue]
#       inside the allocation: lowers the job's limit to --time, starts the ranks
#       with `srun --mpi=pmix` (mpirun as fallback), forwards USR1/TERM so every
#       rank stops at an agreed step and saves; with --requeue the job requeues
#       itself after such a stop and the next run (same job id, same run id)
#       resumes from the checkpoint.
#   hpc/launch.sh --time 60 --config ... [--nodes N] [--gpus-per-node G]
#       [--ntasks-per-node T] [--partition P] [--account A] [--site S]
#       on a login node: submits itself with sbatch.
#   hpc/launch.sh --config ... [--ntasks N]      without Slurm: runs locally.
# Site settings (account, partition, time cap, modules, network variables):
# hpc/sites/<site>.sh, chosen by --site or WG_SITE, else default.sh.
# Environment: WGTRAIN (the binary; default build/wgtrain next to hpc/).
set -euo pipefail

log() { echo "launch.sh [${WG_LOG_TAG:-}] $(date '+%F %T') $*"; }
die() { echo "launch.sh: error: $*" >&2; exit 2; }
usage() { sed -n '7,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

# ---- where are we? (inside a batch job the script is a copy in Slurm's spool) ----
find_hpc_dir() {
  local d cmd
  d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [[ -d $d/sites ]]; then echo "$d"; return; fi
  if [[ -n ${WG_HPC_DIR:-} && -d ${WG_HPC_DIR}/sites ]]; then echo "$WG_HPC_DIR"; return; fi
  if [[ -n ${SLURM_JOB_ID:-} ]] && command -v scontrol >/dev/null; then
    cmd=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | sed -n 's/^ *Command=\([^ ]*\).*/\1/p' | head -n 1)
    if [[ -n $cmd && -d $(dirname "$cmd")/sites ]]; then (cd "$(dirname "$cmd")" && pwd); return; fi
  fi
  if [[ -n ${SLURM_SUBMIT_DIR:-} && -d ${SLURM_SUBMIT_DIR}/hpc/sites ]]; then echo "$SLURM_SUBMIT_DIR/hpc"; return; fi
  die "cannot find the hpc/ folder (set WG_HPC_DIR)"
}
hpc_dir=$(find_hpc_dir)
repo_dir=$(dirname "$hpc_dir")

# ---- arguments ----
time_min="" site=${WG_SITE:-} requeue=0 run_id="" ntasks="" nodes="" gpus_per_node=""
ntasks_per_node="" partition="" account="" local_mode=0
configs=() sets=()
need() { [[ $# -ge 2 && -n $2 ]] || die "option $1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --time) need "$@"; time_min=$2; shift 2 ;;
    --config) need "$@"; configs+=("$2"); shift 2 ;;
    --set) need "$@"; [[ $2 == *=* ]] || die "--set needs KEY=VALUE, got '$2'"; sets+=("$2"); shift 2 ;;
    --requeue) requeue=1; shift ;;
    --run-id) need "$@"; run_id=$2; shift 2 ;;
    --site) need "$@"; site=$2; shift 2 ;;
    --ntasks) need "$@"; ntasks=$2; shift 2 ;;
    --nodes) need "$@"; nodes=$2; shift 2 ;;
    --gpus-per-node) need "$@"; gpus_per_node=$2; shift 2 ;;
    --ntasks-per-node) need "$@"; ntasks_per_node=$2; shift 2 ;;
    --partition) need "$@"; partition=$2; shift 2 ;;
    --account) need "$@"; account=$2; shift 2 ;;
    --local) local_mode=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
for pair in "--ntasks:$ntasks" "--nodes:$nodes" "--gpus-per-node:$gpus_per_node" "--ntasks-per-node:$ntasks_per_node"; do
  v=${pair#*:}
  [[ -z $v ]] || { is_uint "$v" && ((v > 0)); } || die "${pair%%:*} must be a positive integer, got '$v'"
done

# ---- site ----
[[ -n $site ]] || site=default
site_file=$hpc_dir/sites/$site.sh
[[ -f $site_file ]] || site_file=$hpc_dir/sites/default.sh
WG_TIME_CAP="" WG_ACCOUNT=${WG_ACCOUNT:-} WG_PARTITION=${WG_PARTITION:-}
WG_SBATCH_EXTRA=() WG_MODULES=()
# shellcheck source=/dev/null
source "$site_file"

if [[ -n $time_min ]]; then
  { is_uint "$time_min" && ((10#$time_min > 0)); } || die "--time must be a whole number of minutes, got '$time_min'"
  time_min=$((10#$time_min))
  if [[ -n ${WG_TIME_CAP:-} ]] && ((time_min > WG_TIME_CAP)); then
    die "--time $time_min exceeds the cap of site '$site' ($WG_TIME_CAP minutes, $site_file)"
  fi
fi
abs_configs=()
for c in "${configs[@]}"; do
  [[ -f $c ]] || die "config file not found: $c"
  abs_configs+=("$(cd "$(dirname "$c")" && pwd)/$(basename "$c")")
done
partition=${partition:-$WG_PARTITION}
account=${account:-$WG_ACCOUNT}

# Everything for the script's own arguments inside the job.
job_args=(--site "$site")
[[ -z $time_min ]] || job_args+=(--time "$time_min")
for c in "${abs_configs[@]}"; do job_args+=(--config "$c"); done
for s in "${sets[@]}"; do job_args+=(--set "$s"); done
((requeue == 0)) || job_args+=(--requeue)
[[ -z $run_id ]] || job_args+=(--run-id "$run_id")

# ---- mode 2: login node, submit ourselves ----
if [[ -z ${SLURM_JOB_ID:-} ]] && ((local_mode == 0)) && command -v sbatch >/dev/null; then
  # shellcheck disable=SC2054  # the commas belong to --export
  sb=(sbatch --parsable --export=ALL,WG_HPC_DIR="$hpc_dir")
  [[ -z $time_min ]] || sb+=(--time="$time_min")
  [[ -z $nodes ]] || sb+=(--nodes="$nodes")
  [[ -z $gpus_per_node ]] || sb+=(--gpus-per-node="$gpus_per_node")
  [[ -z $ntasks_per_node ]] || sb+=(--ntasks-per-node="$ntasks_per_node")
  [[ -z $ntasks ]] || sb+=(--ntasks="$ntasks")
  [[ -z $partition ]] || sb+=(--partition="$partition")
  [[ -z $account ]] || sb+=(--account="$account")
  ((requeue == 0)) || sb+=(--requeue)
  sb+=("${WG_SBATCH_EXTRA[@]}")
  self=$hpc_dir/launch.sh
  WG_LOG_TAG="site $site"
  log "submitting: ${sb[*]} $self ${job_args[*]}"
  out=$("${sb[@]}" "$self" "${job_args[@]}") || die "sbatch failed"
  jobid=${out%%;*}
  log "submitted Slurm job $jobid (run id ${run_id:-slurm-$jobid})"
  exit 0
fi

# ---- modes 1 and 3: run ----
if ((${#WG_MODULES[@]})); then
  if ! type module >/dev/null 2>&1; then
    for f in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
      # shellcheck source=/dev/null
      [[ -f $f ]] && { source "$f"; break; }
    done
  fi
  if type module >/dev/null 2>&1; then
    module load "${WG_MODULES[@]}"
  else
    echo "launch.sh: warning: no 'module' command; not loading ${WG_MODULES[*]}" >&2
  fi
fi
wgtrain=${WGTRAIN:-$repo_dir/build/wgtrain}
[[ -x $wgtrain ]] || die "trainer not found or not executable: $wgtrain (set WGTRAIN)"
if [[ $EUID -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

in_slurm=0
[[ -n ${SLURM_JOB_ID:-} ]] && ((local_mode == 0)) && in_slurm=1
if [[ -z $run_id ]]; then
  if ((in_slurm)); then run_id=slurm-$SLURM_JOB_ID; else run_id=local-$(date +%Y%m%d-%H%M%S)-$$; fi
fi
# The run directory: run_root from --set, else from the last config that sets it, else ./runs.
run_root=""
for s in "${sets[@]}"; do [[ $s == run_root=* ]] && run_root=${s#run_root=}; done
if [[ -z $run_root ]]; then
  for c in "${abs_configs[@]}"; do
    r=$(sed -n 's/^run_root:[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$c" | tail -n 1 | tr -d "\"'")
    [[ -z $r ]] || run_root=$r
  done
fi
run_root=${run_root:-runs}
[[ $run_root == /* ]] || run_root=$PWD/$run_root
run_dir=$run_root/$run_id
restart=${SLURM_RESTART_COUNT:-0}
if ((in_slurm)); then WG_LOG_TAG="job $SLURM_JOB_ID run $run_id"; else WG_LOG_TAG="local run $run_id"; fi

mkdir -p "$run_dir/launch"
for c in "${abs_configs[@]}"; do cp -f "$c" "$run_dir/launch/"; done
printf '%q ' "$0" "${job_args[@]}" >"$run_dir/launch/command.txt"; echo >>"$run_dir/launch/command.txt"

# Lower the job's own limit to --time.
if ((in_slurm)) && [[ -n $time_min ]]; then
  tl=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/.*TimeLimit=\([^ ]*\).*/\1/p' | head -n 1)
  cur=""
  if [[ $tl =~ ^(([0-9]+)-)?([0-9]+):([0-9]+):([0-9]+)$ ]]; then
    cur=$(( ${BASH_REMATCH[2]:-0} * 1440 + 10#${BASH_REMATCH[3]} * 60 + 10#${BASH_REMATCH[4]} + (10#${BASH_REMATCH[5]} > 0) ))
  elif [[ $tl =~ ^([0-9]+):([0-9]+)$ ]]; then
    cur=$(( 10#${BASH_REMATCH[1]} + (10#${BASH_REMATCH[2]} > 0) ))
  fi
  if [[ $tl == UNLIMITED || $tl == INFINITE ]] || { [[ -n $cur ]] && ((cur > time_min)); }; then
    if scontrol update JobId="$SLURM_JOB_ID" TimeLimit="$time_min"; then
      log "job time limit lowered from $tl to $time_min min"
    else
      log "warning: could not lower the job time limit ($tl) to $time_min min"
    fi
  fi
fi

# Ranks and threads. Threads per rank: SLURM_CPUS_PER_TASK (sbatch -c), else
# the CPUs per node shared by the ranks on a node. Inside Slurm those are the
# CPUs the job holds on a node (the fewest over its nodes), not the node's
# cores: a job without --exclusive may hold only part of the node, and srun
# gets --cpus-per-task=<threads> (see the step below), which must fit in it.
job_node_cpus() {  # SLURM_JOB_CPUS_PER_NODE, e.g. "72(x2),36": the smallest count; else SLURM_CPUS_ON_NODE
  local part n min="" parts=()
  IFS=, read -ra parts <<<"${SLURM_JOB_CPUS_PER_NODE:-}"
  for part in "${parts[@]}"; do
    n=${part%%(*}
    if is_uint "$n" && { [[ -z $min ]] || ((n < min)); }; then min=$n; fi
  done
  if [[ -z $min ]] && is_uint "${SLURM_CPUS_ON_NODE:-}"; then min=$SLURM_CPUS_ON_NODE; fi
  echo "$min"
}
node_cpus=""
if ((in_slurm)); then
  nranks=${SLURM_NTASKS:-1}
  nnodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
  per_node=$(( (nranks + nnodes - 1) / nnodes ))
  node_cpus=$(job_node_cpus)
else
  nranks=${ntasks:-1}
  per_node=$nranks
fi
[[ -n $node_cpus ]] || node_cpus=$(nproc --all)
if is_uint "${SLURM_CPUS_PER_TASK:-}" && ((SLURM_CPUS_PER_TASK > 0)); then
  threads=$SLURM_CPUS_PER_TASK
else
  threads=$(( node_cpus / per_node ))
  ((threads > 0)) || threads=1   # more ranks than CPUs (--overcommit)
fi
train=("$wgtrain")
for c in "${abs_configs[@]}"; do train+=(--config "$c"); done
train+=(--set run_root="$run_root" --set run_id="$run_id" --set num_threads="$threads")
[[ -z $time_min ]] || train+=(--set time_limit_minutes="$time_min")
[[ -z ${WG_FILE_SD_DIR:-} ]] || train+=(--set telemetry.file_sd_dir="$WG_FILE_SD_DIR")
for s in "${sets[@]}"; do train+=(--set "$s"); done

# ---- the step, with signal forwarding ----
step_pid="" signalled="" step_log=$run_dir/launch/step-${SLURM_JOB_ID:-local}-$restart.log
# shellcheck disable=SC2317  # called from the traps
forward() {  # $1: the signal that reached us
  signalled=$1
  log "got SIG$1: asking every rank to stop at an agreed step and save"
  if [[ -n $step_pid ]] && kill -0 "$step_pid" 2>/dev/null; then
    kill -USR1 "$step_pid" 2>/dev/null || true
  fi
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

run_step() {  # LOG CMD...: runs CMD in the background, output to stdout and LOG; returns its exit code
  local rc=0 tee_fd tee_pid out=$1
  shift
  # tee ignores TERM/USR1: at the time limit Slurm signals every process, and
  # a dead tee would kill the ranks with SIGPIPE while they save.
  exec {tee_fd}> >(trap '' TERM USR1 INT; exec tee -a "$out")
  tee_pid=$!
  "$@" >&"$tee_fd" 2>&1 {tee_fd}>&- &
  step_pid=$!
  [[ -z $signalled ]] || kill -USR1 "$step_pid" 2>/dev/null || true
  while true; do
    rc=0
    wait "$step_pid" || rc=$?
    kill -0 "$step_pid" 2>/dev/null || break   # a trap interrupted wait: wait again
  done
  step_pid=""
  # The step's last lines ("stopped at step", which decides the requeue, and
  # the summary) are printed as it exits: let tee write them before the log
  # is read. At most 10 s, should a leftover process still hold the pipe.
  exec {tee_fd}>&-
  for _ in $(seq 200); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.05; done
  return "$rc"
}

log "run $run_id in $run_dir: $nranks rank(s), $threads thread(s) per rank, site $site, restart $restart"
# When does a failed srun step fall back to mpirun? Only when srun could not
# start MPI ranks at all, never when wgtrain started and failed (exit 2:
# configuration or data; 1: runtime, NCCL, a crashed rank): rerunning those
# would only bury the first error under a second run's.
# Neither srun's exit code nor the log tells the two apart: srun exits 1 both
# for its own errors (no step created, no pmix plugin) and when a rank exited
# 1; wgtrain logs nothing before MPI_Init has returned, and its first lines
# (loading the configuration) carry no marker; its " rank(s) on " line comes
# only after data loading, NCCL setup and planning, which can fail themselves.
# So after a failed step (unless USR1/TERM reached us) the same srun command
# starts `wgtrain --version` on the same ranks: that runs MPI_Init and an
# allgather over all ranks (DistContext), prints the version and exits 0; it
# reads no configuration and no data.
#  - the check fails too: srun --mpi=pmix cannot start MPI ranks here (step
#    not created, PMIx wire-up failing), so the step failed while starting
#    the ranks, before wgtrain's own work: it runs again under mpirun inside
#    the allocation;
#  - the check succeeds: the ranks did start; the step's exit code stands;
#  - USR1/TERM arrives during the check: the job is stopping; exit code stands.
# The check's output goes to launch/srun-check-JOB-RESTART.log. Its time
# limit is WG_SRUN_CHECK_TIMEOUT seconds (default 180; a check that times
# out counts as failed).
mpirun_step() {  # SRUN_CPUS_PER_TASK (site files) must not reach the srun that starts mpirun's daemons
  run_step "$step_log" env -u SRUN_CPUS_PER_TASK mpirun -np "$nranks" --bind-to none --oversubscribe "${train[@]}"
}
rc=0
if ((in_slurm)); then
  launcher=srun
  if ! srun --mpi=list 2>&1 | grep -q pmix; then
    log "srun has no pmix plugin; using mpirun inside the allocation"
    launcher=mpirun
  fi
  if [[ $launcher == srun ]]; then
    # Slurm >= 22.05 no longer hands sbatch's -c to srun: pass the threads per rank on.
    srun_cmd=(srun --mpi=pmix --kill-on-bad-exit=1 --ntasks="$nranks" --cpus-per-task="$threads")
    log "starting: ${srun_cmd[*]} $wgtrain ..."
    run_step "$step_log" "${srun_cmd[@]}" "${train[@]}" || rc=$?
    if ((rc != 0)) && [[ -z $signalled ]]; then
      check_log=$run_dir/launch/srun-check-${SLURM_JOB_ID}-$restart.log check_rc=0
      log "the srun step failed (exit $rc); checking whether srun can start the ranks at all ($wgtrain --version)"
      check_s=${WG_SRUN_CHECK_TIMEOUT:-180}
      { is_uint "$check_s" && ((check_s > 0)); } || check_s=180
      run_step "$check_log" timeout -k 10 "$check_s" "${srun_cmd[@]}" "$wgtrain" --version ||
        check_rc=$?
      if [[ -n $signalled ]]; then
        log "got SIG$signalled during the check: stopping, not rerunning (step exit $rc)"
      elif ((check_rc != 0)); then
        log "srun --mpi=pmix failed to start the ranks (step exit $rc, check exit $check_rc); retrying with mpirun"
        launcher=mpirun rc=0
      else
        log "srun started the ranks (check passed): wgtrain itself failed with exit $rc; not rerunning"
      fi
    fi
  fi
  if [[ $launcher == mpirun ]]; then
    mpirun_step || rc=$?
  fi
else
  if ((nranks > 1)); then
    mpirun_step || rc=$?
  else
    run_step "$step_log" "${train[@]}" || rc=$?
  fi
fi

stopped=0
grep -q "stopped at step" "$step_log" 2>/dev/null && stopped=1
log "trainer exited with code $rc$([[ $stopped == 1 ]] && echo ", $(grep -o 'stopped at step [0-9]*' "$step_log" | tail -n 1)")"
if ((rc == 0 && stopped && requeue && in_slurm)); then
  log "requeueing job $SLURM_JOB_ID; the next run resumes run $run_id"
  trap - TERM USR1
  scontrol requeue "$SLURM_JOB_ID" || { log "scontrol requeue failed"; exit 1; }
  exit 0
fi
exit "$rc"
