#!/usr/bin/env bash
# The main job: installs what is missing, builds the server and the CLI,
# starts the server on the best backend present, drives a demo workload through
# the client (results checked against a float64 reference), prints the
# throughput, and shuts the server down gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh

bazel build //service:gemm_server //client:gemm_cli
bin=$(bazel info bazel-bin 2>/dev/null)
work=$(mktemp -d)
trap 'kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/service/gemm_server" --listen=127.0.0.1:0 --port_file="$work/port" \
  --metrics_listen=127.0.0.1:0 "$@" &
server_pid=$!
for _ in $(seq 1 100); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { echo "the server did not start" >&2; exit 1; }
target="127.0.0.1:$(cat "$work/port")"
cli() { "$bin/client/gemm_cli" "$@" --target="$target"; }

echo "== server info"
cli info
echo
echo "== results check (each verified against a float64 reference)"
cli run --m=257 --n=129 --k=300 --dtype=fp32
cli run --m=512 --n=512 --k=512 --dtype=bf16 --transpose_b
cli run --m=100 --n=333 --k=77 --dtype=fp16 --out_dtype=fp32 --layout=col --beta=0.5
cli run --m=64 --n=64 --k=64 --dtype=bf16 --batch=16
echo
echo "== throughput (256^3 fp32, 8 in flight, 5 s)"
cli bench --m=256 --n=256 --k=256 --dtype=fp32 --concurrency=8 --duration_s=5 --verify_every=100
echo
echo "== graceful shutdown"
kill -TERM "$server_pid"
wait "$server_pid"
echo "server exited with status $?"
