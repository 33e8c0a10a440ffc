#!/usr/bin/env bash
# End to end: a 2-rank training run and a real Prometheus (and Pushgateway),
# all on 127.0.0.1 with free ports, started here and stopped by PID.
# Prometheus finds the run through its file_sd target file; then:
#  - the run's /metrics passes `promtool check metrics` during the run, and
#    its final exposition (run_dir/metrics.prom) at the end;
#  - every metric documented in monitoring/METRICS.md is in Prometheus, with
#    both ranks where it is per rank (the Pushgateway's after the end);
#  - every PromQL expression of the dashboards returns data and every alert
#    expression evaluates (monitoring/check_promql.py);
#  - the run is stopped with USR1 once these checks are done (a fixed 7000
#    steps took 300 s on a slow machine); the file_sd target is removed at
#    the end, the job outcome (stopped, and its step) is pushed;
#  - a second run whose port is taken trains anyway, with one warning;
#  - a third run that fails in a step pushes "failed" and its finished steps.
#   tests/telemetry/e2e_prometheus.sh WGTRAIN
set -euo pipefail
wgtrain=$1
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "---- $f"; tail -n 25 "$f"; done; exit 1; }
get() { $py -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
query() {  # PromQL -> JSON result list
  $py - "$prom" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
print(json.dumps(json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]))
PY
}

mkdir -p "$tmp/file_sd" "$tmp/runs"
sed -e "s|@FILE_SD_DIR@|$tmp/file_sd|g" -e "s|@RULES@|$src/monitoring/alerts.yml|g" \
    "$src/monitoring/prometheus.test.yml.tmpl" > "$tmp/prometheus.yml"
# Each on a free port (another one if the port was taken), ready within 30 s.
source "$src/tests/common/serve_on_free_port.sh"
rc=0
serve_on_free_port "$tmp/prometheus.log" prometheus --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/data@TRY@" --web.listen-address="127.0.0.1:@PORT@" || rc=$?
pids+=("$SERVE_PID")
((rc == 0)) || fail "Prometheus was not ready ($(serve_failure "$rc"))"
port=$SERVE_PORT
# In memory only: Debian's default persistence file is shared by every
# Pushgateway on the machine and would bring other runs' pushes.
serve_on_free_port "$tmp/pushgateway.log" prometheus-pushgateway --web.listen-address="127.0.0.1:@PORT@" \
    --persistence.file= || rc=$?
pids+=("$SERVE_PID")
((rc == 0)) || fail "the Pushgateway was not ready ($(serve_failure "$rc"))"
gw_port=$SERVE_PORT
prom="http://127.0.0.1:$port"; gw="http://127.0.0.1:$gw_port"

# About 45 s of training here: long enough for discovery and the checks.
mpirun -np 2 --oversubscribe --bind-to none "$wgtrain" --config "$src/config/cpu_tiny.yml" \
    --set run_root="$tmp/runs" --set run_id=e2e --set num_mini_epochs=700 --set samples_per_validation=4 \
    --set train_log_freq.metrics=5 --set train_log_freq.terminal=200 \
    --set telemetry.address=127.0.0.1 --set telemetry.file_sd_dir="$tmp/file_sd" \
    --set telemetry.pushgateway="$gw" > "$tmp/train.log" 2>&1 &
train=$!
pids+=($train)

