#!/usr/bin/env bash
# Runs on the GPU box from the folder unpacked from .gpu/serving.tar.xz
# (bench/bundle_serving.sh), in one device call of a few minutes: the GPU
# server test (grouped launches, stream-K / split-K one at a time, admission
# by predicted completion, a short soak), compute-sanitizer memcheck on the
# grouped cases, then the serving benchmarks: staging (executor H2D/D2H vs
# raw pinned copies), large (server kernel time vs the kernel alone) and
# latency (p50/p99 vs the request's copies and kernel alone). Logs go to $OUT.
# usage: bash serving/run_serving_device.sh [soak seconds, default 20]
set -u
source "$(dirname "$0")/device_lib.sh"
SOAK=${1:-20}
device_begin

echo "== gpu_server_test (soak ${SOAK}s)"
timeout $((SOAK + 200)) "$D/gpu_server_test" --soak_seconds="$SOAK" >"$OUT/gpu_server_test.log" 2>&1
rc=$?
echo "rc=$rc"
grep -E "^\[       OK|^\[  (PASSED|FAILED) |^\[  FAILED|Failure|soak:" "$OUT/gpu_server_test.log" | head -30
if [ $rc -eq 124 ]; then
  echo "gpu_server_test timed out (a hang?): benchmarks skipped"; tail -20 "$OUT/gpu_server_test.log"
  exit 1
fi

echo "== compute-sanitizer memcheck (grouped launches)"
timeout 150 compute-sanitizer --tool memcheck "$D/gpu_server_test" \
  --gtest_filter='*OneRequestOfMixedShapesIsOneGroupedLaunch:*MixedShapesInOneRequest' \
  >"$OUT/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3

echo "== staging_bench"
timeout 150 "$D/staging_bench" 2>&1 | tee "$OUT/staging_bench.log"
echo "rc=${PIPESTATUS[0]}"

echo "== serving_gpu_bench"
timeout 200 "$D/serving_gpu_bench" 2>&1 | grep -v "\] \[info\]" | tee "$OUT/serving_gpu_bench.log"
echo "rc=${PIPESTATUS[0]}"

device_end
