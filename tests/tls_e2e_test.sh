#!/usr/bin/env bash
# End to end through the real binaries' flags: gemm_server with --tls_cert,
# --tls_key, --tls_client_ca and --auth_tokens_file (certificates made here
# with openssl), driven by gemm_cli with --tls_ca, --tls_cert, --tls_key and
# --token_file. The right certificate and token work (run checks its result);
# a plaintext client, a client without a certificate and a wrong token fail.
#
# Usage (from tests/BUILD): tls_e2e_test.sh <gemm_server> <gemm_cli>
set -euo pipefail

server_bin="${1:?usage: tls_e2e_test.sh <gemm_server> <gemm_cli>}"
cli_bin="${2:?usage: tls_e2e_test.sh <gemm_server> <gemm_cli>}"
# shellcheck source=tests/server_lib.sh
source "$(dirname "$0")/server_lib.sh"

# A CA, a server certificate for 127.0.0.1 and a client certificate.
cd "$work"
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${key[@]}" -days 1 -subj "/CN=gemm e2e CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign \
  -keyout ca.key -out ca.pem >/dev/null 2>&1
leaf() {  # name, cn, extensions
  printf '%b' "$3" >"$1.ext"
  openssl req "${key[@]}" -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" >/dev/null 2>&1
  openssl x509 -req -days 1 -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out "$1.pem" -extfile "$1.ext" >/dev/null 2>&1
}
leaf server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
leaf client e2e-client "extendedKeyUsage=clientAuth\n"
printf 'alice alice-e2e-token-0123456789\n' >tokens
printf 'alice-e2e-token-0123456789\n' >alice.token
printf 'mallory-e2e-token-012345678\n' >wrong.token
cd - >/dev/null

start_server --cpu_concurrency=1 --drain_timeout=5s \
  --tls_cert="$work/server.pem" --tls_key="$work/server.key" --tls_client_ca="$work/ca.pem" \
  --auth_tokens_file="$work/tokens"

cli() {
  timeout 60 "$cli_bin" "$@" --target="127.0.0.1:$port" --deadline_ms=20000 --max_attempts=1
}
mtls=(--tls_ca="$work/ca.pem" --tls_cert="$work/client.pem" --tls_key="$work/client.key")

cli info "${mtls[@]}" --token_file="$work/alice.token" >"$work/ok.log" 2>&1 ||
  fail "info with certificate and token failed"
grep -Eq '^backend +cpu$' "$work/ok.log" || fail "info printed no backend"
cli run --m=33 --n=17 --k=9 "${mtls[@]}" --token_file="$work/alice.token" >"$work/run.log" 2>&1 ||
  fail "run with certificate and token failed"
grep -q ': OK$' "$work/run.log" || fail "run printed no passing check"
echo "TLS + client certificate + token: info and run OK"

expect_failure() {  # name, grep pattern, cli args...
  local name="$1" pattern="$2"
  shift 2
  if cli "$@" >"$work/bad.log" 2>&1; then fail "$name: succeeded"; fi
  grep -q "$pattern" "$work/bad.log" || fail "$name: no $pattern in: $(cat "$work/bad.log")"
  echo "$name: refused ($pattern)"
}
expect_failure "wrong token" UNAUTHENTICATED info "${mtls[@]}" --token_file="$work/wrong.token"
expect_failure "no token" UNAUTHENTICATED info "${mtls[@]}"
expect_failure "no client certificate" UNAVAILABLE info --tls_ca="$work/ca.pem" \
  --token_file="$work/alice.token"
expect_failure "plaintext" UNAVAILABLE info --token_file="$work/alice.token"

stop_server || fail "gemm_server exited $? after SIGTERM"
echo "PASS"
