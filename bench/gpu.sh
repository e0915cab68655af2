#!/usr/bin/env bash
# The GPU runner: builds a suite's binaries here into a self-contained bundle,
# and runs a suite from a bundle on a machine with a GPU driver and the CUDA
# toolkit (no Bazel or gRPC needed there). bench/README.md describes the
# suites and names the benchmark of record for each figure in BASELINES.md.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: bench/gpu.sh bundle SUITE OUT_DIR [BAZEL_FLAG...]
       bench/gpu.sh run SUITE [BUNDLE_DIR] [--ab OTHER_BUNDLE_DIR] [--out DIR]
                        [--runs N] [--soak SECONDS] [--sweep] [--no-sanitizer]
                        [--arg BINARY=ARG]... [--b-env VAR=VALUE]...
       bench/gpu.sh suites
       bench/gpu.sh libs OUT_DIR BINARY...

bundle  builds SUITE's Bazel targets in this checkout (with BAZEL_FLAGs) and
        writes OUT_DIR/bin (the binaries), OUT_DIR/lib (the shared libraries
        they need beyond the C/C++ runtime, the GPU driver and CUDA),
        OUT_DIR/COMMIT (the commit, "dirty:" lines for uncommitted changes,
        the Bazel flags) and OUT_DIR/gpu.sh (this script). A bundle holds
        only the suite's binaries; bundle a suite to run that suite.
run     runs SUITE from BUNDLE_DIR (default: the bundle holding this copy of
        gpu.sh): prints the host and GPUs, runs the correctness tests, then
        the benchmarks. With --ab the tests run once per bundle and the
        benchmarks alternate A B A B ..., so both are measured in one call;
        both commits are printed. Logs go to --out DIR (default: a new
        temporary folder, printed at the end); summaries go to stdout.
suites  lists the suites and their Bazel targets.
libs    the bundler's copier alone: BINARYs into OUT_DIR/bin and their
        shared libraries into OUT_DIR/lib.

run options:
  --ab DIR        the B bundle (same suite) to alternate with BUNDLE_DIR (A)
  --out DIR       folder for the logs
  --runs N        benchmark passes (each A then B under --ab); default 2 with
                  --ab, else 1; the overload suite's burst repeats, default 10
  --soak SECONDS  gpu_server_test --soak_seconds (serving 20, soak 600, else 5)
  --sweep         schedules suite: also run schedule_sweep
  --no-sanitizer  skip the compute-sanitizer runs
  --arg BIN=ARG   append ARG to BIN's command line (repeatable), for example
                  --arg 'kernel_bench=bf16 8192' --arg 'schedule_bench=sk '
  --b-env VAR=VAL set VAR=VAL for the B runs only (repeatable), for an A/B of
                  one build's run-time setting: pass the same bundle twice
Environment: CUDA_HOME (default /usr/local/cuda) for compute-sanitizer and
the CUDA libraries; REJECT_P99_MS (default 10) for the overload suite;
TUNING_TABLE (default the bundle's tables/nvidia_h200.table) for the
portfolio suite.
EOF
}

