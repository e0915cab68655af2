#!/usr/bin/env bash
# A/B of run-time settings of one kernel build on the GPU box: base/ (the tree
# before the change, with power_probe and schedule_bench) unpacked beside the
# bundle holding this script, whose binaries read the environment variable VAR
# (an experiment's switch, never committed with the code). Made by
#   bench/bundle.sh --tar MAIN NAME bench/run_env_ab_device.sh \
#     //bench:power_probe //bench:schedule_bench //kernels:gemm_gpu_test //kernels:schedules_gpu_test
# Runs the bundle's kernel GPU tests (VAR unset: the build's default); then
# PROBE_RUNS times (default 2) power_probe (each implementation alone, clock
# and power sampled) on base and on the bundle with VAR set to each value;
# then BENCH_RUNS times (default 2) schedule_bench (interleaved samples) on
# base and each value. Case filters apply to both benchmarks. Logs go to $OUT.
# usage: bash NAME/run_env_ab_device.sh VAR "VALUE..." [case...]
set -u
source "$(dirname "$0")/device_lib.sh"
B=$(cd "$D/../base" && pwd)
var=$1 values=$2
shift 2
device_begin
kernel_gpu_tests || exit 1
for run in $(seq "${PROBE_RUNS:-2}"); do
  power_probe_sampled "$B" "base$run" "$@"
  for v in $values; do
    export "$var=$v"
    power_probe_sampled "$D" "$v$run" "$@"
    unset "$var"
  done
done
for run in $(seq "${BENCH_RUNS:-2}"); do
  for v in base $values; do
    dir=$D
    if [ "$v" = base ]; then dir=$B; else export "$var=$v"; fi
    echo "== schedule_bench $v run $run"
    LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 150 "$dir/schedule_bench" "$@" \
      >"$OUT/bench_${v}_$run.log" 2>&1
    echo "rc=$?"
    unset "$var"
    grep -E "^\| (sk|skinny|grouped)|geometric" "$OUT/bench_${v}_$run.log" | cut -d'|' -f2,4,5,9 |
      grep -v diagnostic
  done
done
device_end
