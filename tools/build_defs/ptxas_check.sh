#!/usr/bin/env bash
# The <name>_ptxas_check test of a cuda_library (tools/build_defs/cuda.bzl):
# reads the ptxas reports (nvcc -Xptxas=-v output) of the library's objects
# and fails on either of two things that cost far more on the GPU than a
# kernel change is likely to gain:
#  - a C75xx warning: ptxas serialized wgmma instructions (a wgmma under a
#    branch, C7520, made every Hopper kernel 20-30% slower; accumulators
#    written outside wgmma in a pipeline stage, C7515, 3-10%);
#  - a function with non-zero "bytes spill stores" or "bytes spill loads":
#    registers spilled to local memory.
# usage: ptxas_check.sh LOG...
set -euo pipefail
if [[ $# -eq 0 ]]; then
  echo "usage: $0 PTXAS_LOG..." >&2
  exit 2
fi
status=0
for log in "$@"; do
  if [[ ! -r $log ]]; then
    echo "FAIL: $log: no ptxas report" >&2
    status=1
    continue
  fi
  functions=$(grep -c 'Compiling entry function\|Function properties for' "$log" || true)
  if grep -nE 'C75[0-9][0-9]' "$log"; then
    echo "FAIL: $log: ptxas serialized wgmma (C75xx, above)" >&2
    status=1
  fi
  if grep -nE '(^|[^0-9])[1-9][0-9]* bytes spill (stores|loads)' "$log"; then
    echo "FAIL: $log: registers spilled to local memory (above)" >&2
    status=1
  fi
  echo "$log: $functions function reports checked"
done
exit $status