for _ in $(seq 100); do ls "$tmp"/file_sd/*.json >/dev/null 2>&1 && break; sleep 0.2; done
target=$($py -c 'import glob,json; print(json.load(open(glob.glob(sys.argv[1]+"/*.json")[0]))[0]["targets"][0])' "$tmp/file_sd" 2>/dev/null ||
         $py -c 'import glob,json,sys; print(json.load(open(glob.glob(sys.argv[1]+"/*.json")[0]))[0]["targets"][0])' "$tmp/file_sd") ||
  fail "no file_sd target file"
echo "run announced at $target"

# During the run: the exposition is valid and lint-free. The per-rank
# series appear with the first gathered window (step 5 here): wait for it,
# as a slow or loaded machine may take longer than a few seconds (seen on
# a LibTorch 2.6 build on the reference BLAS, with both cores busy).
for _ in $(seq 240); do
  get "http://$target/metrics" 2>/dev/null | grep -q '^wgtrain_steps_total' && break
  sleep 0.5
done
get "http://$target/metrics" > "$tmp/live.prom" || fail "cannot scrape $target"
lint=$(promtool check metrics < "$tmp/live.prom" 2>&1) || fail "promtool check metrics (during the run): $lint"
[[ -z "$lint" ]] || fail "promtool lint (during the run): $lint"
echo "ok: /metrics during the run passes promtool check metrics"

# Hostile and busy clients while training runs (bounded): malformed and
# oversized requests, then 8 threads x 20 scrapes; each scrape must succeed;
# then 64 clients that never finish their request headers, and a scrape
# that must still be answered within 1 s. (That wgtrain, which loads
# LibTorch, serves at all shows civetweb's threads got the stack floor.)
$py - "$target" <<'PY' || fail "endpoint under malformed, oversized, concurrent and half-open requests"
import socket, sys, threading, time, urllib.request
host, port = sys.argv[1].rsplit(":", 1)
def raw(data):
    s = socket.create_connection((host, int(port)), timeout=3)
    try:
        s.sendall(data); s.recv(256)
    except OSError:
        pass
    finally:
        s.close()
for bad in [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET /metrics HTTP/9.9\r\n\r\n", b"\x00\xff" * 100,
            b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (1 << 20) + b"\r\n\r\n"] * 4:
    raw(bad)
errors = []
def scrape():
    for _ in range(20):
        # A broken transfer is tried again twice, as Prometheus tries a failed scrape again: with
        # both cores training, civetweb can drop a connection it could not serve in time.
        for attempt in range(3):
            try:
                body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
                if b"wgtrain_steps_total" not in body: errors.append("no wgtrain_steps_total")
                break
            except Exception as e:
                if attempt == 2: errors.append(repr(e))
threads = [threading.Thread(target=scrape) for _ in range(8)]
[t.start() for t in threads]; [t.join() for t in threads]
print(f"ok: 20 malformed/oversized requests, 160 concurrent scrapes, {len(errors)} failures")
if errors: sys.exit(f"the first failures: {errors[:5]}")
half = []
for _ in range(64):
    s = socket.create_connection((host, int(port)), timeout=3)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    half.append(s)
time.sleep(0.2)
t0 = time.monotonic()
body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read()
took = time.monotonic() - t0
for s in half: s.close()
print(f"ok: a scrape with 64 half-open clients took {took * 1000:.0f} ms")
sys.exit(0 if took < 1 and b"wgtrain_steps_total" in body else 1)
PY

# Prometheus sees both ranks.
for _ in $(seq 60); do
  n=$(query 'count(wgtrain_steps_total{run_id="e2e"})' | $py -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["value"][1] if r else 0)')
  [[ "$n" == "2" ]] && break; sleep 0.5
done
[[ "$n" == "2" ]] || fail "Prometheus did not find both ranks (found $n)"
sleep 4  # a few more scrapes, for rate() over the dashboards' windows

# Every documented metric (the Pushgateway's are checked after the end).
names=$(grep -oE 'wgtrain_[a-z_]+' "$src/monitoring/METRICS.md" | sort -u | grep -vE '_bucket$|^wgtrain_job_(end_timestamp_seconds|status|last_step)$')
for name in $names; do
  sel=$name; [[ $name == wgtrain_step_duration_seconds ]] && sel=${name}_count
  res=$(query "$sel")
  $py - "$name" "$res" <<'PY' || fail "metric $name: $res"
import json, sys
name, res = sys.argv[1], json.loads(sys.argv[2])
if not res: sys.exit(f"{name}: no data")
ranks = {r["metric"]["rank"] for r in res if "rank" in r["metric"]}
if ranks and ranks != {"0", "1"} and name != "wgtrain_job_memory_peak_max_bytes":
    sys.exit(f"{name}: ranks {sorted(ranks)}")
print(f"ok: {name}" + (f" (ranks {', '.join(sorted(ranks))})" if ranks else ""))
PY
done

# Every dashboard expression returns data; every alert expression evaluates.
$py "$src/monitoring/check_promql.py" --prometheus "$prom" --wait 20 \
    --dashboard "$src/monitoring/grafana/dashboards/wgtrain.json" --rules "$src/monitoring/alerts.yml" \
    > "$tmp/promql.log" 2>&1 || fail "check_promql.py: $(tail -n 20 "$tmp/promql.log")"
echo "ok: every dashboard and alert expression ($(grep -c . "$tmp/promql.log") lines of check_promql output)"

# Training was not disturbed; then it is stopped with USR1 (mpirun passes it
# to both ranks: a clean stop with a checkpoint), unless it has finished its
# 7000 steps already. At the end: target removed, outcome pushed.
if kill -0 "$train" 2>/dev/null; then kill -USR1 "$train" || true; fi
wait $train || fail "training exited with $?"
if stop=$(grep -oE "stopped at step [0-9]+" "$tmp/train.log" | grep -oE "[0-9]+$"); then
  status=stopped last=$stop
  grep -q "summary: $stop steps" "$tmp/train.log" || fail "no summary of the $stop steps before the stop"
  echo "ok: training stopped cleanly on USR1 at step $stop"
else
  status=completed last=7000
  grep -q "summary: 7000 steps" "$tmp/train.log" || fail "training neither stopped on USR1 nor finished its 7000 steps"
fi
ls "$tmp"/file_sd/*.json >/dev/null 2>&1 && fail "file_sd target not removed at the end"
lint=$(promtool check metrics < "$tmp/runs/e2e/metrics.prom" 2>&1) || fail "promtool check metrics (end): $lint"
[[ -z "$lint" ]] || fail "promtool lint (end): $lint"
echo "ok: final exposition passes promtool check metrics; file_sd target removed"
get "$gw/metrics" > "$tmp/gw.prom"
for m in "wgtrain_job_status{instance=\"e2e\",job=\"wgtrain\",status=\"$status\"} 1" "wgtrain_job_last_step{instance=\"e2e\",job=\"wgtrain\"} $last" 'wgtrain_job_end_timestamp_seconds{instance="e2e",job="wgtrain"}'; do
  grep -qF "$m" "$tmp/gw.prom" || fail "Pushgateway lacks: $m"
done
echo "ok: job outcome pushed to the Pushgateway"

# A port that is taken, an unwritable file_sd directory, a Pushgateway that is down: training goes on.
hold_refusing_port || fail "could not hold a port for the Pushgateway that is down"
pids+=("$REFUSING_PID")
"$wgtrain" --config "$src/config/cpu_tiny.yml" --set run_root="$tmp/runs" --set run_id=busy \
    --set telemetry.address=127.0.0.1 --set telemetry.port="$port" --set telemetry.file_sd_dir=/proc/wg_no \
    --set telemetry.pushgateway="http://127.0.0.1:$REFUSING_PORT" > "$tmp/busy.log" 2>&1 || fail "run with a busy port failed"
for w in "telemetry (http): cannot serve /metrics" "telemetry (pushgateway): push to" "summary: 20 steps"; do
  grep -qF "$w" "$tmp/busy.log" || fail "busy-port run: no '$w'"
done
grep -q 'wgtrain_telemetry_failures_total{kind="http"} 1' "$tmp/runs/busy/metrics.prom" || fail "http failure not counted"
grep -q 'wgtrain_telemetry_failures_total{kind="pushgateway"} 1' "$tmp/runs/busy/metrics.prom" || fail "pushgateway failure not counted"
echo "ok: busy port and unreachable Pushgateway: warnings, counted, training finished"

# A run that fails in a step (fault injection on rank 0 at step 7, a
# checkpoint at step 5): rank 0 pushes the outcome "failed" with the 7 steps
# it finished, and removes its target.
if "$wgtrain" --config "$src/config/cpu_tiny.yml" --set run_root="$tmp/runs" --set run_id=fault \
    --set telemetry.address=127.0.0.1 --set telemetry.file_sd_dir="$tmp/file_sd" --set telemetry.pushgateway="$gw" \
    --set train_log_freq.checkpoint=5 \
    --set fault_injection.rank=0 --set fault_injection.step=7 > "$tmp/fault.log" 2>&1; then
  fail "the run with a fault injected at step 7 did not fail"
fi
get "$gw/metrics" > "$tmp/gw_fault.prom"
for m in 'wgtrain_job_status{instance="fault",job="wgtrain",status="failed"} 1' \
         'wgtrain_job_last_step{instance="fault",job="wgtrain"} 7'; do
  grep -qF "$m" "$tmp/gw_fault.prom" || fail "Pushgateway lacks, after the failed run: $m"
done
[[ -e "$tmp/file_sd/wgtrain-fault.json" ]] && fail "the failed run left its file_sd target"
echo "ok: a run failing in a step pushes failed with its 7 finished steps and removes its target"

# Its restart with another batch cannot resume (the checkpoint's step numbers
# count batches of 2): failed, and the run still continues at step 5, its
# checkpoint's, not 0.
if "$wgtrain" --config "$src/config/cpu_tiny.yml" --set run_root="$tmp/runs" --set run_id=fault \
    --set telemetry.address=127.0.0.1 --set telemetry.file_sd_dir="$tmp/file_sd" --set telemetry.pushgateway="$gw" \
    --set batch_size_per_gpu=1 > "$tmp/fault_resume.log" 2>&1; then
  fail "the restart with another batch resumed"
fi
grep -q "was written by a run of 1 rank(s) with batch_size_per_gpu 2" "$tmp/fault_resume.log" ||
  fail "the restart with another batch failed for another reason: $(tail -3 "$tmp/fault_resume.log")"
get "$gw/metrics" > "$tmp/gw_fault_resume.prom"
for m in 'wgtrain_job_status{instance="fault",job="wgtrain",status="failed"} 1' \
         'wgtrain_job_last_step{instance="fault",job="wgtrain"} 5'; do
  grep -qF "$m" "$tmp/gw_fault_resume.prom" || fail "Pushgateway lacks, after the failed resume: $m"
done
echo "ok: a resume that fails pushes failed with the step its newest checkpoint continues at"
echo "e2e_prometheus: all checks passed"
