#!/usr/bin/env bash
# End to end test of hpc/launch.sh on a real one-node Slurm cluster that this
# test starts (tests/hpc/slurm_cluster.sh) and stops again.
#   tests/hpc/launch_test.sh WGTRAIN_DIR      # the folder that holds wgtrain
# a) sbatch --wait -n 2 hpc/launch.sh ...: exit 0, both ranks trained, and
#    the metrics of both ranks reached this test's Prometheus (file_sd)
# b) --requeue, then scancel --batch --signal=USR1: checkpoint, requeue, the
#    second run resumes at the saved step; its loss curve (both parts) equals
#    an uninterrupted run's
# c) bad --time, missing config, unknown option, non-numeric --time: clear
#    error, nothing submitted
# d) login-node mode: hpc/launch.sh submits itself with sbatch
# e) the srun -> mpirun fallback: a configuration error (wgtrain exit 2) is
#    not rerun; a real srun launch failure is; sbatch -c N reaches srun as
#    --cpus-per-task (a, d: without -c, the threads per rank fit the CPUs
#    the job holds, or srun could not create the step)
set -euo pipefail
wgdir=$(cd "${1:?usage: $0 WGTRAIN_DIR}" && pwd)
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export WGTRAIN=$wgdir/wgtrain
[[ -x $WGTRAIN ]] || { echo "FAIL: no wgtrain in $wgdir"; exit 1; }
unset SLURM_JOB_ID SLURM_JOBID WG_SITE
launch=$src/hpc/launch.sh
cfg=$src/config/cpu_tiny.yml

