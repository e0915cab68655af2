#!/usr/bin/env bash
# The whole test suite: installs what is missing, then
#   1. bazel test //...                 (tests that need a GPU skip with a reason)
#   2. bazel test --config=asan ...     (ASan + LeakSanitizer + UBSan: service,
#                                        client, common and the integration tests)
#   3. bazel test --config=tsan ...     (ThreadSanitizer, on the tests below)
#   4. fuzz/run_fuzzers.sh              (each libFuzzer target for FUZZ_SECONDS)
# Extra arguments go to every bazel command. SANITIZERS=0 skips steps 2-4
# (e.g. for a quick local run).
#
# Why TSan runs on a list: Debian's gRPC is not instrumented, so TSan cannot
# see its synchronization and reports races inside every test that runs a
# gRPC server or channel. The list holds the tests whose threads are all our
# own (queue, batcher, CPU executor, retry policy, metrics, auth); absl::Mutex
# is made visible to TSan by tools/sanitizers/tsan_absl_mutex.cc.
#
# Time on the 2-core machine from a cold cache (2026-11-29): bazel test //...
# 7.7 minutes, then ASan 10.3, TSan 1.7, fuzzers 2.3 (build and 2 x 30 s):
# 22 minutes in all.
set -uo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh || exit 1

asan_targets=(//service/... //client/... //tests/... //common/...)
tsan_targets=(//service:request_queue_test //service:batcher_test //service:cpu_executor_test
  //service:launch_plan_test //service:metrics_test //service:auth_test
  //client:retry_policy_test)

log=$(mktemp)
rc=0
step() {  # name, command...
  local name="$1"
  shift
  echo "==== $name"
  "$@" 2>&1 | tee -a "$log"
  local r=${PIPESTATUS[0]}
  [[ "$r" -eq 0 ]] || { echo "==== $name failed (exit $r)"; rc=1; }
}

step "bazel test //..." bazel test "$@" //...
if [[ "${SANITIZERS:-1}" != 0 ]]; then
  step "asan" bazel test --config=asan "$@" "${asan_targets[@]}"
  step "tsan" bazel test --config=tsan "$@" "${tsan_targets[@]}"
  step "fuzz" ./fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-30}"
fi

# A one-line summary in the plain "N passed, N failed" form CI systems read
# (every bazel step's targets; a fuzzer run counts as one test).
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED|^fuzzers: .* no crash' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)|^FAIL: .* found a problem' "$log")
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"
