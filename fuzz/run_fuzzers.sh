#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (-fsanitize=fuzzer,address,
# undefined; Bazel builds with gcc, which has no libFuzzer) and runs each for a
# bounded time from the checked-in seed corpus. A crash, a leak, a sanitizer
# report or a broken invariant fails the run (exit 1) and leaves the input
# that did it in the work directory.
#
#   fuzz/run_fuzzers.sh [seconds per target, default 30] [work dir]
#
# Run longer to search deeper, e.g. an hour each, keeping the grown corpus:
#   fuzz/run_fuzzers.sh 3600 /var/tmp/gemm_fuzz
# Needs clang-14 and libclang-rt-14-dev (tools/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
work="${2:-$(mktemp -d /tmp/gemm_fuzz.XXXXXX)}"
mkdir -p "$work/gen" "$work/bin"
cxx="${CXX_FUZZ:-clang++-14}"

protoc -Iproto --cpp_out="$work/gen" proto/gemm/v1/gemm.proto

common_srcs=(service/request_validation.cc service/limits.cc common/gemm_problem.cc
  common/proto_enums.cc common/dtype.cc common/dtype_x86.cc common/fp8.cc
  "$work/gen/gemm/v1/gemm.pb.cc")
# Validation reads resident-matrix handles once that work is in the tree.
[[ -f service/resident_matrix.cc ]] && common_srcs+=(service/resident_matrix.cc)
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -I. -I"$work/gen" -w)
read -r -a libs <<<"$(pkg-config --libs protobuf absl_status absl_statusor absl_strings \
  absl_str_format absl_time absl_synchronization) -lopenblas -lpthread"

build() {  # name, extra sources...
  local name="$1"
  shift
  "$cxx" "${flags[@]}" "fuzz/$name.cc" "$@" "${common_srcs[@]}" "${libs[@]}" -o "$work/bin/$name"
}
echo "building fuzzers in $work"
build request_fuzzer
build cpu_gemm_fuzzer service/cpu_executor.cc service/executor.cc service/calibration.cc
# The zero-copy Chunk parser of gemm.v1.Transfer (needs gRPC's slices).
read -r -a grpc_libs <<<"$(pkg-config --libs grpc++)"
build chunk_fuzzer common/chunk_wire.cc "${grpc_libs[@]}"

total=0
for name in request_fuzzer cpu_gemm_fuzzer chunk_fuzzer; do
  corpus="$work/corpus_$name"
  mkdir -p "$corpus"
  seeds=fuzz/corpus  # GemmRequest messages
  [[ "$name" == chunk_fuzzer ]] && seeds=fuzz/corpus_chunk
  log="$work/$name.log"
  echo "running $name for ${seconds}s"
  # OpenBLAS on one thread: the inputs are tiny and libFuzzer runs one at a time.
  if ! OPENBLAS_NUM_THREADS=1 "$work/bin/$name" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/$name-" \
      "$corpus" "$seeds" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "FAIL: $name found a problem; the input is $work/$name-*"
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  echo "$name: ${runs:-?} inputs, corpus $(ls "$corpus" | wc -l) files, no crash"
  total=$((total + ${runs:-0}))
done
echo "fuzzers: $total inputs tried in total, no crash"
