#!/usr/bin/env bash
# Builds the kernel and schedule GPU tests, schedule_sweep, schedule_bench,
# kernel_bench and the GPU server test here and bundles them with
# run_kernel_suite_device.sh into MAIN/.gpu/kernel_suite.tar.xz (git-ignored)
# for the device tool (carry [".gpu/kernel_suite.tar.xz"]).
# usage: bench/bundle_kernel_suite.sh [MAIN]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" kernel_suite bench/run_kernel_suite_device.sh \
  //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_sweep \
  //bench:schedule_bench //bench:kernel_bench //tests:gpu_server_test
