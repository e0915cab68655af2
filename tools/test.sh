#!/usr/bin/env bash
# The whole test suite: installs what is missing, then `bazel test //...`.
# Tests that need a GPU skip with a reason on a machine without one.
# Extra arguments go to bazel (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh || exit 1

log=$(mktemp)
bazel test "$@" //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# A one-line summary in the plain "N passed, N failed" form CI systems read.
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)' "$log")
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"
