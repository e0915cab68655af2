// The one place where gRPC and Abseil statuses are converted. The two share
// numeric codes (both follow google.rpc.Code), so the mapping is by value.
#ifndef GEMM_CLIENT_GRPC_STATUS_H_
#define GEMM_CLIENT_GRPC_STATUS_H_

#include <string_view>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace gemm {

absl::Status FromGrpcStatus(const grpc::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

// A status carried inside a message as (code, message), as GemmResponse does
// on GemmStream. Codes outside the known range become UNKNOWN.
absl::Status StatusFromCode(int code, std::string_view message);

}  // namespace gemm

#endif  // GEMM_CLIENT_GRPC_STATUS_H_
