#!/usr/bin/env bash
# Starts gemm_server on the CPU backend on 127.0.0.1 (port 0, written to a
# port file), waits for it to listen, runs quickstart against it and checks
# that it exits 0 and printed OK. Usage (from examples/BUILD):
#   quickstart_test.sh <gemm_server> <quickstart>
set -euo pipefail

server_bin="${1:?usage: quickstart_test.sh <gemm_server> <quickstart>}"
quickstart_bin="${2:?usage: quickstart_test.sh <gemm_server> <quickstart>}"
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/../tests/server_lib.sh"

start_server --cpu_concurrency=1 --drain_timeout=5s
echo "gemm_server listening on 127.0.0.1:$port (pid $server_pid)"

rc=0
timeout 60 "$quickstart_bin" --target="127.0.0.1:$port" >"$work/quickstart.log" 2>&1 || rc=$?
cat "$work/quickstart.log"
[[ "$rc" -eq 0 ]] || fail "quickstart exited $rc"
grep -q ': OK$' "$work/quickstart.log" || fail "quickstart printed no OK"

# The positional form of the target works too.
timeout 60 "$quickstart_bin" "127.0.0.1:$port" >"$work/quickstart_argv.log" 2>&1 ||
  fail "quickstart 127.0.0.1:$port exited non-zero"

stop_server || fail "gemm_server exited $? after SIGTERM"
echo "PASS"
