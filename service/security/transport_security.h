// Who may connect: TLS (optionally mutual) for the gRPC port and bearer-token
// authentication (auth.h), turned into the server's credentials.
#ifndef GEMM_SERVICE_SECURITY_TRANSPORT_SECURITY_H_
#define GEMM_SERVICE_SECURITY_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"
#include "service/security/auth.h"

namespace gemm {

struct SecurityOptions {
  // PEM certificate chain and private key of the server. Both set turn TLS
  // on; both empty (the default) leave the port plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle. When set (TLS only), every client must present a
  // certificate that it signed (mutual TLS); the handshake fails otherwise.
  // The certificate's subject then names the caller when the call carries no
  // bearer token (caller_identity.h).
  std::string tls_client_ca_file;
  // "<caller-name> <token>" lines (auth.h). When set, every call needs
  // "authorization: Bearer <token>" and gets UNAUTHENTICATED otherwise.
  std::string auth_tokens_file;

  bool tls() const { return !tls_cert_file.empty(); }

  // InvalidArgument naming the field: a certificate without a key or the
  // other way round, or a client CA without TLS.
  absl::Status Validate() const;
};

// The credentials for the gRPC port:
//   no TLS, no tokens: plaintext (grpc::InsecureServerCredentials);
//   TLS:               grpc::SslServerCredentials, requiring and verifying a
//                      client certificate when tls_client_ca_file is set;
//   tokens:            the BearerTokenProcessor on top. Without TLS the port
//                      then takes connections from loopback peers only (gRPC's
//                      local TCP credentials): gRPC runs token processors on
//                      secure credentials only, and a bearer token must not
//                      cross a network in the clear anyway.
// Reads the files now; NotFound/InvalidArgument names the file that failed.
// `on_auth_failure` (may be empty) hears of every call the token check
// refuses.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options, AuthFailureObserver on_auth_failure = nullptr);

// The contents of a file, or NotFound naming it.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace gemm

#endif  // GEMM_SERVICE_SECURITY_TRANSPORT_SECURITY_H_
