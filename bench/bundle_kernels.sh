#!/usr/bin/env bash
# Builds the kernel and schedule GPU tests, schedule_sweep, schedule_bench,
# kernel_bench and the GPU server test here and bundles them with run_kernels_device.sh into
# MAIN/.gpu/kernels.tar.xz (git-ignored) for the device tool
# (carry [".gpu/kernels.tar.xz"]).
# usage: bench/bundle_kernels.sh [MAIN]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" kernels bench/run_kernels_device.sh \
  //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_sweep \
  //bench:schedule_bench //bench:kernel_bench //tests:gpu_server_test
