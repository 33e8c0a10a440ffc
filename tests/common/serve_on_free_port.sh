# Sourced by the shell tests that start a throw-away Prometheus or
# Pushgateway on 127.0.0.1 (tests/telemetry/e2e_prometheus.sh,
# tests/hpc/launch_test.sh, monitoring/tests/live_check.sh).
#
#   serve_on_free_port LOG CMD [ARG...]
#
# Runs CMD in the background with its output in LOG, @PORT@ in its words
# replaced by a port that was free a moment ago and @TRY@ by the try's
# number (1 to 3: give each try its own data directory), and waits up to
# 30 s for http://127.0.0.1:PORT/-/ready. The port is picked before the
# server binds it, so another test can take it in between: the server then
# exits, and the next try takes another port. Sets SERVE_PORT and
# SERVE_PID (the last try's; stop it by that PID) and returns
#   0  ready;
#   1  it exited on each of 3 ports (LOG says why);
#   2  it runs but was not ready within 30 s (another port would not help).
serve_on_free_port() {
  local log=$1 try arg i
  shift
  local -a words
  for try in 1 2 3; do
    SERVE_PORT=$(/usr/bin/python3 -c \
      'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    words=()
    for arg in "$@"; do
      arg=${arg//@PORT@/$SERVE_PORT}
      words+=("${arg//@TRY@/$try}")
    done
    "${words[@]}" >"$log" 2>&1 &
    SERVE_PID=$!
    for ((i = 0; i < 60; i++)); do
      /usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' \
        "http://127.0.0.1:$SERVE_PORT/-/ready" 2>/dev/null && return 0
      kill -0 "$SERVE_PID" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$SERVE_PID" 2>/dev/null; then return 2; fi
    wait "$SERVE_PID" 2>/dev/null || true
  done
  return 1
}

# What serve_on_free_port's status means, for a failure message.
serve_failure() {
  case $1 in
    1) echo "it exited on each of 3 ports" ;;
    2) echo "it was not ready within 30 s" ;;
    *) echo "status $1" ;;
  esac
}
