#!/usr/bin/env bash
# Runs on the GPU box from the bundle folder made by bench/bundle_device.sh:
# SASS check, correctness test, compute-sanitizer, benchmark. Logs go to $OUT.
# usage: bash .gpu/kernels/run_device.sh [gtest-filter] [bench-filter]
set -u
source "$(dirname "$0")/device_lib.sh"
FILTER=${1:-*}
BENCH_FILTER=${2:-}
{ date -u; echo "before: $(smi)"; } >"$OUT/device.txt"

# SASS: HGMMA count and local-memory traffic per kernel.
sass_summary "$D/gemm_gpu_test" "$OUT/sass_summary.txt"
echo "== SASS summary (sm90 kernels)"; grep Sm90 "$OUT/sass_summary.txt" | sed 's/.*Sm90GemmKernel/Sm90GemmKernel/' | cut -c1-140

echo "== correctness test"
timeout 200 "$D/gemm_gpu_test" --gtest_filter="$FILTER" >"$OUT/test.log" 2>&1
rc=$?
echo "test rc=$rc"
if [ $rc -eq 124 ]; then
  echo "test timed out (hang?): skipping sanitizer and benchmark"; tail -5 "$OUT/test.log"; exit 1
fi
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|rel_err [0-9.e+-]+$" "$OUT/test.log" | grep -v "rel_err" | head -30
awk '/rel_err/ { if ($NF+0 > worst) { worst=$NF+0; line=$0 } } END { print "largest rel_err:", line }' "$OUT/test.log"

echo "== compute-sanitizer"
SMALL='GemmGpuTest.OutputTypesAndAlphaBeta:GemmGpuTest.TightLeadingDimensionsFallBackToPortable:GemmGpuTest.ForcedTileConfigurations'
timeout 100 compute-sanitizer --tool memcheck "$D/gemm_gpu_test" --gtest_filter="$SMALL" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3
timeout 80 compute-sanitizer --tool racecheck "$D/gemm_gpu_test" --gtest_filter='GemmGpuTest.OutputTypesAndAlphaBeta:GemmGpuTest.ForcedTileConfigurations' >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3

echo "== benchmark"
timeout 170 "$D/kernel_bench" $BENCH_FILTER 2>&1 | tee "$OUT/bench.log"
echo "bench rc=${PIPESTATUS[0]}"
echo "after: $(smi)" >>"$OUT/device.txt"
cat "$OUT/device.txt"
