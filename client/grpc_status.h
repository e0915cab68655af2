// The client's conversions from gRPC statuses to Abseil ones. The two share
// numeric codes (both follow google.rpc.Code), so the mapping is by value.
// The other direction belongs to the server (gemm::ToGrpcStatus in
// service/grpc_status.h) and is defined only there, so that one binary can
// link both the client and the server (in-process tests do).
#ifndef GEMM_CLIENT_GRPC_STATUS_H_
#define GEMM_CLIENT_GRPC_STATUS_H_

#include <string_view>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace gemm {

absl::Status FromGrpcStatus(const grpc::Status& status);

// A status carried inside a message as (code, message), as GemmResponse does
// on GemmStream. Codes outside the known range become UNKNOWN.
absl::Status StatusFromCode(int code, std::string_view message);

}  // namespace gemm

#endif  // GEMM_CLIENT_GRPC_STATUS_H_
