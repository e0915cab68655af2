#!/usr/bin/env bash
# gemm_cli run and bench with --shared_memory against the real gemm_server
# (CPU backend, same host over loopback): operands and results in one
# shared-memory region, every result checked by the CLI against the float64
# reference, concurrent bench requests each with their own outputs
# (verified, beta accumulating into them); then a server that refuses the
# region (--max_shared_memory_regions=0): the CLI says so and sends the
# bytes in messages.
#
# Usage (from tests/BUILD): shared_memory_cli_test.sh <gemm_server> <gemm_cli>
set -euo pipefail

server_bin="${1:?usage: shared_memory_cli_test.sh <gemm_server> <gemm_cli>}"
cli_bin="${2:?usage: shared_memory_cli_test.sh <gemm_server> <gemm_cli>}"
work="${TEST_TMPDIR:-$(mktemp -d)}"
server_pid=""
port=""

stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap stop_server EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do
    [[ -f "$f" ]] && { echo "---- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}

# Starts gemm_server with extra flags "$@" and sets $port.
start_server() {
  rm -f "$work/port"
  "$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= \
    --backend=cpu --cpu_concurrency=2 --blas_threads=1 "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    if [[ -s "$work/port" ]] && [[ "$(tail -c1 "$work/port" | od -An -c | tr -d ' ')" == '\n' ]]; then
      port="$(tr -d '[:space:]' <"$work/port")"
      return
    fi
    kill -0 "$server_pid" 2>/dev/null || fail "gemm_server exited before listening"
    sleep 0.1
  done
  fail "gemm_server wrote no port file within 60 s"
}

cli() {
  timeout 120 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=60000
}

start_server
runs=(
  "--m=70 --n=90 --k=33"
  "--m=70 --n=90 --k=33 --dtype=bf16 --layout=col --beta=0.5 --batch=3"
  "--m=31 --n=257 --k=64 --dtype=fp16 --transpose_a --out_layout=col --alpha=2"
  "--m=48 --n=40 --k=128 --dtype=bf16 --out_dtype=fp32 --transpose_b"
  "--m=64 --n=64 --k=256 --dtype=fp8_e4m3 --scale=block --out_dtype=bf16 --beta=1"
)
for args in "${runs[@]}"; do
  # shellcheck disable=SC2086
  cli run --shared_memory $args >"$work/run.log" 2>&1 || fail "gemm_cli run --shared_memory $args exited non-zero"
  grep -q '^transport shared memory' "$work/run.log" || fail "run $args: shared memory not used"
  grep -q 'note: shared memory not used' "$work/run.log" && fail "run $args: fell back"
  grep -q 'MISMATCH\|FAILED' "$work/run.log" && fail "run $args reported a mismatch"
  checks="$(grep -c ': OK$' "$work/run.log" || true)"
  [[ "$checks" -ge 1 ]] || fail "run $args printed no passing check"
  echo "run --shared_memory $args: $checks check(s) OK"
done

# Concurrent requests, each checked: with beta they would corrupt one
# another's results if they shared outputs.
for transport in "" "--stream"; do
  # shellcheck disable=SC2086
  cli bench --shared_memory $transport --m=96 --n=80 --k=64 --beta=1 --batch=2 --concurrency=4 \
    --requests=80 --verify_every=1 >"$work/bench.log" 2>"$work/bench.err" ||
    fail "gemm_cli bench --shared_memory $transport exited non-zero"
  grep -q '^transport .* + shared memory$' "$work/bench.log" || fail "bench $transport: shared memory not used"
  grep -q '^requests      80 (ok 80, errors 0)$' "$work/bench.log" || fail "bench $transport: not 80 ok"
  grep -q '^verified      80 responses, 0 mismatches$' "$work/bench.log" ||
    fail "bench $transport: not every response verified"
  echo "bench --shared_memory $transport: 80 requests verified"
done
stop_server

# A server that maps no regions: the CLI falls back to bytes in messages.
start_server --max_shared_memory_regions=0
cli run --shared_memory --m=70 --n=90 --k=33 >"$work/fallback.log" 2>&1 ||
  fail "gemm_cli run --shared_memory exited non-zero against a server without regions"
grep -q 'note: shared memory not used (FAILED_PRECONDITION: shared memory is off' "$work/fallback.log" ||
  fail "the fallback was not reported"
grep -q '^transport shared memory' "$work/fallback.log" && fail "claimed shared memory on fallback"
grep -q ': OK$' "$work/fallback.log" || fail "the fallback's result was not checked OK"
echo "fallback to messages: OK"
echo "PASS"
