#!/usr/bin/env bash
# Runs on the GPU box from the folder unpacked from .gpu/kernel_suite.tar.xz
# (bench/bundle_kernel_suite.sh), about 6 minutes: SASS summary, both kernel GPU
# tests, compute-sanitizer memcheck on the split-K reduction cases,
# schedule_sweep (split counts, tiles, batched tiles, streaming floors),
# schedule_bench (all sections), kernel_bench and the GPU server test
# with a 3 s soak. Logs go to $OUT.
# usage: [SWEEP="section filters"] bash kernel_suite/run_kernel_suite_device.sh
set -u
source "$(dirname "$0")/device_lib.sh"
device_begin
sm90_sass_check "$D/schedules_gpu_test"
kernel_gpu_tests || exit 1
memcheck "split-K reduction kernel (skinny M = 7 included)" 150 memcheck.log \
  "$D/schedules_gpu_test" '*SplitKReductionKernel*' '^\[       OK'
memcheck "paired split-K (2-CTA clusters)" 200 memcheck_pairs.log \
  "$D/schedules_gpu_test" '*PairedSplitK*' 'paired split-K in'
memcheck "grouped lists (staged TMA-store epilogue)" 150 memcheck_grouped.log \
  "$D/schedules_gpu_test" '*GroupedMatchesSingleLaunches*' 'mismatches vs single'
if [ -n "${NCU:-}" ]; then
  # NCU="sweep filter": ncu on schedule_sweep's Sm90 GEMM launches
  # NCU_SKIP .. NCU_SKIP + NCU_COUNT (warm-up launches come first, 5 per variant).
  echo "== ncu: schedule_sweep $NCU (Sm90 launches $NCU_SKIP + $NCU_COUNT)"
  timeout 240 ncu --clock-control none -k regex:Sm90GemmKernel --launch-skip "${NCU_SKIP:-0}" \
    --launch-count "${NCU_COUNT:-1}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section LaunchStats "$D/schedule_sweep" "$NCU" >"$OUT/ncu.txt" 2>&1
  echo "rc=$?"; grep -E "Sm90GemmKernel|Duration|Grid Size|Compute \(SM\) Throughput|DRAM Throughput|L2 Hit Rate|Memory Throughput|Stall|stall" "$OUT/ncu.txt" | head -80
fi
echo "== schedule_sweep"
timeout 200 "$D/schedule_sweep" ${SWEEP:-"splits" "batched" "floor"} >"$OUT/schedule_sweep.log" 2>&1
echo "rc=$?"; cat "$OUT/schedule_sweep.log"
echo "== schedule_bench"
timeout 200 "$D/schedule_bench" >"$OUT/schedule_bench.log" 2>&1
echo "rc=$?"; cat "$OUT/schedule_bench.log"
echo "== kernel_bench"
timeout 200 "$D/kernel_bench" >"$OUT/kernel_bench.log" 2>&1
echo "rc=$?"; cat "$OUT/kernel_bench.log"
echo "== gpu_server_test (3 s soak)"
timeout 120 "$D/gpu_server_test" --soak_seconds=3 >"$OUT/gpu_server_test.log" 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT/gpu_server_test.log" | head -12
device_end
