#!/usr/bin/env bash
# Starts gemm_server on the CPU backend on 127.0.0.1 (port 0, written to a
# port file), waits for it to listen, runs quickstart against it and checks
# that it exits 0 and printed OK. Usage (from examples/BUILD):
#   quickstart_test.sh <gemm_server> <quickstart>
set -euo pipefail

server_bin="${1:?usage: quickstart_test.sh <gemm_server> <quickstart>}"
quickstart_bin="${2:?usage: quickstart_test.sh <gemm_server> <quickstart>}"
work="${TEST_TMPDIR:-$(mktemp -d)}"
server_pid=""

cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f "$f" ]] && { echo "---- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}

rm -f "$work/port"
"$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= \
  --backend=cpu --cpu_concurrency=1 --blas_threads=1 --drain_timeout=5s \
  >"$work/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 600); do
  # The file is written in one go, ending with a newline.
  if [[ -s "$work/port" ]] && [[ "$(tail -c1 "$work/port" | od -An -c | tr -d ' ')" == '\n' ]]; then
    port="$(tr -d '[:space:]' <"$work/port")"
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || fail "gemm_server exited before listening"
  sleep 0.1
done
[[ -n "$port" ]] || fail "gemm_server wrote no port file within 60 s"
echo "gemm_server listening on 127.0.0.1:$port (pid $server_pid)"

rc=0
timeout 60 "$quickstart_bin" --target="127.0.0.1:$port" >"$work/quickstart.log" 2>&1 || rc=$?
cat "$work/quickstart.log"
[[ "$rc" -eq 0 ]] || fail "quickstart exited $rc"
grep -q ': OK$' "$work/quickstart.log" || fail "quickstart printed no OK"

# The positional form of the target works too.
timeout 60 "$quickstart_bin" "127.0.0.1:$port" >"$work/quickstart_argv.log" 2>&1 ||
  fail "quickstart 127.0.0.1:$port exited non-zero"

kill -TERM "$server_pid"
wait "$server_pid" || fail "gemm_server exited $? after SIGTERM"
server_pid=""
echo "PASS"
