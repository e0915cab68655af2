#!/usr/bin/env bash
# Builds the GPU test and the benchmark here and bundles them, with their
# shared libraries and run_device.sh, into the main checkout's git-ignored
# .gpu/kernels, which the device tool carries (carry [".gpu/kernels"]).
# usage: bench/bundle_device.sh [/work/main]
set -euo pipefail
main=${1:-/work/main}
cd "$(dirname "$0")/.."
bazel build //kernels:gemm_gpu_test //bench:kernel_bench
rm -rf "$main/.gpu/kernels"
../shared/tools/bundle-libs "$main/.gpu/kernels" bazel-bin/kernels/gemm_gpu_test bazel-bin/bench/kernel_bench
cp bench/run_device.sh "$main/.gpu/kernels/"
git rev-parse HEAD >"$main/.gpu/kernels/COMMIT"
