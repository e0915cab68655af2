#!/usr/bin/env bash
# Builds the GPU server test and the serving benchmarks (staging_bench,
# serving_gpu_bench) here, bundles them with their shared libraries and
# run_serving_device.sh into the main checkout's git-ignored
# .gpu/serving.tar.xz, which the device tool carries (carry [".gpu/serving.tar.xz"]).
# usage: bench/bundle_serving.sh [/work/main]
exec "$(dirname "$0")/bundle.sh" --tar "${1:-/work/main}" serving bench/run_serving_device.sh \
  //tests:gpu_server_test //bench:staging_bench //bench:serving_gpu_bench
