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
schedule_bench_ab "$B" "$D"
device_end
