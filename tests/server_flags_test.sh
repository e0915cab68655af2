#!/bin/bash
# gemm_server's flag handling without starting the service: --help lists the
# flags with their defaults, --version names version, commit and build type,
# a bad --log_level is refused with the allowed values (exit 2), and tokens
# without TLS on a non-loopback address are refused unless
# --allow_insecure_tokens says the operator knows.
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
grep -Eq "^gemm_server [0-9]+\.[0-9]+\.[0-9]+, commit " "$work/version" \
  || fail "--version: $(cat "$work/version")"
grep -q "build" "$work/version" || fail "--version has no build type: $(cat "$work/version")"

"$server_bin" --log_level=loud --listen=127.0.0.1:0 --metrics_listen= --backend=cpu \
  >"$work/level" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--log_level=loud exited $rc, want 2"
grep -q -- "--log_level" "$work/level" || fail "refusal does not name the flag: $(cat "$work/level")"
grep -q "debug" "$work/level" || fail "refusal does not list the allowed values"

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
echo PASS
