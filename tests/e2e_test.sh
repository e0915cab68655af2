#!/usr/bin/env bash
# End to end: the real gemm_server binary on 127.0.0.1 (port 0, written to a
# port file) driven by the real gemm_cli: info, run (exit 0 = every result
# within tolerance of the float64 reference) over dtypes, shapes, transposes
# and layouts, and bench with verification. Then SIGTERM while a bench runs:
# the server must drain and exit 0 within --drain_timeout, and the bench must
# report no wrong result (its errors only UNAVAILABLE or CANCELLED: calls
# refused or cut off by the shutdown).
#
# Usage (from tests/BUILD): e2e_test.sh <gemm_server> <gemm_cli>
set -euo pipefail

server_bin="${1:?usage: e2e_test.sh <gemm_server> <gemm_cli>}"
cli_bin="${2:?usage: e2e_test.sh <gemm_server> <gemm_cli>}"
bench_pid=""
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/server_lib.sh"
trap 'kill_pid "$bench_pid"; kill_server' EXIT

cli() {
  timeout 120 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=60000
}

start_server --cpu_concurrency=2 --drain_timeout=10s --max_message_bytes=$((64 << 20))
echo "gemm_server listening on 127.0.0.1:$port (pid $server_pid)"

# info
cli info >"$work/info.log" 2>&1 || fail "gemm_cli info exited $?"
grep -Eq '^backend +cpu$' "$work/info.log" || fail "info names no cpu backend"
grep -q 'max message bytes' "$work/info.log" || fail "info shows no limits"

# run: one request each, verified against the float64 reference by the CLI.
runs=(
  "--m=1 --n=1 --k=1 --dtype=fp32"
  "--m=65 --n=33 --k=17 --dtype=fp32 --transpose_a"
  "--m=64 --n=128 --k=96 --dtype=fp16 --transpose_b --layout=col"
  "--m=31 --n=7 --k=129 --dtype=bf16 --out_dtype=fp32 --out_layout=col"
  "--m=50 --n=50 --k=50 --dtype=fp16 --out_dtype=bf16 --alpha=-0.5 --beta=1.5"
  "--m=17 --n=300 --k=3 --dtype=fp32 --out_dtype=fp16 --beta=2 --layout=col --transpose_a --transpose_b"
  "--m=256 --n=256 --k=256 --dtype=bf16 --batch=3"
)
for args in "${runs[@]}"; do
  # shellcheck disable=SC2086
  if ! cli run $args >"$work/run.log" 2>&1; then
    fail "gemm_cli run $args exited non-zero"
  fi
  grep -q 'MISMATCH\|FAILED' "$work/run.log" && fail "gemm_cli run $args reported a mismatch"
  checks="$(grep -c ': OK$' "$work/run.log" || true)"
  [[ "$checks" -ge 1 ]] || fail "gemm_cli run $args printed no passing check"
  echo "run $args: $checks check(s) OK"
done

# A request the CLI cannot make is an error exit (2), never a silent 0.
bad_rc=0
cli run --m=0 >"$work/run_bad.log" 2>&1 || bad_rc=$?
[[ "$bad_rc" -eq 2 ]] || fail "gemm_cli run --m=0 exited $bad_rc, want 2"

# bench: 200 requests, 4 in flight, every 10th verified.
cli bench --m=64 --n=64 --k=64 --dtype=fp16 --requests=200 --concurrency=4 --verify_every=10 \
  >"$work/bench.log" 2>&1 || fail "gemm_cli bench exited $?"
grep -Eq '^requests +200 \(ok 200, errors 0\)' "$work/bench.log" || fail "bench did not finish 200 requests cleanly"
grep -Eq '^verified +20 responses, 0 mismatches' "$work/bench.log" || fail "bench did not verify 20 responses"
grep -q 'latency ms' "$work/bench.log" || fail "bench printed no latency table"
echo "bench: 200 requests, 20 verified, 0 mismatches"

# SIGTERM during a bench: drain, exit 0; the bench sees no wrong result.
cli bench --m=128 --n=128 --k=128 --dtype=fp32 --duration_s=8 --concurrency=4 --verify_every=1 \
  --max_attempts=2 >"$work/bench_shutdown.log" 2>&1 &
bench_pid=$!
# Wait until the bench has answers (its progress line counts requests).
for _ in $(seq 1 300); do
  if grep -Eq '\] [1-9][0-9]* requests' "$work/bench_shutdown.log" 2>/dev/null; then break; fi
  kill -0 "$bench_pid" 2>/dev/null || break
  sleep 0.1
done
sleep 1
kill -0 "$bench_pid" 2>/dev/null || fail "the bench ended before the server was stopped"
term_at=$(date +%s)
server_rc=0
# --drain_timeout=10s, within stop_server's 30 s.
stop_server || server_rc=$?
echo "gemm_server exited $server_rc, $(( $(date +%s) - term_at )) s after SIGTERM"
[[ "$server_rc" -eq 0 ]] || fail "gemm_server exited $server_rc after SIGTERM"
grep -q 'shutdown complete' "$work/server.log" || fail "the server log has no 'shutdown complete'"

bench_rc=0
wait "$bench_pid" || bench_rc=$?
bench_pid=""
echo "bench during shutdown exited $bench_rc"
# 0: all answered; 3: some calls failed (refused by the stopped server);
# 1 would mean a wrong result.
[[ "$bench_rc" -eq 0 || "$bench_rc" -eq 3 ]] || fail "the bench exited $bench_rc (1 = a wrong result)"
grep -Eq '^verified +[0-9]+ responses, 0 mismatches' "$work/bench_shutdown.log" ||
  fail "the bench reported mismatches or verified nothing"
grep -Eq '^verified +[1-9]' "$work/bench_shutdown.log" || fail "the bench verified no response"
# Error lines sit between "requests" and "duration", two-space indented.
errors="$(sed -n '/^requests /,/^duration /p' "$work/bench_shutdown.log" | grep -E '^  ' || true)"
if [[ -n "$errors" ]]; then
  echo "bench errors during shutdown:"
  echo "$errors"
  # Each line: code, count, then the status message.
  bad="$(echo "$errors" | grep -Ev '^ +(UNAVAILABLE|CANCELLED) +[0-9]+( .*)?$' || true)"
  [[ -z "$bad" ]] || fail "errors other than UNAVAILABLE/CANCELLED during shutdown: $bad"
fi

echo "PASS"
