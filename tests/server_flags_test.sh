#!/bin/bash
# gemm_server's flag handling without starting the service: --help lists the
# flags with their defaults, --version names version, commit and build type,
# a bad value of an enumerated flag (--log_level, --log_format, --backend) is
# refused naming the flag and the allowed values (exit 2), tokens without TLS
# on a non-loopback address are refused unless --allow_insecure_tokens says
# the operator knows, a bad --tenants_file is refused naming its line, and
# --log_format=json writes one JSON object a line (the start-up line, the
# tenants read and the drain summary among them). cuBLAS is not linked and not
# loaded by --version or a CPU-backend server. SIGHUP re-measures
# the peak rates while serving, keeping those set by flag; it re-reads
# --tenants_file, refusing a bad one naming its line and applying a good
# one; and a SIGHUP during start-up neither kills the server nor is lost.
# Usage: server_flags_test.sh GEMM_SERVER
set -u
server_bin="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$server_bin" --help >"$work/help" 2>&1
grep -q -- "--log_level" "$work/help" || fail "--help does not list --log_level: $(cat "$work/help")"
grep -q -- "default: \"info\"" "$work/help" || fail "--help does not show defaults"
grep -q -- "--allow_insecure_tokens" "$work/help" || fail "--help does not list --allow_insecure_tokens"
grep -q "No flags matched" "$work/help" && fail "--help says No flags matched"

"$server_bin" --version >"$work/version" 2>&1
# An unstamped build (tests are) says "unknown"; a stamped one a commit.
grep -Eq "^gemm_server [0-9]+\.[0-9]+\.[0-9]+, commit (unknown|[0-9a-f]{40}(-dirty)?), " \
  "$work/version" || fail "--version: $(cat "$work/version")"
grep -q "build" "$work/version" || fail "--version has no build type: $(cat "$work/version")"

"$server_bin" --log_level=loud --listen=127.0.0.1:0 --metrics_listen= --backend=cpu \
  >"$work/level" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--log_level=loud exited $rc, want 2"
grep -q -- "--log_level" "$work/level" || fail "refusal does not name the flag: $(cat "$work/level")"
grep -q "debug" "$work/level" || fail "refusal does not list the allowed values"

refused() {  # FLAG VALUE ALLOWED-VALUE: exit 2 naming the flag and the allowed values
  "$server_bin" "--$1=$2" --listen=127.0.0.1:0 --metrics_listen= >"$work/enum" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || fail "--$1=$2 exited $rc, want 2: $(cat "$work/enum")"
  grep -q -- "--$1" "$work/enum" || fail "--$1 refusal does not name the flag: $(cat "$work/enum")"
  grep -q -- "$3" "$work/enum" || fail "--$1 refusal does not list $3: $(cat "$work/enum")"
}
refused log_format xml json
refused backend tpu cuda
refused log_level loud critical
refused kernel_policy fastest heuristic

# cuBLAS is opened only when a launch may run it: the binary does not link
# it, --version does not load it, and a CPU-backend server asked for the
# cublas policy with a table (the policy is the CUDA backend's) maps none.
if command -v readelf >/dev/null; then
  readelf -d "$server_bin" | grep -i 'NEEDED.*cublas' \
    && fail "gemm_server links cuBLAS: $(readelf -d "$server_bin" | grep NEEDED)"
fi
LD_DEBUG=files "$server_bin" --version >"$work/ld_debug" 2>&1
grep -q 'file=' "$work/ld_debug" || fail "LD_DEBUG=files printed nothing: $(head -5 "$work/ld_debug")"
grep -q 'file=libcublas' "$work/ld_debug" \
  && fail "--version loads cuBLAS: $(grep 'file=libcublas' "$work/ld_debug" | head -3)"
printf 'gemm_tuning_table 2\ngpu NVIDIA H200\ndriver 13000\ncuda_runtime 13000\ncublas 130100\nbuild 0.1.0\nbuckets_per_octave 4\n' \
  >"$work/empty.table"
"$server_bin" --listen=127.0.0.1:0 --metrics_listen= --backend=cpu --kernel_policy=cublas \
  --tuning_table="$work/empty.table" --port_file="$work/cpu_port" >"$work/cpu_log" 2>&1 &
cpu_pid=$!
for _ in $(seq 1 100); do [ -s "$work/cpu_port" ] && break; sleep 0.1; done
[ -s "$work/cpu_port" ] || fail "CPU-backend server did not start: $(cat "$work/cpu_log")"
grep -q cublas "/proc/$cpu_pid/maps" && fail "a CPU-backend server maps cuBLAS: $(grep cublas "/proc/$cpu_pid/maps" | head -3)"
kill -TERM "$cpu_pid"
wait "$cpu_pid"

