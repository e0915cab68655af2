#!/usr/bin/env bash
# CPU-only test of bench/gpu.sh: its usage, suite list and argument errors,
# the library copier, and a run of two stand-in bundles (shell scripts in
# place of the transport suite's binaries) under --ab, which must alternate
# A B A B, pass --arg and --b-env through, and report a failing benchmark.
# usage: gpu_sh_test.sh PATH_TO_GPU_SH
set -uo pipefail
gpu=$1
T=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_rc RC CMD...: CMD exits RC.
expect_rc() {
  local want=$1 got
  shift
  "$@" >"$T/out.txt" 2>&1
  got=$?
  [[ $got -eq $want ]] || { fail "'$*' exited $got, not $want"; cat "$T/out.txt" >&2; }
}

expect_rc 0 "$gpu" --help
grep -q '^usage: bench/gpu.sh bundle SUITE OUT_DIR' "$T/out.txt" || fail "--help prints no usage"
expect_rc 2 "$gpu"
expect_rc 2 "$gpu" frobnicate

expect_rc 0 "$gpu" suites
for s in kernels schedules serving transport multi-gpu soak power overload ab; do
  grep -q "^$s " "$T/out.txt" || fail "suites does not list $s"
done
grep -q '//kernels:gemm_gpu_test //kernels:schedules_gpu_test //tests:gpu_server_test //bench:kernel_bench //bench:schedule_bench' \
  "$T/out.txt" || fail "suite ab is not the A/B set"

expect_rc 2 "$gpu" bundle
expect_rc 2 "$gpu" bundle nosuch "$T/b"
expect_rc 2 "$gpu" bundle kernels
expect_rc 2 "$gpu" run kernels
expect_rc 2 "$gpu" run kernels "$T/nonexistent"
expect_rc 2 "$gpu" run kernels "$T"
grep -q 'not a bundle' "$T/out.txt" || fail "run on a folder without bin/ does not say so"

# The copier: a system binary into bin/, none of the C runtime into lib/.
expect_rc 0 "$gpu" libs "$T/libs" "$(command -v ls)"
[[ -x $T/libs/bin/ls ]] || fail "libs did not copy the binary"
if compgen -G "$T/libs/lib/libc.so*" >/dev/null || compgen -G "$T/libs/lib/ld-linux*" >/dev/null; then
  fail "libs copied the C runtime"
fi
expect_rc 1 "$gpu" libs "$T/libs" "$T/no_such_binary"

# Two stand-in bundles of the transport suite.
for tag in a b; do
  mkdir -p "$T/$tag/bin" "$T/$tag/lib"
  echo "commit-$tag" >"$T/$tag/COMMIT"
  for bin in transfer_bench service_bench; do
    cat >"$T/$tag/bin/$bin" <<EOF
#!/usr/bin/env bash
echo "$tag $bin args=[\$*] knob=\${KNOB:-unset}"
[[ "$tag $bin" != "b service_bench" || -z \${FAIL_B:-} ]]
EOF
    chmod +x "$T/$tag/bin/$bin"
  done
done

expect_rc 2 "$gpu" run transport "$T/a" --b-env KNOB=1
expect_rc 2 "$gpu" run transport "$T/a" --runs 0
expect_rc 2 "$gpu" run transport "$T/a" --arg noequals
expect_rc 2 "$gpu" run transport "$T/a" --bogus
expect_rc 2 "$gpu" run kernels "$T/a"
grep -q 'has no gemm_gpu_test' "$T/out.txt" || fail "run of a suite the bundle lacks does not say so"

expect_rc 0 "$gpu" run transport "$T/a" --ab "$T/b" --out "$T/log" \
  --arg 'transfer_bench=--sizes_mib=1' --arg 'transfer_bench=two words' --b-env KNOB=on
order=$(grep -o '^== \[[AB]\] [a-z_]* pass [0-9]' "$T/out.txt" | tr '\n' ,)
want="== [A] transfer_bench pass 1,== [A] service_bench pass 1,== [B] transfer_bench pass 1,== [B] service_bench pass 1,"
want+="== [A] transfer_bench pass 2,== [A] service_bench pass 2,== [B] transfer_bench pass 2,== [B] service_bench pass 2,"
[[ $order == "$want" ]] || fail "--ab order is '$order'"
grep -q '^a transfer_bench args=\[--sizes_mib=1 two words\] knob=unset$' "$T/out.txt" ||
  fail "A's transfer_bench did not get the --arg values, or got --b-env"
grep -q '^b service_bench args=\[\] knob=on$' "$T/out.txt" || fail "B's service_bench did not get --b-env"
grep -q '^A commit-a$' "$T/out.txt" || fail "A's commit not printed"
grep -q '^B commit-b$' "$T/out.txt" || fail "B's commit not printed"
[[ -s $T/log/B_service_bench_2.log && -s $T/log/device.txt ]] || fail "logs not in --out"

# A bundle's own copy of gpu.sh runs that bundle by default.
cp "$gpu" "$T/a/gpu.sh"
expect_rc 0 "$T/a/gpu.sh" run transport --out "$T/log3"
grep -q '^a service_bench args=\[\] knob=unset$' "$T/out.txt" || fail "a bundle's gpu.sh does not run its bundle"

FAIL_B=1 expect_rc 1 "$gpu" run transport "$T/a" --ab "$T/b" --out "$T/log2" --runs 1
grep -q '^status: FAILED' "$T/out.txt" || fail "a failing benchmark does not fail the run"

if [[ $failures -ne 0 ]]; then
  echo "$failures failures" >&2
  exit 1
fi
echo PASS
