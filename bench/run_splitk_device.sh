#!/usr/bin/env bash
# Runs on the GPU box from the folder unpacked from .gpu/splitk.tar.xz
# (bench/bundle_splitk.sh), about 7 minutes in all: SASS summary, the
# kernel GPU test, the schedule GPU test (split-K through the reduction
# kernel included), compute-sanitizer memcheck on the reduction-kernel and
# TF32 operand-copy cases, the schedule benchmark (dense sections), ncu
# durations of one 1000^3 launch and one 128x128x65536 split-K launch (GEMM +
# reduction kernel), kernel_bench, and the GPU server test with a short soak.
# Logs go to $OUT.
# usage: bash splitk/run_splitk_device.sh
set -u
source "$(dirname "$0")/device_lib.sh"
device_begin
sm90_sass_check "$D/schedules_gpu_test"

kernel_gpu_tests || exit 1
memcheck SplitKReductionKernel 120 memcheck.log "$D/schedules_gpu_test" '*SplitKReductionKernel*'
memcheck "TF32 operand copies" 150 memcheck_tf32.log "$D/gemm_gpu_test" \
  '*Tf32AnyLayoutThroughOperandCopies*'
echo "== schedule_bench (dense sections)"
timeout 150 "$D/schedule_bench" "sk " "skinny" >"$OUT/schedule_bench.log" 2>&1
echo "rc=$?"; cat "$OUT/schedule_bench.log"
echo "== ncu: first launches of 1000^3 (data-parallel) and 128x128x65536 (split-K + reduction)"
timeout 45 ncu --clock-control none -k regex:Sm90GemmKernel -c 1 --section SpeedOfLight \
  --section LaunchStats "$D/schedule_bench" "sk 1000^3" >"$OUT/ncu_1000.txt" 2>&1
echo "rc=$?"; grep -E "Sm90GemmKernel|Duration|Grid Size|Compute \(SM\) Throughput|Memory Throughput" "$OUT/ncu_1000.txt" | head -8
timeout 45 ncu --clock-control none -k regex:'Sm90GemmKernel|SplitKReduce' -c 2 --section SpeedOfLight \
  --section LaunchStats "$D/schedule_bench" "sk 128x128x65536" >"$OUT/ncu_128x128x65536.txt" 2>&1
echo "rc=$?"; grep -E "Sm90GemmKernel|SplitKReduce|Duration|Grid Size|Memory Throughput" "$OUT/ncu_128x128x65536.txt" | head -12
echo "== kernel_bench"
timeout 200 "$D/kernel_bench" >"$OUT/kernel_bench.log" 2>&1
echo "rc=$?"; cat "$OUT/kernel_bench.log"
echo "== gpu_server_test (10 s soak)"
timeout 120 "$D/gpu_server_test" --soak_seconds=10 >"$OUT/gpu_server_test.log" 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|soak" "$OUT/gpu_server_test.log" | head -20
device_end
