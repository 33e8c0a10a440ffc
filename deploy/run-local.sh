#!/usr/bin/env bash
# Run Prometheus and the Pushgateway on 127.0.0.1 for local wgtrain runs, with
# monitoring/prometheus.yml and monitoring/alerts.yml.
#
#   deploy/run-local.sh FILE_SD_DIR [STATE_DIR]
#
#   FILE_SD_DIR  directory the trainer writes its target file to: set
#                `telemetry.file_sd_dir: FILE_SD_DIR` in the run's config
#                (created if missing).
#   STATE_DIR    config copy and TSDB (default: $TMPDIR/wgtrain-monitoring).
#
# Environment: PROMETHEUS_PORT (9090), PUSHGATEWAY_PORT (9091),
# RETENTION (15d), PROMETHEUS / PUSHGATEWAY (binaries; Debian names by default).
# Set `telemetry.pushgateway: http://127.0.0.1:$PUSHGATEWAY_PORT` in the run's
# config for the end-of-job push. Stops both services on Ctrl-C (by PID).
set -euo pipefail

usage() { sed -n '2,16p' "$0"; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
[[ "$1" == -h || "$1" == --help ]] && usage

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
file_sd_dir="$(mkdir -p "$1" && cd "$1" && pwd)"
state="${2:-${TMPDIR:-/tmp}/wgtrain-monitoring}"
prom_port="${PROMETHEUS_PORT:-9090}"
pgw_port="${PUSHGATEWAY_PORT:-9091}"
retention="${RETENTION:-15d}"
prometheus="${PROMETHEUS:-prometheus}"
pushgateway="${PUSHGATEWAY:-prometheus-pushgateway}"
command -v "$prometheus" >/dev/null || { echo "run-local: $prometheus not found" >&2; exit 1; }
command -v "$pushgateway" >/dev/null || { echo "run-local: $pushgateway not found" >&2; exit 1; }

# prometheus.yml reads targets/*.json and alerts.yml relative to itself:
# copy both into STATE_DIR and make STATE_DIR/targets point at FILE_SD_DIR.
mkdir -p "$state/data"
sed -e "s|localhost:9091|127.0.0.1:${pgw_port}|" \
    "$repo/monitoring/prometheus.yml" > "$state/prometheus.yml"
cp "$repo/monitoring/alerts.yml" "$state/alerts.yml"
ln -sfn "$file_sd_dir" "$state/targets"
if command -v promtool >/dev/null && ! promtool check config "$state/prometheus.yml" >/dev/null 2>&1; then
  echo "run-local: the generated config does not check:" >&2
  promtool check config "$state/prometheus.yml" >&2 || true
  exit 1
fi

pids=()
stopping=0
stop() {
  trap - INT TERM EXIT
  stopping=1
  echo; echo "run-local: stopping (pids ${pids[*]:-none})"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

"$pushgateway" --web.listen-address="127.0.0.1:${pgw_port}" \
    > "$state/pushgateway.log" 2>&1 &
pids+=($!)
"$prometheus" --config.file="$state/prometheus.yml" \
    --storage.tsdb.path="$state/data" --storage.tsdb.retention.time="$retention" \
    --web.listen-address="127.0.0.1:${prom_port}" --web.enable-lifecycle \
    > "$state/prometheus.log" 2>&1 &
pids+=($!)

cat <<MSG
run-local: Prometheus   http://127.0.0.1:${prom_port}   (log $state/prometheus.log)
run-local: Pushgateway  http://127.0.0.1:${pgw_port}   (log $state/pushgateway.log)
run-local: file_sd dir  $file_sd_dir
run-local: in the run's config:
  telemetry:
    file_sd_dir: $file_sd_dir
    pushgateway: http://127.0.0.1:${pgw_port}
run-local: Ctrl-C stops both.
MSG

# Return when either service exits (then stop the other) or on Ctrl-C.
wait -n "${pids[@]}" || true
sleep 1 || true   # a Ctrl-C also reaches the services: let the trap run first
if [[ $stopping -eq 0 ]]; then
  echo "run-local: a service exited; see the logs in $state" >&2
  exit 1
fi
