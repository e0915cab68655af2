#!/usr/bin/env bash
# health_probe's exit status against the gemm_server binary on loopback, with
# TLS, mutual TLS and tokens on its main port and a health-only port beside
# it (certificates made here with openssl), after the server's own refusal
# of --health_port_file without --health_listen (exit 2):
#   0 SERVING: the health port in plaintext, the main port with TLS and a
#     client certificate (a token too, which the server does not need for
#     health checks); 1 not serving: an unknown service; 2 usage: flags that do
#     not hold together, a file that cannot be read; 3 no answer: the main
#     port in plaintext or without a client certificate, a wrong server name,
#     either port once the server has stopped.
set -euo pipefail
probe="$1"
server="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"
server_pid=""

cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -f "$work/server.log" ]] && tail -n 20 "$work/server.log" >&2
  exit 1
}

cd "$work"
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${key[@]}" -days 1 -subj "/CN=health probe CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
  -keyout ca.key -out ca.pem >/dev/null 2>&1
leaf() {  # name, cn, extensions
  printf '%b' "$3" >"$1.ext"
  openssl req "${key[@]}" -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" >/dev/null 2>&1
  openssl x509 -req -days 1 -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -extfile "$1.ext" >/dev/null 2>&1
}
leaf server gemm.example "subjectAltName=DNS:gemm.example\nextendedKeyUsage=serverAuth\n"
leaf client probe-client "extendedKeyUsage=clientAuth\n"
printf 'prober probe-e2e-token-0123456789\n' >tokens
printf 'probe-e2e-token-0123456789\n' >probe.token
cd - >/dev/null

rc=0
"$server" --listen=127.0.0.1:0 --metrics_listen= --backend=cpu \
  --health_port_file="$work/unused" >"$work/server.log" 2>&1 || rc=$?
[[ "$rc" == 2 ]] || fail "--health_port_file without --health_listen exited $rc, want 2"
grep -q -- "--health_listen" "$work/server.log" || fail "the refusal does not name --health_listen"

"$server" --listen=127.0.0.1:0 --port_file="$work/port" --metrics_listen= \
  --health_listen=127.0.0.1:0 --health_port_file="$work/health_port" \
  --backend=cpu --cpu_concurrency=1 --blas_threads=1 --log_level=warn \
  --tls_cert="$work/server.pem" --tls_key="$work/server.key" --tls_client_ca="$work/ca.pem" \
  --auth_tokens_file="$work/tokens" >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  [[ -s "$work/port" ]] && [[ "$(tail -c1 "$work/port" | od -An -c | tr -d ' ')" == '\n' ]] && break
  kill -0 "$server_pid" 2>/dev/null || fail "gemm_server exited before listening"
  sleep 0.1
done
[[ -s "$work/port" ]] || fail "gemm_server did not start"
main="127.0.0.1:$(tr -d '[:space:]' <"$work/port")"
health="127.0.0.1:$(tr -d '[:space:]' <"$work/health_port")"

expect() {  # exit status, what, probe args...
  local want="$1" what="$2" got=0
  shift 2
  "$probe" "$@" >"$work/probe.log" 2>&1 || got=$?
  [[ "$got" == "$want" ]] || fail "$what: exit $got, expected $want: $(cat "$work/probe.log")"
  echo "exit $got: $what"
}

tls=(--tls_ca="$work/ca.pem" --tls_server_name=gemm.example)
client_cert=(--tls_cert="$work/client.pem" --tls_key="$work/client.key")

expect 0 "health port, plaintext" --addr="$health" --deadline=5s
expect 0 "health port, gemm.v1.GemmService" --addr="$health" --service=gemm.v1.GemmService
expect 1 "health port, unknown service" --addr="$health" --service=no.such.Service
expect 0 "main port, TLS + client certificate + token" --addr="$main" "${tls[@]}" \
  "${client_cert[@]}" --token_file="$work/probe.token" --deadline=5s
expect 0 "main port, TLS + client certificate" --addr="$main" "${tls[@]}" "${client_cert[@]}"
expect 3 "main port, plaintext" --addr="$main" --deadline=500ms
expect 3 "main port, TLS without a client certificate" --addr="$main" "${tls[@]}" \
  --deadline=500ms
expect 3 "main port, certificate names another server" --addr="$main" --tls_ca="$work/ca.pem" \
  --tls_server_name=other.example "${client_cert[@]}" --deadline=500ms
expect 2 "token without TLS" --addr="$main" --token_file="$work/probe.token"
expect 2 "client certificate without its key" --addr="$main" "${tls[@]}" \
  --tls_cert="$work/client.pem"
expect 2 "unreadable CA file" --addr="$main" --tls_ca="$work/missing.pem"
expect 2 "quiet still names a usage error" --addr="$main" --token_file="$work/missing" --quiet
grep -q -- "--token_file" "$work/probe.log" || fail "usage error does not name --token_file"

kill -TERM "$server_pid"
wait "$server_pid" || fail "gemm_server exited $? on SIGTERM"
server_pid=""
expect 3 "health port after shutdown" --addr="$health" --deadline=300ms
expect 3 "main port after shutdown" --addr="$main" "${tls[@]}" "${client_cert[@]}" \
  --deadline=300ms
echo PASS
