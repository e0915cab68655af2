#!/usr/bin/env bash
# Runs on the GPU box from the folder unpacked from .gpu/sweep.tar.xz
# (bench/bundle_sweep.sh), about 3 minutes: schedule_sweep (split counts,
# tiles, stream-K, streaming floors of the batched cases) and ncu's memory
# and stall sections for one launch of the skinny and the 128x128x65536
# heuristic kernels. Logs go to $OUT.
# usage: bash sweep/run_sweep_device.sh
set -u
source "$(dirname "$0")/device_lib.sh"
device_begin
echo "== schedule_sweep"
timeout 240 "$D/schedule_sweep" >"$OUT/schedule_sweep.log" 2>&1
echo "rc=$?"; cat "$OUT/schedule_sweep.log"
for c in "splits 7x8192x8192" "splits 128x128x65536"; do
  f=$OUT/ncu_${c// /_}.txt
  echo "== ncu: $c (first Sm90GemmKernel launch: the heuristic's)"
  timeout 60 ncu --clock-control none -k regex:Sm90GemmKernel -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    "$D/schedule_sweep" "$c" >"$f" 2>&1
  echo "rc=$?"; grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Grid Size|Stall|Warp Cycles Per Issued" "$f" | head -24
done
device_end
