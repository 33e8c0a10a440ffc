#!/usr/bin/env bash
# Live check of the monitoring files without the trainer: starts
# monitoring/tests/fake_exporter.py (announced through file_sd) and a
# throw-away Prometheus from monitoring/prometheus.test.yml.tmpl on free
# localhost ports, then runs check_promql.py against it: every dashboard
# expression must return data, every alert expression must evaluate.
#
#   monitoring/tests/live_check.sh [PROMETHEUS_BINARY]
#
# Exit status: that of check_promql.py (77 = skipped, prometheus missing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mon="$(dirname "$here")"
prometheus="${1:-$(command -v prometheus || true)}"
py=/usr/bin/python3
if [[ -z "$prometheus" || ! -x "$prometheus" ]]; then
  echo "live_check: prometheus not found, skipped"; exit 77
fi

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/file_sd"
sed -e "s|@FILE_SD_DIR@|$tmp/file_sd|g" -e "s|@RULES@|$mon/alerts.yml|g" \
    "$mon/prometheus.test.yml.tmpl" > "$tmp/prometheus.yml"

$py "$here/fake_exporter.py" --file-sd-dir "$tmp/file_sd" --ranks 4 --run-id live-check \
    > "$tmp/exporter.log" 2>&1 &
pids+=($!)
# Prometheus on a free port, ready within 30 s. The port is picked before
# Prometheus binds it and another test can take it in between: then
# Prometheus exits, and the next try takes another port (three in all).
start_prometheus() {  # $1: the try
  local pid
  port="$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  url="http://127.0.0.1:$port"
  "$prometheus" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data$1" \
      --web.listen-address="127.0.0.1:$port" > "$tmp/prometheus.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 60); do
    $py -c "import urllib.request; urllib.request.urlopen('$url/-/ready', timeout=1)" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 2  # running, not ready: another port would not help
}
for try in 1 2 3; do
  ready=0
  start_prometheus "$try" || ready=$?
  ((ready != 1)) && break  # ready, or running and not ready: another port would not help
done
if [[ $ready != 0 ]]; then
  echo "FAIL: Prometheus was not ready ($([[ $ready == 2 ]] && echo "within 30 s" || echo "it exited, 3 ports tried"))"
  tail -n 30 "$tmp/prometheus.log"
  exit 1
fi

rc=0
$py "$mon/check_promql.py" --prometheus "$url" --wait 40 \
    --dashboard "$mon/grafana/dashboards/wgtrain.json" --rules "$mon/alerts.yml" || rc=$?
if [[ $rc -ne 0 ]]; then
  echo "---- prometheus log"; tail -n 30 "$tmp/prometheus.log"
  echo "---- exporter log"; cat "$tmp/exporter.log"
fi
exit $rc
