#!/usr/bin/env bash
# Builds overload_test and gemm_cli and bundles them, with their shared
# libraries and run_overload.sh, into the main checkout's git-ignored
# .gpu/overload, for a run on a host with cores to spare (the device tool
# carries it: carry [".gpu/overload"]).
# usage: tests/bundle_overload.sh [/work/main]
set -euo pipefail
main=${1:-/work/main}
cd "$(dirname "$0")/.."
bazel build //tests:overload_test //client:gemm_cli
rm -rf "$main/.gpu/overload"
../shared/tools/bundle-libs "$main/.gpu/overload" bazel-bin/tests/overload_test \
  bazel-bin/client/gemm_cli
cp tests/run_overload.sh "$main/.gpu/overload/"
git rev-parse HEAD >"$main/.gpu/overload/COMMIT"
