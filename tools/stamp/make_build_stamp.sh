#!/bin/bash
# Writes the C++ source of the build stamp (service/build_stamp.h) from
# Bazel's stable status file: the commit is STABLE_GIT_COMMIT, or "unknown"
# when the build was not stamped with tools/stamp/workspace_status.sh.
# Usage: make_build_stamp.sh STABLE_STATUS_FILE > build_stamp.cc
set -eu
commit="$(awk '$1 == "STABLE_GIT_COMMIT" { print $2 }' "$1")"
# Only hex digits and "-dirty" reach the C++ string literal.
[[ "$commit" =~ ^[0-9a-f]{7,64}(-dirty)?$ ]] || commit="unknown"
cat <<CC
#include "service/build_stamp.h"

namespace gemm {
const char kBuildCommit[] = "${commit}";
}  // namespace gemm
CC
