#include "service/base/limits.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace gemm {

absl::Status ServiceLimits::Validate() const {
  // gRPC sizes are int: 2 GiB - 1 is the most it can express.
  if (max_message_bytes == 0 || max_message_bytes > 0x7fffffffu)
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes must be in [1, 2^31-1], got ", max_message_bytes));
  if (max_receive_buffer_bytes != 0 && max_receive_buffer_bytes < max_message_bytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "max_receive_buffer_bytes (", max_receive_buffer_bytes,
        ") must be 0 (unbounded) or at least max_message_bytes (", max_message_bytes, ")"));
  // Backends index with 32-bit integers (BLAS, CUDA grids).
  if (max_dimension == 0 || max_dimension > 0x7fffffffu)
    return absl::InvalidArgumentError(
        absl::StrCat("max_dimension must be in [1, 2^31-1], got ", max_dimension));
  if (max_matrix_bytes == 0) return absl::InvalidArgumentError("max_matrix_bytes must be positive");
  if (max_problems_per_request == 0)
    return absl::InvalidArgumentError("max_problems_per_request must be positive");
  if (max_queued_requests == 0)
    return absl::InvalidArgumentError("max_queued_requests must be positive");
  if (max_inflight_bytes == 0)
    return absl::InvalidArgumentError("max_inflight_bytes must be positive");
  if (max_stream_inflight == 0)
    return absl::InvalidArgumentError("max_stream_inflight must be positive");
  return absl::OkStatus();
}

absl::Status WithLimit(absl::Status status, absl::string_view limit) {
  status.SetPayload(kLimitPayloadUrl, absl::Cord(limit));
  return status;
}

}  // namespace gemm
