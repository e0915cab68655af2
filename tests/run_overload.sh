#!/usr/bin/env bash
# Runs the bundle made by tests/bundle_overload.sh: the whole overload test
# once, then the burst RUNS more times, each with the issue's bound on the
# rejection p99 (REJECT_P99_MS, default 10). Prints each "burst:" line and
# the host; the full logs go to $OUT.
# usage: bash .gpu/overload/run_overload.sh
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
echo "host: $(nproc) cores, $(uname -r), commit $(cat "$D/COMMIT" 2>/dev/null)"
rc=0
"$D/overload_test" "$D/gemm_cli" --reject_p99_ms="${REJECT_P99_MS:-10}" >"$OUT/overload.log" 2>&1 || rc=1
grep -E "burst:|oversized|\[  (PASSED|FAILED|SKIPPED) " "$OUT/overload.log"
for i in $(seq 1 "${RUNS:-10}"); do
  "$D/overload_test" "$D/gemm_cli" --reject_p99_ms="${REJECT_P99_MS:-10}" \
    --gtest_filter='*BurstOfTenTimesCapacity*' >"$OUT/burst_$i.log" 2>&1 || rc=1
  grep -E "burst:|Failure" "$OUT/burst_$i.log"
done
exit $rc
