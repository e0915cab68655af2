// The server's conversion from Abseil statuses to gRPC ones, shared by every
// service that finishes calls. The two share numeric codes (both follow
// google.rpc.Code), so the mapping is by value. The other direction belongs to
// the client (gemm::FromGrpcStatus in client/grpc_status.h); the names differ
// so that one binary can link both the client and the server (in-process
// tests do).
#ifndef GEMM_SERVICE_GRPC_STATUS_H_
#define GEMM_SERVICE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace gemm {

// absl::Status -> grpc::Status (same code and message).
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gemm

#endif  // GEMM_SERVICE_GRPC_STATUS_H_
