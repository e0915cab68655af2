#!/usr/bin/env bash
# The whole test suite: installs what is missing, then
#   1. bazel test //...                 (tests that need a GPU skip with a reason)
#   2. bazel test --config=asan ...     (ASan + LeakSanitizer + UBSan: service,
#                                        client, common and the integration tests)
#   3. bazel test --config=tsan ...     (ThreadSanitizer: the same tests as
#                                        ASan but the three named below)
#   4. fuzz/run_fuzzers.sh              (each libFuzzer target for FUZZ_SECONDS)
# Extra arguments go to every bazel command. SANITIZERS=0 skips steps 2-4
# (e.g. for a quick local run).
#
# TSan and the uninstrumented Debian libraries: TSan cannot see the
# synchronization inside Debian's gRPC and Abseil, so on its own it reports
# races between any two accesses that gRPC orders (an operation's start and
# its completion callback, a reactor's reactions and its OnDone). The files in
# tools/sanitizers/ add exactly those edges by interposing the library
# functions at the boundary (absl::Mutex, CondVar and Notification; gRPC's
# start_batch, completion queues, reaction tags and the callback server's
# OnCancel/OnDone scheduling), and TSAN_OPTIONS (.bazelrc) has
# ignore_noninstrumented_modules=1, so memcpy/free/... called from inside
# those libraries are not counted as our accesses. Two suppressions
# (tools/sanitizers/defaults.cc) cover what the edges cannot reach: gRPC's
# own unjoined threads, and the Transfer service's generic handler, which is
# compiled inside libgrpc++ (races involving its reactions go unchecked).
# Nothing else is suppressed: a deliberate race in our code, in a gRPC
# callback or handler or between plain threads, is still reported (README:
# Sanitizers). One order stays invisible: a client call reaching the
# in-process server's handler over loopback. A test that sets up a fake
# server from its own thread while the server runs uses atomics for that
# (client/gemm_client_test.cc).
# Left out of the TSan step, and why:
#   tests:large_transfer_test: needs more than its 300 s under TSan;
#     chunked_transfer_test runs the same paths at small sizes.
#   tests:e2e_test, tests:tls_e2e_test, tests:replica_process_test,
#     tests:cli_limits_test, tests:server_flags_test, tests:fp8_cli_test, and the Python
#     client's tests (client/python/...): they
#     drive the gemm_server (and gemm_cli) binaries, which do not link tools/sanitizers (only tests do,
#     through //third_party:gtest); the same server and client code runs
#     under TSan in-process in the integration tests. The Python tests run
#     no C++ of their own for TSan to check.
# Time on the 2-core machine from a cold cache (2026-11-29): bazel test //...
# 7.7 minutes, then ASan 10.3, TSan 1.7, fuzzers 2.3 (build and 2 x 30 s):
# 22 minutes in all, when TSan ran on the seven tests without gRPC. TSan on
# the ASan set builds about what ASan builds, so expect it near ASan's 10
# minutes (not yet timed from a cold cache; with a warm one the step took
# 2.3 minutes, the tests themselves about 2): some 30 minutes in all.
set -uo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh || exit 1

asan_targets=(//service/... //client/... //tests/... //common/...)
tsan_targets=("${asan_targets[@]}" -//tests:large_transfer_test -//tests:e2e_test
  -//tests:tls_e2e_test -//tests:replica_process_test)
# tests:cli_limits_test, tests:server_flags_test, tests:fp8_cli_test and
# tests:shared_memory_cli_test drive the gemm_server (and gemm_cli) binaries
# too (as e2e_test does, for the same reason above).
tsan_targets+=(-//tests:cli_limits_test -//tests:server_flags_test -//tests:fp8_cli_test
  -//tests:shared_memory_cli_test)
# The Python client's tests start the gemm_server binary too.
tsan_targets+=(-//client/python/...)

log=$(mktemp)
rc=0
step() {  # name, command...
  local name="$1"
  shift
  echo "==== $name"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$log"
  local r=${PIPESTATUS[0]}
  echo "==== $name took $((SECONDS - t0)) s"
  [[ "$r" -eq 0 ]] || { echo "==== $name failed (exit $r)"; rc=1; }
}

step "bazel test //..." bazel test "$@" //...
if [[ "${SANITIZERS:-1}" != 0 ]]; then
  step "asan" bazel test --config=asan "$@" "${asan_targets[@]}"
  step "tsan" bazel test --config=tsan "$@" -- "${tsan_targets[@]}"
  step "fuzz" ./fuzz/run_fuzzers.sh "${FUZZ_SECONDS:-30}"
fi

# A one-line summary in the plain "N passed, N failed" form CI systems read
# (every bazel step's targets; a fuzzer run counts as one test).
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED|^fuzzers: .* no crash' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY)|^FAIL: .* found a problem' "$log")
rm -f "$log"
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"
