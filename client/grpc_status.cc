#include "client/grpc_status.h"

#include <string>

namespace gemm {
namespace {

// google.rpc.Code runs from OK (0) to UNAUTHENTICATED (16).
constexpr int kMaxCode = 16;

}  // namespace

absl::Status StatusFromCode(int code, std::string_view message) {
  if (code == 0) return absl::OkStatus();
  const absl::string_view text(message.data(), message.size());
  if (code < 0 || code > kMaxCode) return absl::UnknownError(text);
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return StatusFromCode(static_cast<int>(status.error_code()), status.error_message());
}

}  // namespace gemm
