#!/usr/bin/env bash
# health_probe's exit status against the gemm_server binary on loopback:
# 0 while it serves, 1 for an unknown service, 1 once it has shut down.
set -euo pipefail
probe="$1"
server="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"

"$server" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= \
  --backend=cpu --log_level=warn &
server_pid=$!
trap 'kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "FAIL: gemm_server did not start" >&2; exit 1; }
addr="127.0.0.1:$(cat "$work/port")"

"$probe" --addr="$addr" --deadline=5s || { echo "FAIL: expected SERVING (exit 0)" >&2; exit 1; }

if "$probe" --addr="$addr" --service=no.such.Service; then
  echo "FAIL: an unknown service must exit 1" >&2; exit 1
fi

kill -TERM "$server_pid"
wait "$server_pid"
if "$probe" --addr="$addr" --deadline=300ms; then
  echo "FAIL: a stopped server must exit 1" >&2; exit 1
fi
echo PASS