# Suites: their Bazel targets. The binary of a target is its name.
declare -A TARGETS=(
  [kernels]="//kernels:gemm_gpu_test //bench:kernel_bench"
  [schedules]="//kernels:schedules_gpu_test //bench:schedule_bench //bench:schedule_sweep"
  [serving]="//tests:gpu_server_test //bench:staging_bench //bench:serving_gpu_bench"
  [transport]="//bench:transfer_bench //bench:service_bench"
  [multi-gpu]="//bench:multi_gpu_bench"
  [soak]="//tests:gpu_server_test"
  [faults]="//tests:gpu_fault_test"
  [peaks]="//tests:gpu_peaks_test"
  [power]="//bench:power_probe"
  [tune]="//kernels/cublas:cublas_gemm_gpu_test //bench:tune_portfolio"
  [overload]="//tests:overload_test //client:gemm_cli"
  [ab]="//kernels:gemm_gpu_test //kernels:schedules_gpu_test //tests:gpu_server_test //bench:kernel_bench //bench:schedule_bench"
  [determinism]="//tests:determinism_gpu_test //bench:determinism_bench"
  [portfolio]="//tests:gpu_server_test //bench:service_portfolio_bench"
  [fp8]="//kernels:fp8_gemm_gpu_test //tests:gpu_fp8_server_test //bench:fp8_bench //bench:fp8_service_bench"
)
SUITE_ORDER="kernels schedules serving transport multi-gpu soak faults peaks power tune overload ab determinism portfolio fp8"
declare -A ABOUT=(
  [kernels]="dense kernels beside cuBLAS; GPU correctness test, sanitizers"
  [schedules]="stream-K, split-K, skinny, grouped beside cuBLAS; schedule GPU test, sanitizer"
  [serving]="server on the CUDA executor, staging copies, one request beside its parts"
  [transport]="service and chunked transfers beside a plain gRPC echo (CPU or GPU)"
  [multi-gpu]="requests/s on one GPU and on every visible GPU"
  [soak]="gpu_server_test with a long --soak_seconds"
  [faults]="GPU faults injected under load (hung kernel, sticky error), each test in its own process"
  [peaks]="peak rates set by flag and re-measured (SIGHUP's path) while clients load the server"
  [power]="ours and cuBLAS each alone for seconds, nvidia-smi sampling beside"
  [tune]="cuBLAS members' GPU test; a tuning table, then its choices beside cuBLAS and our heuristic"
  [overload]="10x burst, reject p99 under REJECT_P99_MS on a host with cores to spare"
  [ab]="a kernel change against its base: tests once per bundle, kernel_bench and schedule_bench alternated"
  [determinism]="batch-invariant results: the determinism GPU test (writes its digests), then the contract's cost"
  [portfolio]="the server with a tuning table (every member right, its soak), then table vs heuristic vs cublas under load"
  [fp8]="FP8 kernel and FP8 served by the CUDA backend: GPU tests, sanitizer; precision at long K; beside cuBLASLt FP8 and our bf16 kernel"
)

die() {
  echo "gpu.sh: $*" >&2
  exit 2
}

check_suite() {
  [[ -n ${1:-} ]] || die "no SUITE given (bench/gpu.sh suites lists them)"
  [[ -n ${TARGETS[$1]:-} ]] || die "unknown suite '$1' (one of: $SUITE_ORDER)"
}

list_suites() {
  local s
  for s in $SUITE_ORDER; do
    printf '%-10s %s\n           %s\n' "$s" "${ABOUT[$s]}" "${TARGETS[$s]}"
  done
}

# ---------------------------------------------------------------- bundling

# Libraries every machine that runs a bundle has: the C and C++ runtimes and
# the loader, and the GPU driver and CUDA libraries, which must match the
# machine's own driver.
system_lib() {
  case $1 in
    linux-vdso.so* | linux-gate.so* | ld-linux*.so* | libc.so* | libm.so* | libdl.so* | \
      librt.so* | libpthread.so* | libstdc++.so* | libgcc_s.so* | libcuda.so* | \
      libnvidia*.so* | libcublas*.so* | libcudart.so*)
      return 0 ;;
  esac
  return 1
}