tmp="$(mktemp -d)"
chmod 0755 "$tmp"   # the munge user must reach the cluster's socket folder
prom_pid=""
cleanup() {
  [[ -n $prom_pid ]] && { kill "$prom_pid" 2>/dev/null || true; wait "$prom_pid" 2>/dev/null || true; }
  "$src/tests/hpc/slurm_cluster.sh" stop "$tmp/cluster" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log "$tmp"/*.err; do [[ -f $f ]] && { echo "---- $f"; tail -n 25 "$f"; }; done
  for f in "$tmp"/cluster/log/*.log; do [[ -f $f ]] && { echo "---- $f"; tail -n 10 "$f"; }; done
  exit 1
}

timeout 60 "$src/tests/hpc/slurm_cluster.sh" start "$tmp/cluster" || fail "cluster did not start"
export SLURM_CONF=$tmp/cluster/slurm.conf
cd "$tmp"
common=(--set run_root="$tmp/runs" --set telemetry.enabled=false)
job_field() { timeout 10 scontrol show job "$1" 2>/dev/null | grep -oE "$2=[^ ]*" | head -n 1 | cut -d= -f2; }

# ---- a) a 2-rank job through sbatch --wait, watched by a real Prometheus ----
py=/usr/bin/python3
mkdir -p "$tmp/file_sd"
sed -e "s|@FILE_SD_DIR@|$tmp/file_sd|g" -e "s|@RULES@|$src/monitoring/alerts.yml|g" \
    "$src/monitoring/prometheus.test.yml.tmpl" > "$tmp/prometheus.yml"
# On a free port (another one if the port was taken), ready within 30 s.
source "$src/tests/common/serve_on_free_port.sh"
rc=0
serve_on_free_port "$tmp/prometheus.err" prometheus --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/prom/@TRY@" --web.listen-address="127.0.0.1:@PORT@" || rc=$?
prom_pid=$SERVE_PID prom_port=$SERVE_PORT
((rc == 0)) || fail "a) Prometheus was not ready ($(serve_failure "$rc"))"
timeout 180 sbatch --wait -n 2 --overcommit -o "$tmp/a.log" "$launch" --time 5 --config "$cfg" \
  --set run_root="$tmp/runs" --set num_mini_epochs=50 --set telemetry.address=127.0.0.1 \
  --set telemetry.file_sd_dir="$tmp/file_sd" >"$tmp/a.out" 2>&1 || rc=$?
((rc == 0)) || fail "a) sbatch --wait exited $rc: $(cat "$tmp/a.out")"
grep -q "2 rank(s)" "$tmp/a.log" || fail "a) the trainer did not run with 2 ranks"
grep -q "summary:" "$tmp/a.log" || fail "a) no summary line"
ja=$(grep -oE "[0-9]+$" "$tmp/a.out" | head -n 1)
grep -q "launch.sh \[job $ja run slurm-$ja\]" "$tmp/a.log" || fail "a) job id / run id missing from the launcher's log lines"
grep -q "time limit lowered .* to 5 min" "$tmp/a.log" || fail "a) the job's time limit was not lowered to --time"
grep -q "starting: srun .* --cpus-per-task=1 " "$tmp/a.log" || fail "a) srun was not given --cpus-per-task=1"
! grep -q "checking whether srun\|retrying with mpirun" "$tmp/a.log" || fail "a) the srun step failed (fallback taken)"
[[ -f $tmp/runs/slurm-$ja/launch/cpu_tiny.yml && -f $tmp/runs/slurm-$ja/config.yml ]] || fail "a) no config snapshot in the run folder"
ranks=$($py - "$prom_port" "$ja" <<'PY'
import json, sys, urllib.parse, urllib.request
q = f'count(count_over_time(wgtrain_steps_total{{slurm_job_id="{sys.argv[2]}"}}[10m]))'
url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": q})
r = json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
print(r[0]["value"][1] if r else 0)
PY
) || ranks=0
[[ $ranks == 2 ]] || fail "a) Prometheus did not get both ranks' metrics of job $ja (found $ranks)"
echo "ok: a) 2-rank job $ja ran through sbatch --wait, exit 0, run slurm-$ja, config snapshot written, both ranks' metrics in Prometheus"

# ---- b) stop on USR1, requeue, resume; the loss curve equals an uninterrupted run's ----
long=(--config "$cfg" "${common[@]}" --set num_mini_epochs=60 --set train_log_freq.metrics=1
  --set train_log_freq.terminal=500 --set train_log_freq.checkpoint=100000)
rc=0
timeout 180 sbatch --wait -n 2 --overcommit -o "$tmp/ref.log" "$launch" --time 5 --run-id ref "${long[@]}" \
  >"$tmp/ref.out" 2>&1 || rc=$?
((rc == 0)) || fail "b) uninterrupted reference run exited $rc"
jb=$(sbatch --parsable -n 2 --overcommit -o "$tmp/b.log" "$launch" --time 5 --requeue "${long[@]}") ||
  fail "b) sbatch failed"
metrics=$tmp/runs/slurm-$jb/metrics.jsonl
for ((i = 0; i < 600; i++)); do   # 60 s: wait until it has trained a few steps
  [[ -f $metrics ]] && (($(wc -l <"$metrics") >= 30)) && break
  sleep 0.1
done
{ [[ -f $metrics ]] && (($(wc -l <"$metrics") >= 30)); } || fail "b) job $jb did not start training within 60 s"
scancel --batch --signal=USR1 "$jb" || fail "b) scancel --signal=USR1 failed"
state="" restarts=""
for ((i = 0; i < 120; i++)); do   # 120 s: stop, requeue (cred_expire=10 s delay), resume, finish
  state=$(job_field "$jb" JobState)
  restarts=$(job_field "$jb" Restarts)
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED || $state == TIMEOUT ]] && break
  sleep 1
done
[[ $state == COMPLETED ]] || fail "b) job $jb ended as '$state' (restarts $restarts)"
[[ $(job_field "$jb" ExitCode) == 0:0 ]] || fail "b) job $jb exit code $(job_field "$jb" ExitCode)"
((restarts == 1)) || fail "b) job $jb restarted $restarts times, expected 1"
stop=$(grep -oE "stopped at step [0-9]+" "$tmp/b.log" | head -n 1 | grep -oE "[0-9]+$") ||
  fail "b) the first run was not stopped by USR1 (finished too early?)"
grep -q "requeueing job $jb" "$tmp/b.log" || fail "b) the launcher did not requeue"
[[ -d $tmp/runs/slurm-$jb/checkpoints/$(printf 'step_%010d' "$stop") ]] || fail "b) no checkpoint for step $stop"
grep -q "resuming from .* at step $stop" "$tmp/b.log" || fail "b) the requeued run did not resume at step $stop"
grep -q "summary:" "$tmp/b.log" || fail "b) no summary"
curve() { /usr/bin/python3 -c 'import json,sys; [print(r["step"], r["loss"]) for r in map(json.loads, open(sys.argv[1]))]' "$1"; }
diff <(curve "$tmp/runs/ref/metrics.jsonl") <(curve "$metrics") >"$tmp/diff.log" ||
  fail "b) stopped+resumed loss curve differs from the uninterrupted one: $(head -5 "$tmp/diff.log")"
echo "ok: b) job $jb stopped at step $stop on USR1, requeued itself, resumed at step $stop and finished;" \
  "loss curve equals the uninterrupted run's ($(wc -l <"$metrics") steps)"

# ---- c) errors before anything is submitted ----
jobs_before=$(timeout 10 squeue -h -o %i | sort | tr '\n' ' ')
last_before=$(timeout 10 scontrol show jobs 2>/dev/null | grep -oE "^JobId=[0-9]+" | cut -d= -f2 | sort -n | tail -n 1)
expect_error() {  # name, pattern, launch.sh arguments...
  local name=$1 pattern=$2 rc=0
  shift 2
  timeout 30 "$launch" "$@" >"$tmp/c.out" 2>"$tmp/c.err" || rc=$?
  ((rc != 0)) || fail "c) $name: exit 0"
  grep -qE -e "$pattern" "$tmp/c.err" || fail "c) $name: no clear error (stderr: $(cat "$tmp/c.err"))"
  echo "ok: c) $name: exit $rc, '$(head -n 1 "$tmp/c.err")'"
}
expect_error "--time above the site cap" "exceeds the cap" --time 100000 --config "$cfg"
expect_error "missing config file" "config file not found: .*nope.yml" --time 5 --config "$tmp/nope.yml"
expect_error "unknown option" "unknown option '--bogus'" --time 5 --config "$cfg" --bogus
expect_error "non-numeric --time" "--time must be a whole number" --time 1h --config "$cfg"
jobs_after=$(timeout 10 squeue -h -o %i | sort | tr '\n' ' ')
last_after=$(timeout 10 scontrol show jobs 2>/dev/null | grep -oE "^JobId=[0-9]+" | cut -d= -f2 | sort -n | tail -n 1)
[[ $jobs_before == "$jobs_after" && $last_before == "$last_after" ]] ||
  fail "c) a job was submitted (queue '$jobs_before' -> '$jobs_after', last id $last_before -> $last_after)"
echo "ok: c) nothing was submitted"

# ---- d) login-node mode: submits itself ----
rc=0
timeout 30 "$launch" --time 5 --ntasks 1 --config "$cfg" "${common[@]}" >"$tmp/d.out" 2>&1 || rc=$?
((rc == 0)) || fail "d) login-node submission exited $rc: $(cat "$tmp/d.out")"
jd=$(sed -n 's/.*submitted Slurm job \([0-9]*\).*/\1/p' "$tmp/d.out")
[[ -n $jd ]] || fail "d) no job id in: $(cat "$tmp/d.out")"
state=""
for ((i = 0; i < 60; i++)); do
  state=$(job_field "$jd" JobState)
  [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
  sleep 1
done
[[ $state == COMPLETED ]] || fail "d) job $jd ended as '$state'"
[[ $(job_field "$jd" TimeLimit) == 00:05:00 ]] || fail "d) --time did not become the job's limit"
grep -q "summary:" "$tmp/wgtrain-$jd.log" || fail "d) no summary in wgtrain-$jd.log"
# One task holds one of the node's CPUs: one thread, and srun -c 1 (-c with the
# node's CPU count would not fit the job: the step would fail, then mpirun).
grep -q "1 rank(s), 1 thread(s) per rank" "$tmp/wgtrain-$jd.log" || fail "d) threads per rank not from the job's CPUs"
grep -q "starting: srun .* --cpus-per-task=1 " "$tmp/wgtrain-$jd.log" || fail "d) srun was not given --cpus-per-task=1"
! grep -q "checking whether srun\|retrying with mpirun" "$tmp/wgtrain-$jd.log" || fail "d) the srun step failed (fallback taken)"
echo "ok: d) login-node mode submitted job $jd (time limit 5 min) and it completed"

# ---- e) srun -> mpirun fallback only when srun cannot start the ranks; -c reaches srun ----
short=(--time 5 --config "$cfg" "${common[@]}" --set num_mini_epochs=2)
# e1) wgtrain starts and fails (configuration error, exit 2): no rerun.
rc=0
timeout 120 sbatch --wait -n 2 --overcommit -o "$tmp/e1.log" "$launch" "${short[@]}" --set num_mini_epochs=0 \
  >"$tmp/e1.out" 2>&1 || rc=$?
((rc == 2)) || fail "e1) a configuration error: sbatch --wait exited $rc, expected wgtrain's 2"
n=$(grep -c "num_mini_epochs must be" "$tmp/e1.log" || true)
((n == 1)) || fail "e1) the configuration error appears $n times, expected once (a rerun?)"
grep -q "srun started the ranks (check passed): wgtrain itself failed with exit 2; not rerunning" "$tmp/e1.log" ||
  fail "e1) the launcher did not say why it does not rerun"
! grep -q "retrying with mpirun" "$tmp/e1.log" || fail "e1) a configuration error was rerun under mpirun"
grep -q "trainer exited with code 2" "$tmp/e1.log" || fail "e1) the launcher did not report exit 2"
echo "ok: e1) configuration error: exit 2, reported once, not rerun under mpirun"
# e2) srun cannot create the step: SLURM_GPUS is srun's input variable for
# --gpus and this cluster has no GPUs, so srun fails before starting any task
# ("Invalid generic resource"), the check too; mpirun (one node: no srun)
# starts the ranks and the run finishes.
rc=0
SLURM_GPUS=1 timeout 120 sbatch --wait -n 2 --overcommit -o "$tmp/e2.log" "$launch" "${short[@]}" \
  >"$tmp/e2.out" 2>&1 || rc=$?
((rc == 0)) || fail "e2) srun launch failure: sbatch --wait exited $rc, expected 0 after the mpirun rerun"
grep -q "srun: error: .*generic resource" "$tmp/e2.log" || fail "e2) srun did not fail as intended"
grep -q "srun --mpi=pmix failed to start the ranks (step exit 1, check exit 1); retrying with mpirun" "$tmp/e2.log" ||
  fail "e2) no fallback to mpirun"
{ grep -q "2 rank(s) on" "$tmp/e2.log" && grep -q "summary:" "$tmp/e2.log"; } || fail "e2) the mpirun rerun did not train"
echo "ok: e2) srun could not create the step: rerun under mpirun, 2 ranks trained, exit 0"
# e3) sbatch -c 2: Slurm >= 22.05 does not hand -c to srun; the launcher does.
rc=0
timeout 120 sbatch --wait -n 1 -c 2 -o "$tmp/e3.log" "$launch" "${short[@]}" >"$tmp/e3.out" 2>&1 || rc=$?
((rc == 0)) || fail "e3) sbatch -c 2 job exited $rc"
grep -q "1 rank(s), 2 thread(s) per rank" "$tmp/e3.log" || fail "e3) threads per rank not from SLURM_CPUS_PER_TASK"
grep -q "starting: srun .* --cpus-per-task=2 " "$tmp/e3.log" || fail "e3) srun was not given --cpus-per-task=2"
! grep -q "checking whether srun\|retrying with mpirun" "$tmp/e3.log" || fail "e3) the srun step failed (fallback taken)"
echo "ok: e3) sbatch -c 2: srun --cpus-per-task=2, 2 threads per rank"
echo "launch_test: all checks passed"
