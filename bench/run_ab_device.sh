#!/usr/bin/env bash
# A/B of a kernel change on the GPU box: two bundles of the same targets
# unpacked side by side, base/ (the tree before the change) and the
# variant holding this script, each made by
#   bench/bundle.sh --tar MAIN NAME bench/run_ab_device.sh \
#     //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_sweep //bench:schedule_bench
# (NAME base for the first). Runs the variant's kernel GPU tests, then
# schedule_bench alternating base / variant twice each, then schedule_sweep
# on each for the cases given as arguments. Logs go to $OUT.
# usage: bash VARIANT/run_ab_device.sh [schedule_sweep case...]
set -u
source "$(dirname "$0")/device_lib.sh"
B=$(cd "$D/../base" && pwd)
V=$(basename "$D")
device_begin
kernel_gpu_tests || exit 1
schedule_bench_ab "$B" "$D"
if [ $# -gt 0 ]; then
  for dir in "$B" "$D"; do
    v=$(basename "$dir")
    echo "== schedule_sweep $v"
    LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 100 "$dir/schedule_sweep" "$@" \
      >"$OUT/sweep_$v.log" 2>&1
    echo "rc=$?"; grep -E "^\| (heur|10th|alone|0 )|^clock|^splits|^tiles" "$OUT/sweep_$v.log" |
      cut -c1-220 | head -40
  done
fi
echo "variant $V"
device_end
