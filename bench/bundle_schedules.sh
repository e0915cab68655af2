#!/usr/bin/env bash
# Builds the schedule/grouped GPU test, the existing kernel GPU test and both
# benchmarks here, bundles them with their shared libraries and
# run_schedules_device.sh into the main checkout's git-ignored
# .gpu/streamk.tar.xz, which the device tool carries (carry [".gpu/streamk.tar.xz"]).
# usage: bench/bundle_schedules.sh [/work/main]
set -euo pipefail
main=${1:-/work/main}
cd "$(dirname "$0")/.."
bazel build //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_bench //bench:kernel_bench
tmp=$(mktemp -d)
../shared/tools/bundle-libs "$tmp/streamk" bazel-bin/kernels/schedules_gpu_test \
  bazel-bin/kernels/gemm_gpu_test bazel-bin/bench/schedule_bench bazel-bin/bench/kernel_bench
cp bench/run_schedules_device.sh "$tmp/streamk/"
git rev-parse HEAD >"$tmp/streamk/COMMIT"
git status --short --untracked-files=no | sed 's/^/dirty: /' >>"$tmp/streamk/COMMIT"
mkdir -p "$main/.gpu"
tar -C "$tmp" -cJf "$main/.gpu/streamk.tar.xz" streamk
rm -rf "$tmp"
ls -l "$main/.gpu/streamk.tar.xz"
