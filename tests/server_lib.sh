# shellcheck shell=bash
# Sourced by the shell tests that drive a real gemm_server on 127.0.0.1 (port
# 0, read back from a port file). The caller sets server_bin, the gemm_server
# binary. This sets work ($TEST_TMPDIR, or a new directory outside bazel;
# fail shows the *.log files there), server_pid and port, and an EXIT trap
# running kill_server so no server outlives a failed test (a test with more
# processes to end sets its own trap, calling kill_server).

work="${TEST_TMPDIR:-$(mktemp -d)}"
server_pid=""
port=""

# fail MESSAGE...: prints it and the last 40 lines of each log in $work, and
# exits 1.
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f "$f" ]] && { echo "---- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}

# kill_pid PID: SIGKILL to PID if it is still running, and reaps it.
kill_pid() {
  if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}

kill_server() {
  kill_pid "$server_pid"
  server_pid=""
}
trap kill_server EXIT

# start_server FLAG...: starts a CPU-backend gemm_server on 127.0.0.1:0 with
# the extra flags, logging to $work/server.log, and waits up to 60 s for it
# to write its port file; sets server_pid and port.
start_server() {
  rm -f "$work/port"
  # shellcheck disable=SC2154  # server_bin is the caller's.
  "$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= \
    --backend=cpu --blas_threads=1 "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    # The file is written in one go, ending with a newline.
    # shellcheck disable=SC2034  # port is read by the caller.
    if [[ -s "$work/port" ]] && [[ "$(tail -c1 "$work/port" | od -An -c | tr -d ' ')" == '\n' ]]; then
      port="$(tr -d '[:space:]' <"$work/port")"
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || fail "gemm_server exited before listening"
    sleep 0.1
  done
  fail "gemm_server wrote no port file within 60 s"
}

# stop_server: SIGTERM, then waits up to 30 s (room for a drain on a loaded
# machine) for the server to exit; returns its exit status.
stop_server() {
  local rc=0
  kill -TERM "$server_pid"
  for _ in $(seq 1 300); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$server_pid" 2>/dev/null && fail "gemm_server still running 30 s after SIGTERM"
  wait "$server_pid" || rc=$?
  server_pid=""
  return "$rc"
}