# --tuning_table: a file that cannot be read or parses badly stops the start
# (exit 2) naming the flag, and for a malformed one its line.
"$server_bin" --tuning_table="$work/absent.table" --listen=127.0.0.1:0 --metrics_listen= \
  --backend=cpu >"$work/table" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--tuning_table of a missing file exited $rc, want 2"
grep -q -- "--tuning_table: tuning table: cannot read $work/absent.table" "$work/table" \
  || fail "missing table refusal: $(cat "$work/table")"
printf 'gemm_tuning_table 2\ngpu NVIDIA H200\ndriver 13000\ncuda_runtime 13000\ncublas 130100\nbuild 0.1.0\nbuckets_per_octave 4\nclass kind=single in=bf16\n' \
  >"$work/bad.table"
"$server_bin" --tuning_table="$work/bad.table" --listen=127.0.0.1:0 --metrics_listen= \
  --backend=cpu >"$work/table" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--tuning_table of a malformed file exited $rc, want 2"
grep -q -- "--tuning_table: tuning table $work/bad.table: line 8" "$work/table" \
  || fail "malformed table refusal does not name line 8: $(cat "$work/table")"
# Several tables, comma-separated: every one is parsed at start.
"$server_bin" --tuning_table="$work/empty.table,$work/bad.table" --listen=127.0.0.1:0 \
  --metrics_listen= --backend=cpu >"$work/table" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--tuning_table with a malformed second file exited $rc, want 2"
grep -q -- "--tuning_table: tuning table $work/bad.table: line 8" "$work/table" \
  || fail "malformed second table refusal does not name it: $(cat "$work/table")"

echo "alice 0123456789abcdef0123456789abcdef" >"$work/tokens"
"$server_bin" --listen=0.0.0.0:0 --metrics_listen= --backend=cpu \
  --auth_tokens_file="$work/tokens" >"$work/insecure" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "tokens without TLS on 0.0.0.0 exited $rc, want 2"
grep -q -- "--allow_insecure_tokens" "$work/insecure" \
  || fail "refusal does not name --allow_insecure_tokens: $(cat "$work/insecure")"

