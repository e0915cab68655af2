#!/usr/bin/env bash
# gemm_cli against a real CPU gemm_server on 127.0.0.1: sizes over a limit are
# refused before anything is allocated or sent (exit 2 within a second, small
# peak memory, the message naming the flag and the limit); bench stops early
# when every call fails and prints each status code with its message; --json
# is one parseable document; a --sizes sweep, --stream and the chunked
# transfer path run and report; --help lists the CLI's flags.
#
# Usage (from tests/BUILD): cli_limits_test.sh <gemm_server> <gemm_cli>
set -euo pipefail

server_bin="${1:?usage: cli_limits_test.sh <gemm_server> <gemm_cli>}"
cli_bin="${2:?usage: cli_limits_test.sh <gemm_server> <gemm_cli>}"
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

now_ms() { date +%s%3N; }

# --help lists the CLI's own flags (they live in client/cli/flags.cc, not in
# a file named after the program).
help=$("$cli_bin" --help 2>&1 || true)
for flag in --target --concurrency --dtype --json --shared_memory; do
  grep -q -- "^    $flag " <<<"$help" || fail "gemm_cli --help does not list $flag"
done
echo "gemm_cli --help: lists its flags"

# A 2 GiB address-space limit turns any large allocation into a crash
# (std::bad_alloc, exit 134). AddressSanitizer reserves terabytes of shadow
# address space up front, so an ASan build runs without it (the peak RSS
# check below still applies).
vmem_kb=$((2 << 20))
if grep -q __asan_init "$cli_bin"; then vmem_kb=unlimited; fi

# refuse NAME WANT_SUBSTRING... -- ARGS: runs `gemm_cli run ARGS` under that
# limit, and wants exit 2 within 1 s, every substring in its stderr, and
# (where /usr/bin/time exists) a peak RSS under 200 MB.
refuse() {
  local name="$1"; shift
  local wants=()
  while [[ "$1" != "--" ]]; do wants+=("$1"); shift; done
  shift
  local log="$work/$name.log" rc=0 t0 t1
  t0=$(now_ms)
  if [[ -x /usr/bin/time ]]; then
    (ulimit -v "$vmem_kb"; /usr/bin/time -v -o "$work/$name.time" \
      "$cli_bin" run "$@" --target="127.0.0.1:$port" --deadline_ms=30000) >"$log" 2>&1 || rc=$?
  else
    (ulimit -v "$vmem_kb"; "$cli_bin" run "$@" --target="127.0.0.1:$port" --deadline_ms=30000) \
      >"$log" 2>&1 || rc=$?
  fi
  t1=$(now_ms)
  [[ "$rc" -eq 2 ]] || fail "$name: gemm_cli run $* exited $rc, want 2"
  (( t1 - t0 < 1000 )) || fail "$name: the refusal took $((t1 - t0)) ms, want < 1000"
  for w in "${wants[@]}"; do
    grep -qF -- "$w" "$log" || fail "$name: the error does not say \"$w\""
  done
  if [[ -f "$work/$name.time" ]]; then
    local rss_kb
    rss_kb="$(sed -n 's/.*Maximum resident set size (kbytes): *//p' "$work/$name.time")"
    [[ -n "$rss_kb" ]] || fail "$name: no peak RSS in /usr/bin/time's report"
    (( rss_kb < 200000 )) || fail "$name: peak RSS $rss_kb kB, want < 200000"
    echo "$name: exit 2 in $((t1 - t0)) ms, peak RSS $rss_kb kB: $(grep '^error' "$log")"
  else
    echo "$name: exit 2 in $((t1 - t0)) ms: $(grep '^error' "$log")"
  fi
}

start_server --cpu_concurrency=2 --drain_timeout=2s --max_dimension=1048576 \
  --max_problems_per_request=4096 --max_message_bytes=$((64 << 20))
echo "gemm_server on 127.0.0.1:$port"

refuse huge_m "--m=1000000000000" "max_dimension" -- --m=1000000000000
refuse big_k "--k=2000000" "1048576" "server's limit" -- --k=2000000
refuse big_batch "--batch=5000" "4096" -- --batch=5000 --m=256 --n=256 --k=256
refuse zero_m "--m must be >= 1" -- --m=0
refuse client_memory "--max_client_bytes=1000000" -- --m=1024 --n=1024 --k=1024 \
  --max_client_bytes=1000000
# Library option names read as the CLI's flags (default_timeout is --deadline_ms).
rc=0
timeout 30 "$cli_bin" run --m=8 --deadline_ms=0 --target="127.0.0.1:$port" >"$work/deadline.log" 2>&1 || rc=$?
[[ "$rc" -eq 2 ]] || fail "run --deadline_ms=0 exited $rc, want 2"
grep -qF -- "--deadline_ms must be positive" "$work/deadline.log" || fail "run --deadline_ms=0 names no flag"
grep -q "default_timeout" "$work/deadline.log" && fail "run --deadline_ms=0 names a library field"

# The same flags checked by bench, before it connects or allocates.
rc=0
timeout 30 "$cli_bin" bench --sizes=64,2000000 --target="127.0.0.1:$port" \
  >"$work/bench_sweep_bad.log" 2>&1 || rc=$?
[[ "$rc" -eq 2 ]] || fail "bench --sizes=64,2000000 exited $rc, want 2"
grep -qF -- "--sizes" "$work/bench_sweep_bad.log" || fail "bench sweep refusal names no --sizes"
grep -q '^requests' "$work/bench_sweep_bad.log" && fail "bench sent requests before refusing a size"

cli() { timeout 120 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=30000; }

