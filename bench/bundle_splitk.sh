#!/usr/bin/env bash
# Builds the kernel and schedule GPU tests, both kernel benchmarks and the
# GPU server test here, and bundles them with run_splitk_device.sh into
# MAIN/.gpu/splitk.tar.xz (git-ignored), which the device tool carries
# (carry [".gpu/splitk.tar.xz"]).
# usage: bench/bundle_splitk.sh [MAIN]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" splitk bench/run_splitk_device.sh \
  //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_bench \
  //bench:kernel_bench //tests:gpu_server_test
