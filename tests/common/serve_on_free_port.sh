# Sourced by the shell tests that start a throw-away Prometheus or
# Pushgateway on 127.0.0.1 (tests/telemetry/e2e_prometheus.sh,
# tests/hpc/launch_test.sh, monitoring/tests/live_check.sh).
#
#   serve_on_free_port LOG CMD [ARG...]
#
# Runs CMD in the background with its output in LOG, @PORT@ in its words
# replaced by a port that was free a moment ago and @TRY@ by the try's
# number (1 to 3: give each try its own data directory), and waits up to
# 30 s until CMD's own process listens on the port and
# http://127.0.0.1:PORT/-/ready answers (not another test's server that
# took the port in between: CMD then exits, and the next try takes
# another port). Sets SERVE_PORT and SERVE_PID (the last try's, running:
# stop it by that PID; empty when every try exited) and returns
#   0  ready;
#   1  it exited on each of 3 ports (LOG says why);
#   2  it runs but was not ready within 30 s (another port would not help).
serve_on_free_port() {
  local log=$1 try arg deadline
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
    deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do
      _serves_on_port "$SERVE_PID" "$SERVE_PORT" && return 0
      kill -0 "$SERVE_PID" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$SERVE_PID" 2>/dev/null; then return 2; fi
    wait "$SERVE_PID" 2>/dev/null || true
    SERVE_PID=""
  done
  return 1
}

# Whether process $1 holds a socket listening on 127.0.0.1:$2 (or on any
# address) and http://127.0.0.1:$2/-/ready answers.
_serves_on_port() {
  /usr/bin/python3 - "$1" "$2" <<'PY' 2>/dev/null
import os, sys, urllib.request
pid, port = sys.argv[1], int(sys.argv[2])
listening = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        f = row.split()
        if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
            listening.add("socket:[%s]" % f[9])
fds = "/proc/%s/fd" % pid
if not any(os.readlink(os.path.join(fds, fd)) in listening for fd in os.listdir(fds)):
    sys.exit(1)
urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % port, timeout=1)
PY
}

# What serve_on_free_port's status means, for a failure message.
serve_failure() {
  case $1 in
    1) echo "it exited on each of 3 ports" ;;
    2) echo "it was not ready within 30 s" ;;
    *) echo "status $1" ;;
  esac
}

#   hold_refusing_port
#
# A port that refuses connections (a server that is down) for as long as
# REFUSING_PID runs: a process holds it bound but not listening, so no
# other test can take it. Sets REFUSING_PORT and REFUSING_PID (stop it by
# that PID); returns 1 when no port could be held.
hold_refusing_port() {
  local out i
  out=$(mktemp)
  /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
time.sleep(3600)' >"$out" 2>/dev/null &
  REFUSING_PID=$!
  for ((i = 0; i < 100; i++)); do
    REFUSING_PORT=$(head -n 1 "$out")
    [[ -n $REFUSING_PORT ]] && break
    sleep 0.05
  done
  rm -f "$out"
  [[ -n $REFUSING_PORT ]]
}
