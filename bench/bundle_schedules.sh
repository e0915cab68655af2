#!/usr/bin/env bash
# Builds the schedule/grouped GPU test, the existing kernel GPU test and both
# benchmarks here, bundles them with their shared libraries and
# run_schedules_device.sh into the main checkout's git-ignored
# .gpu/streamk.tar.xz, which the device tool carries (carry [".gpu/streamk.tar.xz"]).
# usage: bench/bundle_schedules.sh [/work/main]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" streamk bench/run_schedules_device.sh \
  //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_bench //bench:kernel_bench
