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
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

cli() {
  timeout 120 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=60000
}

start_server --cpu_concurrency=2
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
kill_server

# A server that maps no regions: the CLI falls back to bytes in messages.
start_server --cpu_concurrency=2 --max_shared_memory_regions=0
cli run --shared_memory --m=70 --n=90 --k=33 >"$work/fallback.log" 2>&1 ||
  fail "gemm_cli run --shared_memory exited non-zero against a server without regions"
grep -q 'note: shared memory not used (FAILED_PRECONDITION: shared memory is off' "$work/fallback.log" ||
  fail "the fallback was not reported"
grep -q '^transport shared memory' "$work/fallback.log" && fail "claimed shared memory on fallback"
grep -q ': OK$' "$work/fallback.log" || fail "the fallback's result was not checked OK"
echo "fallback to messages: OK"
echo "PASS"
