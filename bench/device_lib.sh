# Sourced by the run_*_device.sh scripts on the GPU box (bench/bundle.sh puts
# it in every bundle beside them): the bundle folder D, its libraries on the
# loader path, the log folder OUT, and the shared helpers.
D=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"

# One line: GPU name, driver, clocks, power, temperature.
smi() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv,noheader
}

# sass_summary BINARY FILE: per kernel, its HGMMA count and local-memory
# (LDL/STL) instructions, from cuobjdump.
sass_summary() {
  cuobjdump --dump-sass "$1" 2>&1 | awk '
    /Function :/ { if (name) printf "%-100s HGMMA=%d LDL/STL=%d\n", name, h, l; name=$3; h=0; l=0 }
    /HGMMA/ { h++ } /[^A-Z](LDL|STL)[^A-Z]/ { l++ }
    END { if (name) printf "%-100s HGMMA=%d LDL/STL=%d\n", name, h, l }' >"$2"
}

# kernel_gpu_tests: gemm_gpu_test and schedules_gpu_test from $D, logs in
# $OUT/gemm_test.log and $OUT/schedules_test.log, summaries on stdout.
# Returns 1 when the schedule test hung (timeout or its watchdog), so the
# caller can skip what would follow a wedged GPU.
kernel_gpu_tests() {
  echo "== gemm_gpu_test"
  timeout 150 "$D/gemm_gpu_test" >"$OUT/gemm_test.log" 2>&1
  echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT/gemm_test.log" | head -8
  echo "== schedules_gpu_test"
  timeout 150 "$D/schedules_gpu_test" >"$OUT/schedules_test.log" 2>&1
  local rc=$?
  echo "rc=$rc"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[       OK|Failure|WATCHDOG|stream-K [0-9]|seed|_reduce" \
    "$OUT/schedules_test.log" | head -40
  if [ $rc -eq 124 ] || grep -q WATCHDOG "$OUT/schedules_test.log"; then
    echo "hang"; tail -5 "$OUT/schedules_test.log"; return 1
  fi
}

# device_begin / device_end: $OUT/device.txt with the date, the bundle's
# commit and the GPU's state before and after the run (printed at the end).
device_begin() {
  { date -u; cat "$D/COMMIT"; echo "before: $(smi)"; } >"$OUT/device.txt"
}
device_end() {
  echo "after: $(smi)" >>"$OUT/device.txt"
  cat "$OUT/device.txt"
}

# sm90_sass_check BINARY: sass_summary into $OUT/sass_summary.txt and one
# line: Hopper GEMM kernels, those without HGMMA, split-K reduction kernels.
sm90_sass_check() {
  sass_summary "$1" "$OUT/sass_summary.txt"
  echo "== SASS: $(grep -c Sm90Gemm "$OUT/sass_summary.txt") sm90 GEMM kernels, $(grep Sm90Gemm "$OUT/sass_summary.txt" | grep -c 'HGMMA=0') without HGMMA; reduction kernels: $(grep -c SplitKReduce "$OUT/sass_summary.txt")"
}

# memcheck TITLE SECONDS LOG BINARY FILTER [PATTERN]: compute-sanitizer
# memcheck (exit 9 on an error) on the gtest FILTER of BINARY, the log in
# $OUT/LOG; prints rc, the error summary, pass/fail lines and PATTERN.
memcheck() {
  echo "== compute-sanitizer memcheck: $1"
  timeout "$2" compute-sanitizer --tool memcheck --error-exitcode 9 "$4" \
    --gtest_filter="$5" >"$OUT/$3" 2>&1
  echo "rc=$?"
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) |Invalid|out of bounds${6:+|$6}" "$OUT/$3" | head -12
}

# power_probe_sampled DIR TAG [case...]: DIR/power_probe run with nvidia-smi
# sampling the SM clock, power, temperature and throttle reasons every 20 ms
# beside it; logs $OUT/probe_TAG.log, $OUT/smi_TAG.csv, the per-phase table
# in $OUT/join_TAG.txt (printed).
power_probe_sampled() {
  local dir=$1 tag=$2
  shift 2
  # Instantaneous power where the driver has it (power.draw is a 1 s average
  # on recent drivers); the event-reasons field under its older name otherwise.
  local power=power.draw reasons=clocks_event_reasons.active
  nvidia-smi --query-gpu=power.draw.instant --format=csv,noheader >/dev/null 2>&1 &&
    power=power.draw.instant
  nvidia-smi --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 ||
    reasons=clocks_throttle_reasons.active
  nvidia-smi --query-gpu=timestamp,clocks.sm,$power,temperature.gpu,$reasons \
    --format=csv,noheader,nounits -lms 20 >"$OUT/smi_$tag.csv" 2>&1 &
  local smi_pid=$!
  sleep 1
  LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 300 "$dir/power_probe" run \
    "$OUT/phases_$tag.txt" "$@" >"$OUT/probe_$tag.log" 2>&1
  echo "== power_probe $tag rc=$?"
  sleep 0.5
  kill $smi_pid
  wait $smi_pid 2>/dev/null
  LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH "$dir/power_probe" join "$OUT/phases_$tag.txt" \
    "$OUT/smi_$tag.csv" >"$OUT/join_$tag.txt"
  grep "^|" "$OUT/join_$tag.txt" | grep -v -- "---" | cut -d'|' -f2-7
}

# schedule_bench_ab BASE VARIANT: each bundle's schedule_bench twice,
# alternating base and variant; logs $OUT/bench_{base,variant}_{1,2}.log, the
# issue shapes' rows (case, ours, cuBLAS, ratio) on stdout.
schedule_bench_ab() {
  local run dir v
  for run in 1 2; do
    for dir in "$1" "$2"; do
      v=base
      [ "$dir" = "$2" ] && v=variant
      echo "== schedule_bench $v run $run"
      LD_LIBRARY_PATH=$dir/lib:$LD_LIBRARY_PATH timeout 150 "$dir/schedule_bench" \
        >"$OUT/bench_${v}_$run.log" 2>&1
      echo "rc=$?"
      grep -E "^\| (sk|skinny|grouped)|geometric" "$OUT/bench_${v}_$run.log" | cut -d'|' -f2,4,5,9 |
        grep -v diagnostic
    done
  done
}
