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

flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
  -fno-sanitize-recover=undefined -I. -I"$work/gen" -w)
read -r -a libs <<<"$(pkg-config --libs protobuf absl_status absl_statusor absl_strings \
  absl_str_format absl_time absl_synchronization absl_hash absl_raw_hash_set grpc++) \
  -lopenblas -lpthread"

# The production sources a fuzzer links: those of the Bazel targets it
# exercises and of their dependencies in this repository, as Bazel lists
# them, so that a new source file needs no change here.
sources_of() {  # bazel targets...
  local expr
  expr=$(printf 'deps(%s) + ' "$@")
  bazel query --noshow_progress "kind('source file', ${expr% + }) intersect //...:*" |
    sed -n 's#^//\([^:]*\):\(.*\.cc\)$#\1/\2#p'
}

# Each source is compiled once into objects/, and each fuzzer links the
# archive of those its targets list (only the members it uses).
mkdir -p "$work/objects"
build() {  # name, bazel targets...
  local name="$1" src obj
  shift
  local objs=("$work/objects/gemm.pb.o")
  for src in $(sources_of "$@"); do
    obj="$work/objects/${src//\//_}.o"
    [[ -f "$obj" ]] || "$cxx" "${flags[@]}" -c "$src" -o "$obj"
    objs+=("$obj")
  done
  rm -f "$work/objects/$name.a"
  ar rcs "$work/objects/$name.a" "${objs[@]}"
  "$cxx" "${flags[@]}" "fuzz/$name.cc" "$work/objects/$name.a" "${libs[@]}" -o "$work/bin/$name"
}
echo "building fuzzers in $work"
"$cxx" "${flags[@]}" -c "$work/gen/gemm/v1/gemm.pb.cc" \
  -o "$work/objects/gemm.pb.o"
build request_fuzzer //service:request_validation
build cpu_gemm_fuzzer //service:request_validation //service:cpu_executor
# The zero-copy Chunk parser of gemm.v1.Transfer (needs gRPC's slices).
build chunk_fuzzer //common:chunk_wire

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
