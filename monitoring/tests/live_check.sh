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
# Prometheus on a free port (another one if the port was taken), ready
# within 30 s.
source "$mon/../tests/common/serve_on_free_port.sh"
ready=0
serve_on_free_port "$tmp/prometheus.log" "$prometheus" --config.file="$tmp/prometheus.yml" \
    --storage.tsdb.path="$tmp/data@TRY@" --web.listen-address="127.0.0.1:@PORT@" || ready=$?
pids+=("$SERVE_PID")
url="http://127.0.0.1:$SERVE_PORT"
if [[ $ready != 0 ]]; then
  echo "FAIL: Prometheus was not ready ($(serve_failure "$ready"))"
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
