#!/usr/bin/env bash
# Builds the GPU test and the benchmark here and bundles them, with their
# shared libraries and run_device.sh, into the main checkout's git-ignored
# .gpu/kernels, which the device tool carries (carry [".gpu/kernels"]).
# usage: bench/bundle_device.sh [/work/main]
exec "$(dirname "$0")/bundle.sh" "${1:-/work/main}" kernels bench/run_device.sh \
  //kernels:gemm_gpu_test //bench:kernel_bench