# With the flag the server starts (and stops on SIGTERM).
"$server_bin" --listen=0.0.0.0:0 --port_file="$work/port" --metrics_listen= --backend=cpu \
  --auth_tokens_file="$work/tokens" --allow_insecure_tokens >"$work/allowed" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  [ -s "$work/port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "server with --allow_insecure_tokens exited: $(cat "$work/allowed")"
  sleep 0.1
done
[ -s "$work/port" ] || fail "server with --allow_insecure_tokens did not listen"
kill -TERM "$pid"
wait "$pid" || fail "server exited non-zero after SIGTERM: $(cat "$work/allowed")"
# A bad tenants file is refused at start naming the file, the line and the
# field (exit 2).
printf 'tenant a weight=3\ntenant b weight=heavy\n' >"$work/bad_tenants"
"$server_bin" --listen=127.0.0.1:0 --metrics_listen= --backend=cpu \
  --tenants_file="$work/bad_tenants" >"$work/tenants_refused" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "a bad --tenants_file exited $rc, want 2: $(cat "$work/tenants_refused")"
grep -q -- "--tenants_file: $work/bad_tenants:2: tenant b: weight" "$work/tenants_refused" \
  || fail "the refusal does not name the line and field: $(cat "$work/tenants_refused")"
printf 'tenant a weight=3 caller=alice\ntenant b\n' >"$work/tenants"
# JSON logs: every line an object with time, level, logger and message; the
# start-up line carries the settings, the drain its summary. The tenants file
# is read and its tenants logged.
rm -f "$work/port"
"$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= --backend=cpu \
  --log_format=json --calibration_budget=100ms --max_queued_requests=77 \
  --tenants_file="$work/tenants" >"$work/json" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -s "$work/port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "server with --log_format=json exited: $(cat "$work/json")"
  sleep 0.1
done
[ -s "$work/port" ] || fail "server with --log_format=json did not listen"
kill -TERM "$pid"
wait "$pid" || fail "server exited non-zero after SIGTERM: $(cat "$work/json")"
python3 - "$work/json" <<'PY' || fail "JSON log lines: $(cat "$work/json")"
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert lines, "no log lines"
events = [json.loads(l) for l in lines]
for e in events:
    for key in ("time", "level", "logger", "message"):
        assert key in e, (key, e)
start = [e for e in events if e["message"].startswith("serving gemm.v1")]
assert len(start) == 1, start
s = start[0]
assert s["backend"] == "cpu" and s["tls"] == "off" and s["tokens"] == "off", s
assert s["max_queued_requests"] == "77", s
assert [e for e in events if e["message"].startswith("drain summary")], "no drain summary"
tenants = [e for e in events if e["message"].startswith("tenants from")]
assert len(tenants) == 1 and "a(weight 3) b(weight 1) other(weight 1)" in tenants[0]["message"], tenants
PY
# SIGHUP during start-up, once the server's handler is installed (SigCgt
# bit 0) and before it listens (the peaks are being measured): the server
# survives it and, once serving, acts on it (re-reads the tenants file).
# Threads OpenBLAS starts before main do not block SIGHUP.
printf 'tenant a weight=3 caller=alice\ntenant b\n' >"$work/reload_tenants"
rm -f "$work/port"
"$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= --backend=cpu \
  --calibration_budget=1s --tenants_file="$work/reload_tenants" >"$work/reload" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  mask="$(awk '/^SigCgt:/ {print $2}' "/proc/$pid/status" 2>/dev/null)"
  [ -n "$mask" ] && [ $((0x$mask & 1)) -eq 1 ] && break
  sleep 0.01
done
[ -s "$work/port" ] && fail "the server listened before the start-up SIGHUP could be sent"
kill -HUP "$pid"
# wait_for PATTERN COUNT: until the log has COUNT lines matching PATTERN.
wait_for() {
  for _ in $(seq 1 600); do
    [ "$(grep -c -- "$1" "$work/reload")" -ge "$2" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "server exited waiting for \"$1\": $(cat "$work/reload")"
    sleep 0.05
  done
  fail "no \"$1\" (x$2) in the log: $(cat "$work/reload")"
}
wait_for "tenants from $work/reload_tenants applied: a(weight 3) b(weight 1)" 1
[ -s "$work/port" ] || fail "server did not listen: $(cat "$work/reload")"
wait_for "peak rates re-measured" 1
# A bad file is refused, naming the file, the line and the field; the
# tenants in force stay.
printf 'tenant a weight=5 caller=alice\ntenant b weight=heavy\n' >"$work/reload_tenants"
kill -HUP "$pid"
wait_for "tenants file refused, the configuration in force is kept: $work/reload_tenants:2: tenant b: weight" 1
wait_for "peak rates re-measured" 2
grep -q "applied: a(weight 5)" "$work/reload" && fail "the bad file was applied: $(cat "$work/reload")"
# A good one is applied.
printf 'tenant a weight=5 caller=alice\ntenant b\ntenant c weight=2\n' >"$work/reload_tenants"
kill -HUP "$pid"
wait_for "tenants from $work/reload_tenants applied: a(weight 5) b(weight 1) c(weight 2) other(weight 1)" 1
kill -TERM "$pid"
wait "$pid" || fail "server exited non-zero after SIGTERM: $(cat "$work/reload")"
# SIGHUP: the peaks are measured again; the one set by flag stays.
rm -f "$work/port"
"$server_bin" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= --backend=cpu \
  --calibration_budget=100ms --peak_tflops=fp16=0.25 >"$work/hup" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -s "$work/port" ] && break
  kill -0 "$pid" 2>/dev/null || fail "server exited: $(cat "$work/hup")"
  sleep 0.1
done
[ -s "$work/port" ] || fail "server did not listen"
kill -HUP "$pid"
for _ in $(seq 1 300); do
  grep -q "peak rates re-measured" "$work/hup" && break
  sleep 0.1
done
line="$(grep "peak rates re-measured" "$work/hup")" || fail "no re-measure line after SIGHUP: $(cat "$work/hup")"
echo "$line" | grep -q "fp16=0.25TFLOP/s(flag)" || fail "the flag's fp16 peak did not stay: $line"
echo "$line" | grep -Eq "fp32=[0-9.]+TFLOP/s\(measured\)" || fail "fp32 not re-measured: $line"
echo "$line" | grep -Eq "memory=[0-9.]+GB/s\(measured\)" || fail "memory not re-measured: $line"
kill -0 "$pid" 2>/dev/null || fail "server exited after SIGHUP: $(cat "$work/hup")"
kill -TERM "$pid"
wait "$pid" || fail "server exited non-zero after SIGTERM: $(cat "$work/hup")"
echo PASS