# --json: one document, its figures consistent.
cli bench --m=32 --n=32 --k=32 --requests=40 --concurrency=4 --verify_every=4 --json \
  >"$work/bench_json.out" 2>"$work/bench_json.log" || fail "bench --json exited $?"
python3 - "$work/bench_json.out" <<'PY' || fail "bench --json output is not the expected JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
(run,) = doc["runs"]
assert run["requests"] == 40 and run["ok"] == 40 and run["errors"] == 0, run
assert run["failures"] == [] and run["stopped_early"] is None, run
assert run["verified"] == 10 and run["mismatches"] == 0, run
lat = run["latency_ms"]
assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"], lat
assert run["requests_per_s"] > 0 and run["gflop_per_s"] > 0, run
assert run["transport"] == "unary", run
assert doc["exit_code"] == 0, doc
PY
echo "bench --json: parsed, 40 requests, 10 verified"

# A size sweep: one run per size, in order.
cli bench --sizes=16,48 --requests=10 --concurrency=2 --verify_every=5 --json \
  >"$work/bench_sweep.out" 2>"$work/bench_sweep.log" || fail "bench --sizes exited $?"
python3 - "$work/bench_sweep.out" <<'PY' || fail "bench --sizes did not report both sizes"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert [(r["m"], r["n"], r["k"]) for r in runs] == [(16, 16, 16), (48, 48, 48)], runs
assert all(r["ok"] == 10 and r["verified"] == 2 and r["mismatches"] == 0 for r in runs), runs
PY
echo "bench --sizes=16,48: two runs reported"

# Streaming: requests over one GemmStream, verified.
cli bench --m=40 --n=24 --k=8 --requests=30 --concurrency=3 --verify_every=3 --stream \
  >"$work/bench_stream.log" 2>&1 || fail "bench --stream exited $?"
grep -Eq '^transport +stream$' "$work/bench_stream.log" || fail "bench --stream did not stream"
grep -Eq '^requests +30 \(ok 30, errors 0\)' "$work/bench_stream.log" || fail "bench --stream lost requests"
grep -Eq '^verified +10 responses, 0 mismatches' "$work/bench_stream.log" || fail "bench --stream verified wrong"
echo "bench --stream: 30 requests, 10 verified"

# Operands over the client's chunked threshold (4 MiB) go the way `run`
# sends them: in chunks.
cli bench --m=2048 --n=8 --k=520 --requests=3 --concurrency=1 --verify_every=1 \
  >"$work/bench_chunked.log" 2>&1 || fail "bench of a 4.3 MB A exited $?"
grep -Eq '^transport +unary-chunked$' "$work/bench_chunked.log" || fail "bench did not chunk a 4.3 MB A"
grep -Eq '^verified +3 responses, 0 mismatches' "$work/bench_chunked.log" || fail "chunked bench verified wrong"
echo "bench with a 4.3 MB A: chunked, 3 verified"
stop_server || true

# A server that refuses every call (it wants a token; the CLI sends none):
# bench stops after --max_consecutive_failures instead of running for its
# whole --duration_s, and prints the code with the server's message.
printf 'alice cli-limits-token-0123456789\n' >"$work/tokens"
start_server --cpu_concurrency=2 --drain_timeout=2s --auth_tokens_file="$work/tokens"
t0=$(now_ms)
rc=0
timeout 60 "$cli_bin" bench --m=8 --n=8 --k=8 --duration_s=50 --concurrency=2 \
  --max_consecutive_failures=5 --target="127.0.0.1:$port" >"$work/bench_refused.log" 2>&1 || rc=$?
t1=$(now_ms)
[[ "$rc" -eq 3 ]] || fail "bench against a refusing server exited $rc, want 3"
(( t1 - t0 < 20000 )) || fail "bench ran $((t1 - t0)) ms against a refusing server, want an early stop"
grep -q '^stopped early 5 consecutive failures' "$work/bench_refused.log" || fail "bench printed no early stop"
grep -Eq '^  UNAUTHENTICATED +[0-9]+  [^ ]' "$work/bench_refused.log" ||
  fail "bench printed no UNAUTHENTICATED line with its message"
grep -q 'local limits only' "$work/bench_refused.log" ||
  fail "bench did not say it fell back to local limits"
echo "bench against a refusing server: stopped after $((t1 - t0)) ms"
grep -E '^  UNAUTHENTICATED' "$work/bench_refused.log"

# Same, as JSON: failures grouped by code and message.
rc=0
timeout 60 "$cli_bin" bench --m=8 --n=8 --k=8 --duration_s=50 --concurrency=2 \
  --max_consecutive_failures=3 --json --target="127.0.0.1:$port" \
  >"$work/bench_refused.out" 2>"$work/bench_refused_json.log" || rc=$?
[[ "$rc" -eq 3 ]] || fail "bench --json against a refusing server exited $rc, want 3"
python3 - "$work/bench_refused.out" <<'PY' || fail "bench --json of a refusing server is wrong"
import json, sys
doc = json.load(open(sys.argv[1]))
(run,) = doc["runs"]
assert run["ok"] == 0 and run["requests"] >= 3, run
assert run["stopped_early"], run
codes = {f["code"] for f in run["failures"]}
assert codes == {"UNAUTHENTICATED"}, run["failures"]
assert all(f["message"] and f["count"] > 0 for f in run["failures"]), run["failures"]
assert sum(f["count"] for f in run["failures"]) == run["errors"], run
assert doc["exit_code"] == 3, doc
PY
echo "bench --json against a refusing server: parsed"
stop_server || true

echo "PASS"
