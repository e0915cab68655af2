#!/usr/bin/env bash
# Builds (-c opt) the schedule GPU test, the kernel GPU test and the schedule
# benchmark here, bundles them with their shared libraries and
# run_splitk_device.sh into DEST/.gpu/splitk.tar.xz (DEST: this checkout by
# default; git-ignored), which the device tool carries
# (carry [".gpu/splitk.tar.xz"] from the checkout the device tool copies).
# usage: bench/bundle_splitk.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-$PWD}
bazel build -c opt //kernels:schedules_gpu_test //kernels:gemm_gpu_test //bench:schedule_bench
tmp=$(mktemp -d)
../shared/tools/bundle-libs "$tmp/splitk" bazel-bin/kernels/schedules_gpu_test \
  bazel-bin/kernels/gemm_gpu_test bazel-bin/bench/schedule_bench
cp bench/run_splitk_device.sh "$tmp/splitk/"
git rev-parse HEAD >"$tmp/splitk/COMMIT"
git status --short --untracked-files=no | sed 's/^/dirty: /' >>"$tmp/splitk/COMMIT"
mkdir -p "$dest/.gpu"
tar -C "$tmp" -cJf "$dest/.gpu/splitk.tar.xz" splitk
rm -rf "$tmp"
ls -l "$dest/.gpu/splitk.tar.xz"
