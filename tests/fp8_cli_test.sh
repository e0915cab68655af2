#!/usr/bin/env bash
# gemm_cli run with FP8 inputs against the real gemm_server (CPU backend):
# every format pair and scale mode, transposes, layouts, outputs, batches
# and beta, each result checked by the CLI against the float64 product of the
# dequantized operands (exit 0 and an OK check line), block scales with K not
# a multiple of 128 among them (a partial last block along K); then the
# refusal of an FP8 output.
#
# Usage (from tests/BUILD): fp8_cli_test.sh <gemm_server> <gemm_cli>
set -euo pipefail

server_bin="${1:?usage: fp8_cli_test.sh <gemm_server> <gemm_cli>}"
cli_bin="${2:?usage: fp8_cli_test.sh <gemm_server> <gemm_cli>}"
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/server_lib.sh"
start_server --cpu_concurrency=2

cli() {
  timeout 120 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=60000
}

cli info >"$work/info.log" 2>&1 || fail "gemm_cli info exited $?"
grep -q 'fp8_e4m3, fp8_e5m2' "$work/info.log" || fail "info lists no FP8 input types"

runs=()
for a in fp8_e4m3 fp8_e5m2; do
  for b in fp8_e4m3 fp8_e5m2; do
    for scale in tensor channel block; do
      runs+=("--m=70 --n=150 --k=256 --dtype=$a --b_dtype=$b --scale=$scale")
    done
  done
done
runs+=(
  "--m=33 --n=17 --k=384 --dtype=fp8_e4m3 --scale=block --transpose_a --transpose_b --layout=col"
  "--m=64 --n=64 --k=100 --dtype=fp8_e5m2 --scale=channel --out_dtype=bf16 --out_layout=col"
  "--m=40 --n=20 --k=128 --dtype=fp8_e4m3 --scale=tensor --out_dtype=fp16 --beta=0.5 --alpha=2"
  "--m=16 --n=16 --k=128 --dtype=fp8_e4m3 --b_dtype=fp8_e5m2 --scale=block --batch=3 --deterministic"
  "--m=70 --n=150 --k=1000 --dtype=fp8_e4m3 --scale=block"
  "--m=9 --n=130 --k=1 --dtype=fp8_e5m2 --scale=block"
  "--m=33 --n=17 --k=129 --dtype=fp8_e4m3 --b_dtype=fp8_e5m2 --scale=block --transpose_a --transpose_b --layout=col"
  "--m=20 --n=260 --k=4000 --dtype=fp8_e4m3 --scale=block --out_dtype=bf16 --beta=0.5 --batch=2"
)
for args in "${runs[@]}"; do
  # shellcheck disable=SC2086
  if ! cli run $args >"$work/run.log" 2>&1; then
    fail "gemm_cli run $args exited non-zero"
  fi
  grep -q 'MISMATCH\|FAILED' "$work/run.log" && fail "gemm_cli run $args reported a mismatch"
  grep -q 'kernel openblas_sgemm_fp8' "$work/run.log" || fail "gemm_cli run $args: no FP8 kernel named"
  grep -q '^precision A fp8_' "$work/run.log" || fail "gemm_cli run $args: no precision line"
  checks="$(grep -c ': OK$' "$work/run.log" || true)"
  [[ "$checks" -ge 1 ]] || fail "gemm_cli run $args printed no passing check"
  echo "run $args: $checks check(s) OK"
done

# A refusal is a usage error (exit 2) naming the flag.
rc=0
cli run --dtype=fp8_e4m3 --out_dtype=fp8_e5m2 >"$work/bad.log" 2>&1 || rc=$?
[[ "$rc" == 2 ]] || fail "an FP8 output exited $rc, expected 2"
grep -q -- '--out_dtype' "$work/bad.log" || fail "the FP8 output refusal names no flag"
echo "PASS"
