#include "tools/health_probe/health_check.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"

#include "grpc/health/v1/health.grpc.pb.h"

namespace gemm {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

const char* ServingStatusName(ServingStatus status) {
  switch (status) {
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case ServingStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

absl::Status HealthCheckOptions::Validate() const {
  if (target.empty()) return absl::InvalidArgumentError("target is empty");
  if (deadline <= absl::ZeroDuration())
    return absl::InvalidArgumentError("deadline must be positive");
  if (!tls && (!tls_root_certs_pem.empty() || !tls_cert_chain_pem.empty() ||
               !tls_private_key_pem.empty() || !tls_server_name.empty()))
    return absl::InvalidArgumentError(
        "tls_root_certs_pem, tls_cert_chain_pem, tls_private_key_pem and tls_server_name need "
        "tls");
  if (tls_cert_chain_pem.empty() != tls_private_key_pem.empty())
    return absl::InvalidArgumentError("tls_cert_chain_pem and tls_private_key_pem go together");
  if (!bearer_token.empty() && !tls)
    return absl::InvalidArgumentError("bearer_token needs tls: a token must not travel in clear");
  for (char c : bearer_token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c)))
      return absl::InvalidArgumentError("bearer_token must be printable ASCII without spaces");
  }
  return absl::OkStatus();
}

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const HealthCheckOptions& options) {
  if (!options.tls) return grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options.tls_root_certs_pem;
  ssl.pem_cert_chain = options.tls_cert_chain_pem;
  ssl.pem_private_key = options.tls_private_key_pem;
  grpc::ChannelArguments args;
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  return grpc::CreateCustomChannel(options.target, grpc::SslCredentials(ssl), args);
}

}  // namespace

absl::StatusOr<ServingStatus> CheckHealth(const HealthCheckOptions& options) {
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  std::unique_ptr<Health::Stub> stub = Health::NewStub(MakeChannel(options));

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
  // Wait for the connection within the deadline rather than failing at once
  // while the channel is still connecting.
  context.set_wait_for_ready(true);
  if (!options.bearer_token.empty())
    context.AddMetadata("authorization", "Bearer " + options.bearer_token);

  HealthCheckRequest request;
  request.set_service(options.service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    // gRPC and Abseil share the google.rpc.Code numbering.
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
  }
  switch (response.status()) {
    case HealthCheckResponse::SERVING:
      return ServingStatus::kServing;
    case HealthCheckResponse::NOT_SERVING:
      return ServingStatus::kNotServing;
    case HealthCheckResponse::SERVICE_UNKNOWN:
      return ServingStatus::kServiceUnknown;
    default:
      return ServingStatus::kUnknown;
  }
}

}  // namespace gemm
