#!/usr/bin/env bash
# Builds the GPU server test and the serving benchmarks (staging_bench,
# serving_gpu_bench) here, bundles them with their shared libraries and
# run_serving_device.sh into the main checkout's git-ignored
# .gpu/serving.tar.xz, which the device tool carries (carry [".gpu/serving.tar.xz"]).
# usage: bench/bundle_serving.sh [/work/main]
set -euo pipefail
main=${1:-/work/main}
cd "$(dirname "$0")/.."
bazel build //tests:gpu_server_test //bench:staging_bench //bench:serving_gpu_bench
tmp=$(mktemp -d)
../shared/tools/bundle-libs "$tmp/serving" bazel-bin/tests/gpu_server_test \
  bazel-bin/bench/staging_bench bazel-bin/bench/serving_gpu_bench
cp bench/run_serving_device.sh "$tmp/serving/"
git rev-parse HEAD >"$tmp/serving/COMMIT"
git status --short --untracked-files=no | sed 's/^/dirty: /' >>"$tmp/serving/COMMIT"
mkdir -p "$main/.gpu"
tar -C "$tmp" -cJf "$main/.gpu/serving.tar.xz" serving
rm -rf "$tmp"
ls -l "$main/.gpu/serving.tar.xz"
