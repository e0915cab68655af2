// One grpc.health.v1.Health/Check call, for the health probe binary and its
// tests: plaintext (the server's health-only port, --health_listen, or a
// plaintext main port), or TLS with an optional client certificate and a
// bearer token (the main port of a server with TLS and tokens on).
#ifndef GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_
#define GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gemm {

enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

const char* ServingStatusName(ServingStatus status);

struct HealthCheckOptions {
  std::string target = "127.0.0.1:50051";
  // "" asks about the whole server; a full service name (e.g.
  // "gemm.v1.GemmService") asks about that service.
  std::string service;
  // Covers connecting and the call together.
  absl::Duration deadline = absl::Seconds(1);

  // TLS. Without it the channel is plaintext.
  bool tls = false;
  // PEM roots that must have signed the server's certificate; empty means
  // the system's roots.
  std::string tls_root_certs_pem;
  // PEM client certificate chain and key, for servers that require mutual
  // TLS; both or neither.
  std::string tls_cert_chain_pem;
  std::string tls_private_key_pem;
  // The name the server's certificate must carry, when it is not the host
  // of `target` (dialling a pod IP whose certificate names the Service).
  std::string tls_server_name;
  // Sent as "authorization: Bearer <token>"; needs TLS (a token must not
  // travel in clear). gemm_server's own port answers health checks without
  // one; a proxy in front of it may not.
  std::string bearer_token;

  // InvalidArgument naming the field: TLS settings without tls, half a
  // client key pair, a token without TLS or with spaces or control bytes.
  absl::Status Validate() const;
};

// Calls Check once. Returns the server's answer, or the RPC's error:
// UNAVAILABLE when nothing listens or the TLS handshake fails,
// DEADLINE_EXCEEDED when it does not answer in time, NOT_FOUND when the
// server does not know `service`, UNAUTHENTICATED when it wants a token.
// InvalidArgument from Validate() when the options do not hold together.
absl::StatusOr<ServingStatus> CheckHealth(const HealthCheckOptions& options);

}  // namespace gemm

#endif  // GEMM_TOOLS_HEALTH_PROBE_HEALTH_CHECK_H_
