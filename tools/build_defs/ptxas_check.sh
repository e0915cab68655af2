#!/usr/bin/env bash
# The <name>_ptxas_check test of a cuda_library (tools/build_defs/cuda.bzl):
# reads the ptxas reports (nvcc -Xptxas=-v output) of the library's objects
# and fails on either of two things that cost far more on the GPU than a
# kernel change is likely to gain:
#  - a C75xx warning: ptxas serialized wgmma instructions (a wgmma under a
#    branch, C7520, made every Hopper kernel 20-30% slower; accumulators
#    written outside wgmma in a pipeline stage, C7515, 3-10%);
#  - a function with non-zero "bytes spill stores" or "bytes spill loads":
#    registers spilled to local memory, unless the function's mangled name
#    matches the library's --allow_spills pattern (an extended regex the
#    cuda_library names, with its reason, in ptxas_allowed_spills).
# usage: ptxas_check.sh [--allow_spills REGEX] LOG...
set -euo pipefail
allow=""
if [[ ${1:-} == --allow_spills ]]; then
  allow=${2:?--allow_spills needs a pattern}
  shift 2
fi
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--allow_spills REGEX] PTXAS_LOG..." >&2
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
  # A spill figure follows "Function properties for NAME" on the next line,
  # or stands in the warning line that quotes NAME.
  spills=$(awk -v allow="$allow" '
    /Function properties for / { fn = $NF }
    /Registers are spilled to local memory in function / {
      split($0, q, "\047"); fn = q[2]
    }
    /(^|[^0-9])[1-9][0-9]* bytes spill (stores|loads)/ {
      if (allow != "" && fn ~ allow) { print "allowed: " fn > "/dev/stderr" }
      else { print NR ": " fn ": " $0 }
    }' "$log")
  if [[ -n $spills ]]; then
    echo "$spills"
    echo "FAIL: $log: registers spilled to local memory (above)" >&2
    status=1
  fi
  echo "$log: $functions function reports checked"
done
exit $status
