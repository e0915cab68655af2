#!/usr/bin/env bash
# ptxas_check.sh against reports in the form ptxas -v writes them: a clean
# one passes; spill stores, spill loads or a C75xx warning fail, as does a
# missing report.
# usage: ptxas_check_test.sh PATH_TO_PTXAS_CHECK_SH
set -uo pipefail
check=$1
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

report() {
  cat <<EOT
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z1kPfPKfi' for 'sm_90a'
ptxas info    : Function properties for _Z1kPfPKfi
    $1 bytes stack frame, $2 bytes spill stores, $3 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, $1 bytes cumulative stack size
ptxas info    : Compile time = 200.375 ms
EOT
}

# expect RC NAME: ptxas_check.sh on $T/NAME exits RC.
expect() {
  local want=$1 got
  "$check" "$T/$2" >"$T/out.txt" 2>&1
  got=$?
  if [[ $got -ne $want ]]; then
    echo "FAIL: $2: exit $got, not $want" >&2
    cat "$T/out.txt" >&2
    failures=$((failures + 1))
  fi
}

report 0 0 0 >"$T/clean"
expect 0 clean
report 16 10 0 >"$T/stores"
expect 1 stores
report 16 0 100 >"$T/loads"
expect 1 loads
{
  report 0 0 0
  echo "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized"
} >"$T/serialized"
expect 1 serialized
expect 1 missing
if ! "$check" "$T/clean" "$T/clean" >/dev/null 2>&1; then
  echo "FAIL: two clean reports" >&2
  failures=$((failures + 1))
fi
# An allowed function's spills pass; another function's still fail.
if ! "$check" --allow_spills 'Z1k' "$T/stores" >/dev/null 2>&1; then
  echo "FAIL: allowed spills" >&2
  failures=$((failures + 1))
fi
if "$check" --allow_spills 'OtherKernel' "$T/stores" >/dev/null 2>&1; then
  echo "FAIL: spills of a function the pattern does not name" >&2
  failures=$((failures + 1))
fi
{
  report 0 0 0
  echo "ptxas warning : Registers are spilled to local memory in function '_Z1kPfPKfi', 4 bytes spill stores, 4 bytes spill loads"
} >"$T/warning"
expect 1 warning
if ! "$check" --allow_spills '^_Z1k' "$T/warning" >/dev/null 2>&1; then
  echo "FAIL: an allowed function named in the warning line" >&2
  failures=$((failures + 1))
fi
[[ $failures -eq 0 ]] && echo PASS
exit $((failures != 0))
