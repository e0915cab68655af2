#!/usr/bin/env bash
# A/B of a kernel change on the GPU box, sustained and interleaved: two
# bundles unpacked side by side, base/ (the tree before the change, with
# power_probe and schedule_bench) and the variant holding this script, made by
#   bench/bundle.sh --tar MAIN NAME bench/run_power_ab_device.sh \
#     //bench:power_probe //bench:schedule_bench //kernels:gemm_gpu_test //kernels:schedules_gpu_test
# Runs the variant's kernel GPU tests; power_probe (each implementation alone
# for seconds, clock and power sampled) on base, variant, base, variant; then
# schedule_bench (interleaved samples) alternating the two. Logs go to $OUT.
# usage: bash VARIANT/run_power_ab_device.sh [power_probe case...]
set -u
source "$(dirname "$0")/device_lib.sh"
B=$(cd "$D/../base" && pwd)
device_begin
kernel_gpu_tests || exit 1
for run in 1 2; do
  power_probe_sampled "$B" "base$run" "$@"
  power_probe_sampled "$D" "variant$run" "$@"
done
for run in 1 2; do
  for dir in "$B" "$D"; do
    v=$(basename "$dir")
    [ "$dir" = "$D" ] && v=variant
    echo "== schedule_bench $v run $run"
    LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 150 "$dir/schedule_bench" \
      >"$OUT/bench_${v}_$run.log" 2>&1
    echo "rc=$?"
    grep -E "^\| (sk|skinny|grouped)|geometric" "$OUT/bench_${v}_$run.log" | cut -d'|' -f2,4,5,9 |
      grep -v diagnostic
  done
done
device_end
