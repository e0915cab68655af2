#include "service/security/transport_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "service/security/auth.h"

namespace gemm {

absl::Status SecurityOptions::Validate() const {
  if (tls_cert_file.empty() != tls_key_file.empty())
    return absl::InvalidArgumentError("tls_cert_file and tls_key_file go together");
  if (!tls_client_ca_file.empty() && !tls())
    return absl::InvalidArgumentError("tls_client_ca_file needs tls_cert_file and tls_key_file");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const SecurityOptions& options, AuthFailureObserver on_auth_failure) {
  GEMM_RETURN_IF_ERROR(options.Validate());
  std::shared_ptr<const TokenAuthenticator> tokens;
  if (!options.auth_tokens_file.empty()) {
    GEMM_ASSIGN_OR_RETURN(tokens, TokenAuthenticator::FromFile(options.auth_tokens_file));
  }
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options.tls()) {
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    GEMM_ASSIGN_OR_RETURN(pair.cert_chain, ReadFileToString(options.tls_cert_file));
    GEMM_ASSIGN_OR_RETURN(pair.private_key, ReadFileToString(options.tls_key_file));
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!options.tls_client_ca_file.empty()) {
      GEMM_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadFileToString(options.tls_client_ca_file));
      // Verified, always: caller_identity.h names a caller by any client
      // certificate it finds in the auth context, so a mode that accepts an
      // unverified one would let a client pick its own identity.
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else if (tokens != nullptr) {
    creds = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  } else {
    return grpc::InsecureServerCredentials();
  }
  if (creds == nullptr) return absl::InvalidArgumentError("gRPC refused the TLS settings");
  if (tokens != nullptr)
    creds->SetAuthMetadataProcessor(std::make_shared<BearerTokenProcessor>(std::move(tokens),
                                                                   std::move(on_auth_failure)));
  return creds;
}

}  // namespace gemm
