#include "tools/health_probe/health_check.h"

#include <grpcpp/grpcpp.h>

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

absl::StatusOr<ServingStatus> CheckHealth(const HealthCheckOptions& options) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(options.target, grpc::InsecureChannelCredentials());
  std::unique_ptr<Health::Stub> stub = Health::NewStub(channel);

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.deadline));
  // Wait for the connection within the deadline rather than failing at once
  // while the channel is still connecting.
  context.set_wait_for_ready(true);

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
