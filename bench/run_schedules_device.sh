#!/usr/bin/env bash
# Runs on the GPU box from the folder unpacked from .gpu/streamk.tar.xz
# (bench/bundle_schedules.sh): SASS summary, the existing kernel GPU test,
# the schedule/grouped GPU test, the schedule benchmark, and the dense
# kernel benchmark on a few shapes (data-parallel regression check).
# Logs go to $OUT.
# usage: bash streamk/run_schedules_device.sh
set -u
source "$(dirname "$0")/device_lib.sh"
device_begin
sm90_sass_check "$D/schedules_gpu_test"

kernel_gpu_tests || exit 1
echo "== schedule_bench"
timeout 150 "$D/schedule_bench" >"$OUT/schedule_bench.log" 2>&1
echo "rc=$?"; cat "$OUT/schedule_bench.log"
echo "== kernel_bench (data-parallel regression)"
for f in "bf16 8192" "bf16 256x256"; do
  timeout 40 "$D/kernel_bench" "$f" >>"$OUT/kernel_bench.log" 2>&1
  echo "rc=$?"
done
grep "^| bf16" "$OUT/kernel_bench.log" | cut -d'|' -f2-7
echo "== ncu: one grouped launch (64 x M~U[32,256] N=K=256)"
timeout 90 ncu --clock-control none -k regex:Sm90GemmKernel -c 1 --section SpeedOfLight \
  --section WarpStateStats --section SourceCounters "$D/schedule_bench" "grouped 64" \
  >"$OUT/ncu_grouped64.txt" 2>&1
echo "rc=$?"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|stall" "$OUT/ncu_grouped64.txt" | head -12
device_end