# copy_with_libs OUT_DIR BINARY...: BINARYs into OUT_DIR/bin, the shared
# libraries ldd resolves for them (all of them: ldd lists the transitive
# closure) into OUT_DIR/lib, except system_lib ones.
copy_with_libs() {
  local out=$1 bin line name path missing=0
  shift
  mkdir -p "$out/bin" "$out/lib" || return 1
  for bin in "$@"; do
    [[ -f $bin ]] || { echo "gpu.sh: no binary $bin" >&2; return 1; }
    cp -fL "$bin" "$out/bin/" && chmod u+w "$out/bin/$(basename "$bin")" || return 1
    while IFS= read -r line; do
      # "libfoo.so.1 => /path/libfoo.so.1 (0x...)", "libbar.so => not found",
      # or "/lib64/ld-linux-x86-64.so.2 (0x...)".
      name=$(awk '{print $1}' <<<"$line")
      name=${name##*/}
      [[ -n $name ]] || continue
      system_lib "$name" && continue
      if [[ $line == *"not found"* ]]; then
        echo "gpu.sh: $bin needs $name, which ldd does not find" >&2
        missing=1
        continue
      fi
      path=$(sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p' <<<"$line")
      [[ -n $path ]] || continue
      [[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name" || return 1
    done < <(ldd "$bin" 2>/dev/null)
  done
  return $missing
}

cmd_bundle() {
  local suite=${1:-} out=${2:-}
  check_suite "$suite"
  [[ -n $out ]] || die "bundle: no OUT_DIR given"
  shift 2
  local flags=("$@") root targets bindir bins=() t
  root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null) ||
    die "bundle: $(dirname "$0") is not in a git checkout"
  read -ra targets <<<"${TARGETS[$suite]}"
  mkdir -p "$out" || die "bundle: cannot create $out"
  out=$(cd "$out" && pwd)
  (cd "$root" && bazel build "${flags[@]}" "${targets[@]}") || die "bundle: bazel build failed"
  bindir=$(cd "$root" && bazel info "${flags[@]}" bazel-bin 2>/dev/null) ||
    die "bundle: bazel info bazel-bin failed"
  for t in "${targets[@]}"; do
    t=${t#//}
    bins+=("$bindir/${t/://}")
  done
  rm -rf "${out:?}/bin" "${out:?}/lib"
  copy_with_libs "$out" "${bins[@]}" || die "bundle: copying binaries and libraries failed"
  {
    git -C "$root" rev-parse HEAD
    git -C "$root" status --short | sed 's/^/dirty: /'
    echo "suite: $suite"
    echo "bazel flags: ${flags[*]}"
  } >"$out/COMMIT"
  cp "$0" "$out/gpu.sh" && chmod +x "$out/gpu.sh"
  # The committed tuning tables, for the suites that load one.
  mkdir -p "$out/tables" && cp "$root"/kernels/tuning/tables/*.table "$out/tables/" ||
    die "bundle: copying the tuning tables failed"
  echo "bundle: $suite in $out ($(du -sh "$out" | cut -f1)); commit $(head -1 "$out/COMMIT")"
  grep '^dirty:' "$out/COMMIT" | head -20 || true  # a clean tree has none
}

# ----------------------------------------------------------------- running

OUT=
STATUS=0
declare -A EXTRA_ARGS=()
B_ENV=()

smi() {
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
}

# extra_args BINARY: the --arg values for BINARY, one per line.
extra_args() {
  printf '%s' "${EXTRA_ARGS[$1]:-}"
}

# bundle_env DIR TAG: the environment for running DIR's binaries (B gets
# --b-env), as arguments to env.
bundle_env() {
  local dir=$1 tag=$2
  printf '%s\n' "LD_LIBRARY_PATH=$dir/lib:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-}"
  if [[ $tag == B ]]; then
    local kv
    for kv in "${B_ENV[@]}"; do printf '%s\n' "$kv"; done
  fi
}

# launch DIR TAG SECONDS LOG BINARY ARG...: DIR/bin/BINARY ARG... (then its
# --arg values) under timeout, output in $OUT/LOG. Sets RC; a non-zero rc
# marks the run failed.
launch() {
  local dir=$1 tag=$2 secs=$3 log=$4 bin=$5 envs=() extra=()
  shift 5
  mapfile -t envs < <(bundle_env "$dir" "$tag")
  mapfile -t extra < <(extra_args "$bin")
  env "${envs[@]}" timeout "$secs" "$dir/bin/$bin" "$@" "${extra[@]}" >"$OUT/$log" 2>&1
  RC=$?
  [[ $RC -eq 0 ]] || STATUS=1
}

# sanitize DIR TAG TOOL SECONDS LOG BINARY FILTER: compute-sanitizer TOOL on
# a gtest FILTER of BINARY.
sanitize() {
  local dir=$1 tag=$2 tool=$3 secs=$4 log=$5 bin=$6 filter=$7 envs=()
  $SANITIZER || return 0
  if ! command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer $tool $bin: not found, skipped"
    return 0
  fi
  mapfile -t envs < <(bundle_env "$dir" "$tag")
  echo "== [$tag] compute-sanitizer $tool: $bin --gtest_filter=$filter"
  env "${envs[@]}" timeout "$secs" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$dir/bin/$bin" --gtest_filter="$filter" >"$OUT/$log" 2>&1
  local rc=$?
  [[ $rc -eq 0 ]] || STATUS=1
  echo "rc=$rc"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |Invalid|out of bounds" "$OUT/$log" | head -12
}

# gtest DIR TAG SECONDS BINARY ARG...: a GPU correctness test; prints rc and
# the pass/fail lines. Returns 1 on a hang (timeout or the test's watchdog),
# so that nothing runs on a wedged GPU.
gtest() {
  local dir=$1 tag=$2 secs=$3 bin=$4
  shift 4
  local log=${tag}_$bin.log
  echo "== [$tag] $bin $*"
  launch "$dir" "$tag" "$secs" "$log" "$bin" "$@"
  echo "rc=$RC"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure|WATCHDOG|soak:|, lost [0-9]+$" "$OUT/$log" | head -30
  if [[ $RC -eq 124 ]] || grep -q WATCHDOG "$OUT/$log"; then
    echo "$bin hung: the rest of the run is skipped"
    tail -5 "$OUT/$log"
    return 1
  fi
}

# bench DIR TAG SECONDS PASS BINARY ARG...: a benchmark; its output is
# printed whole and kept in $OUT/TAG_BINARY_PASS.log.
bench() {
  local dir=$1 tag=$2 secs=$3 pass=$4 bin=$5
  shift 5
  local log=${tag}_${bin}_$pass.log
  echo "== [$tag] $bin pass $pass"
  launch "$dir" "$tag" "$secs" "$log" "$bin" "$@"
  grep -v "\] \[info\]" "$OUT/$log"
  echo "rc=$RC"
}

# sass_check DIR BINARY: per Hopper GEMM kernel, its HGMMA count, from
# cuobjdump (when present); counts the kernels with none. The build's
# ptxas checks already fail on serialized wgmma and spills.
sass_check() {
  local dir=$1 bin=$2
  command -v cuobjdump >/dev/null || return 0
  cuobjdump --dump-sass "$dir/bin/$bin" 2>&1 | awk '
    /Function :/ { if (name) printf "%s HGMMA=%d\n", name, h; name=$3; h=0 }
    /HGMMA/ { h++ }
    END { if (name) printf "%s HGMMA=%d\n", name, h }' >"$OUT/sass_$bin.txt"
  echo "== SASS of $bin: $(grep -c Sm90Gemm "$OUT/sass_$bin.txt") sm90 GEMM kernels," \
    "$(grep Sm90Gemm "$OUT/sass_$bin.txt" | grep -c 'HGMMA=0$') without HGMMA"
}

# power_sampled DIR TAG PASS: power_probe with nvidia-smi sampling the SM
# clock, power, temperature and throttle reasons every 20 ms beside it, then
# its per-phase table (power_probe join).
power_sampled() {
  local dir=$1 tag=$2 pass=$3 envs=() extra=()
  local power=power.draw reasons=clocks_event_reasons.active
  # Instantaneous power where the driver has it (power.draw is a 1 s average
  # on recent drivers); the reasons field under its older name otherwise.
  nvidia-smi --query-gpu=power.draw.instant --format=csv,noheader >/dev/null 2>&1 &&
    power=power.draw.instant
  nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 ||
    reasons=clocks_throttle_reasons.active
  local stem=${tag}_power_$pass
  nvidia-smi --query-gpu=timestamp,clocks.sm,$power,temperature.gpu,$reasons \
    --format=csv,noheader,nounits -lms 20 >"$OUT/$stem.smi.csv" 2>&1 &
  local smi_pid=$!
  sleep 1
  mapfile -t envs < <(bundle_env "$dir" "$tag")
  mapfile -t extra < <(extra_args power_probe)
  echo "== [$tag] power_probe pass $pass"
  env "${envs[@]}" timeout 300 "$dir/bin/power_probe" run "$OUT/$stem.phases" "${extra[@]}" \
    >"$OUT/$stem.log" 2>&1
  local rc=$?
  [[ $rc -eq 0 ]] || STATUS=1
  sleep 0.5
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  env "${envs[@]}" "$dir/bin/power_probe" join "$OUT/$stem.phases" "$OUT/$stem.smi.csv" \
    >"$OUT/$stem.join.txt" 2>&1
  echo "rc=$rc"
  cat "$OUT/$stem.join.txt"
}

# The suites: tests_SUITE DIR TAG runs the correctness part (once per
# bundle; returns 1 when the GPU hung) and bench_SUITE DIR TAG PASS one
# pass of the benchmarks (alternated under --ab).

tests_kernels() {
  sass_check "$1" gemm_gpu_test
  gtest "$1" "$2" 200 gemm_gpu_test || return 1
  sanitize "$1" "$2" memcheck 150 "$2_memcheck_gemm.log" gemm_gpu_test \
    'GemmGpuTest.OutputTypesAndAlphaBeta:GemmGpuTest.TightLeadingDimensionsFallBackToPortable:GemmGpuTest.ForcedTileConfigurations:GemmGpuTest.Tf32AnyLayoutThroughOperandCopies'
  sanitize "$1" "$2" racecheck 100 "$2_racecheck_gemm.log" gemm_gpu_test \
    'GemmGpuTest.OutputTypesAndAlphaBeta:GemmGpuTest.ForcedTileConfigurations'
}
bench_kernels() { bench "$1" "$2" 300 "$3" kernel_bench; }

tests_schedules() {
  sass_check "$1" schedules_gpu_test
  gtest "$1" "$2" 200 schedules_gpu_test || return 1
  sanitize "$1" "$2" memcheck 150 "$2_memcheck_reduction.log" schedules_gpu_test '*SplitKReductionKernel*'
  sanitize "$1" "$2" memcheck 200 "$2_memcheck_paired.log" schedules_gpu_test '*PairedSplitK*'
  sanitize "$1" "$2" memcheck 150 "$2_memcheck_grouped.log" schedules_gpu_test '*GroupedMatchesSingleLaunches*'
}
bench_schedules() {
  bench "$1" "$2" 300 "$3" schedule_bench
  if $SWEEP; then bench "$1" "$2" 300 "$3" schedule_sweep; fi
}

tests_serving() {
  gtest "$1" "$2" $((SOAK + 200)) gpu_server_test --soak_seconds="$SOAK" || return 1
  sanitize "$1" "$2" memcheck 150 "$2_memcheck_server.log" gpu_server_test \
    '*OneRequestOfMixedShapesIsOneGroupedLaunch:*MixedShapesInOneRequest'
}
bench_serving() {
  bench "$1" "$2" 200 "$3" staging_bench
  bench "$1" "$2" 300 "$3" serving_gpu_bench
}

tests_transport() { :; }
bench_transport() {
  bench "$1" "$2" 300 "$3" transfer_bench
  bench "$1" "$2" 300 "$3" service_bench
}

tests_multi-gpu() { :; }
bench_multi-gpu() { bench "$1" "$2" 400 "$3" multi_gpu_bench; }

tests_soak() { gtest "$1" "$2" $((SOAK + 200)) gpu_server_test --soak_seconds="$SOAK"; }
bench_soak() { :; }

# A sticky error leaves the process's CUDA context unusable, so each fault
# test runs in a process of its own.
tests_faults() {
  local t
  for t in AHungKernelPastTheWatchdogTakesTheGpuOutAndEveryCallIsAnswered \
    TwoExecutorsOnOneGpuMoveWorkToTheHealthyOne \
    AStickyErrorTakesTheGpuOutAndEveryCallIsAnswered; do
    gtest "$1" "$2" 120 gpu_fault_test --gtest_filter="GpuFaultTest.$t" || return 1
  done
}
bench_faults() { :; }

tests_peaks() { gtest "$1" "$2" 180 gpu_peaks_test; }
bench_peaks() { :; }

tests_power() { :; }
bench_power() { power_sampled "$1" "$2" "$3"; }

# tune: the table lands in the output folder, beside the logs.
tests_tune() { gtest "$1" "$2" 300 cublas_gemm_gpu_test; }
bench_tune() {
  local table="$OUT/$2_tuning_$3.table"
  bench "$1" "$2" 600 "$3-tune" tune_portfolio tune --table="$table"
  bench "$1" "$2" 360 "$3-bench" tune_portfolio bench --table="$table"
}

# determinism: the lone results' digests land in the output folder.
# portfolio: TUNING_TABLE (default the bundle's H200 table) is the table
# the tests and the benchmark load; the tests say whether its key matches.
portfolio_table() { printf '%s' "${TUNING_TABLE:-$1/tables/nvidia_h200.table}"; }
tests_portfolio() {
  gtest "$1" "$2" $((SOAK + 300)) gpu_server_test --gtest_filter='GpuPortfolioTest.*' \
    --soak_seconds="$SOAK" --tuning_table="$(portfolio_table "$1")"
}
bench_portfolio() {
  bench "$1" "$2" 300 "$3" service_portfolio_bench --tuning_table="$(portfolio_table "$1")"
}

tests_determinism() {
  DETERMINISM_DIGEST_OUT="$OUT/$2_determinism_digests.txt" gtest "$1" "$2" 300 determinism_gpu_test
}
bench_determinism() { bench "$1" "$2" 300 "$3" determinism_bench; }

tests_fp8() {
  sass_check "$1" fp8_gemm_gpu_test
  gtest "$1" "$2" 300 fp8_gemm_gpu_test || return 1
  sanitize "$1" "$2" memcheck 150 "$2_memcheck_fp8.log" fp8_gemm_gpu_test \
    'Fp8GemmGpuTest.EveryScaleModePair:Fp8GemmGpuTest.OddShapesAndKTails:Fp8GemmGpuTest.Batched:Fp8GemmGpuTest.OperandsThatAreNotKMajorOrOffTheGridRunFromCopies'
  gtest "$1" "$2" $((SOAK + 300)) gpu_fp8_server_test --fp8_soak_seconds="$SOAK" || return 1
  sanitize "$1" "$2" memcheck 300 "$2_memcheck_fp8_server.log" gpu_fp8_server_test \
    'GpuFp8ServerTest.EveryFormatPairAndScaleModePair:GpuFp8ServerTest.SameShapeRequestsShareStridedBatchedLaunches'
}
bench_fp8() {
  bench "$1" "$2" 400 "$3" fp8_bench
  bench "$1" "$2" 300 "$3" fp8_service_bench
}

# overload: the whole test once, then the 10x burst once per pass, each
# against the issue's bound on the rejection p99.
tests_overload() {
  echo "== [$2] overload_test (reject p99 bound ${REJECT_P99_MS} ms)"
  launch "$1" "$2" 300 "$2_overload_test.log" overload_test "$1/bin/gemm_cli" \
    --reject_p99_ms="$REJECT_P99_MS"
  echo "rc=$RC"
  grep -E "burst:|oversized|Failure|\[  (PASSED|FAILED|SKIPPED) " "$OUT/$2_overload_test.log"
}
bench_overload() {
  launch "$1" "$2" 120 "$2_burst_$3.log" overload_test "$1/bin/gemm_cli" \
    --reject_p99_ms="$REJECT_P99_MS" --gtest_filter='*BurstOfTenTimesCapacity*'
  echo "[$2] burst $3 rc=$RC: $(grep -E 'burst:|Failure' "$OUT/$2_burst_$3.log" | tr '\n' ' ')"
}

tests_ab() {
  gtest "$1" "$2" 200 gemm_gpu_test || return 1
  gtest "$1" "$2" 200 schedules_gpu_test || return 1
  gtest "$1" "$2" $((SOAK + 200)) gpu_server_test --soak_seconds="$SOAK" || return 1
}
bench_ab() {
  bench "$1" "$2" 300 "$3" kernel_bench
  bench "$1" "$2" 300 "$3" schedule_bench
}

# check_bundle DIR SUITE: DIR holds SUITE's binaries.
check_bundle() {
  local dir=$1 suite=$2 t
  [[ -d $dir/bin ]] || die "run: $dir is not a bundle (no bin/): make one with bench/gpu.sh bundle $suite DIR"
  for t in ${TARGETS[$suite]}; do
    [[ -x $dir/bin/${t##*:} ]] || die "run: $dir has no ${t##*:}, which suite $suite runs (bundle it with: bench/gpu.sh bundle $suite DIR)"
  done
}

commit_of() {
  if [[ -r $1/COMMIT ]]; then
    sed -n '1p; /^dirty:/p' "$1/COMMIT" | head -20
  else
    echo "(no COMMIT file)"
  fi
}

cmd_run() {
  local suite=${1:-} a=${2:-} self
  check_suite "$suite"
  shift
  if [[ -z $a || $a == --* ]]; then
    # The copy of gpu.sh in a bundle runs its own bundle by default.
    self=$(cd "$(dirname "$0")" && pwd)
    [[ -d $self/bin && -r $self/COMMIT ]] || die "run: no BUNDLE_DIR given"
    a=$self
  else
    shift
  fi
  local b="" runs="" kv
  SOAK="" SWEEP=false SANITIZER=true
  while [[ $# -gt 0 ]]; do
    case $1 in
      --ab) [[ $# -ge 2 ]] || die "run: --ab needs a folder"; b=$2; shift 2 ;;
      --out) [[ $# -ge 2 ]] || die "run: --out needs a folder"; OUT=$2; shift 2 ;;
      --runs)
        [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "run: --runs needs a positive count"
        runs=$2; shift 2 ;;
      --soak)
        [[ ${2:-} =~ ^[0-9]+$ ]] || die "run: --soak needs seconds"
        SOAK=$2; shift 2 ;;
      --sweep) SWEEP=true; shift ;;
      --no-sanitizer) SANITIZER=false; shift ;;
      --arg)
        kv=${2:-}
        [[ $kv == ?*=* ]] || die "run: --arg needs BINARY=ARG"
        EXTRA_ARGS[${kv%%=*}]+="${kv#*=}"$'\n'
        shift 2 ;;
      --b-env)
        kv=${2:-}
        [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "run: --b-env needs VAR=VALUE"
        B_ENV+=("$kv")
        shift 2 ;;
      *) die "run: unknown argument '$1' (bench/gpu.sh --help)" ;;
    esac
  done
  [[ ${#B_ENV[@]} -eq 0 || -n $b ]] || die "run: --b-env needs --ab (the same bundle may be given)"
  [[ -d $a ]] || die "run: no bundle folder $a"
  a=$(cd "$a" && pwd)
  check_bundle "$a" "$suite"
  if [[ -n $b ]]; then
    [[ -d $b ]] || die "run: no bundle folder $b"
    b=$(cd "$b" && pwd)
    check_bundle "$b" "$suite"
  fi
  if [[ -z $runs ]]; then
    runs=1
    [[ -n $b ]] && runs=2
    [[ $suite == overload ]] && runs=10
  fi
  if [[ -z $SOAK ]]; then
    case $suite in
      serving) SOAK=20 ;;
      soak) SOAK=600 ;;
      *) SOAK=5 ;;
    esac
  fi
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  [[ -d $CUDA_HOME/bin ]] && PATH=$PATH:$CUDA_HOME/bin
  REJECT_P99_MS=${REJECT_P99_MS:-10}
  if [[ -z $OUT ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpu-$suite.XXXXXX") || die "run: mktemp failed"
  fi
  mkdir -p "$OUT" || die "run: cannot create $OUT"
  OUT=$(cd "$OUT" && pwd)

  {
    echo "suite: $suite"
    date -u
    echo "host: $(hostname) $(nproc) cores, $(uname -r)"
    echo "A: $a"
    commit_of "$a" | sed 's/^/A /'
    if [[ -n $b ]]; then
      echo "B: $b${B_ENV[*]:+ with ${B_ENV[*]}}"
      commit_of "$b" | sed 's/^/B /'
    fi
    echo "before: $(smi)"
  } | tee "$OUT/device.txt"

  local dirs=("$a") tags=(A) i pass
  if [[ -n $b ]]; then
    dirs+=("$b")
    tags+=(B)
  fi
  local hung=false
  for i in "${!dirs[@]}"; do
    "tests_$suite" "${dirs[$i]}" "${tags[$i]}" || { hung=true; STATUS=1; break; }
  done
  if ! $hung; then
    for ((pass = 1; pass <= runs; pass++)); do
      for i in "${!dirs[@]}"; do
        "bench_$suite" "${dirs[$i]}" "${tags[$i]}" "$pass"
      done
    done
  fi

  {
    echo "after: $(smi)"
    echo "A $(head -1 "$a/COMMIT" 2>/dev/null)${b:+  B $(head -1 "$b/COMMIT" 2>/dev/null)}"
    echo "logs: $OUT"
    echo "status: $([[ $STATUS -eq 0 ]] && echo ok || echo FAILED)"
  } | tee -a "$OUT/device.txt"
  return $STATUS
}

case ${1:-} in
  bundle) shift; cmd_bundle "$@" ;;
  run) shift; cmd_run "$@"; exit ;;
  suites) list_suites ;;
  libs)
    [[ $# -ge 3 ]] || die "libs: usage: bench/gpu.sh libs OUT_DIR BINARY..."
    shift
    copy_with_libs "$@" || exit 1 ;;
  -h | --help | help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "gpu.sh: unknown command '$1'" >&2; usage >&2; exit 2 ;;
esac
