#include "common/http2_tuning.h"

#include <grpc/grpc.h>

#include "absl/strings/str_cat.h"

namespace gemm {

absl::Status Http2Tuning::Validate() const {
  if (max_frame_bytes != 0 && (max_frame_bytes < 16384 || max_frame_bytes > 16777215))
    return absl::InvalidArgumentError(absl::StrCat(
        "max_frame_bytes must be 0 or in [16384, 16777215], got ", max_frame_bytes));
  if (stream_window_bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("stream_window_bytes must not be negative, got ", stream_window_bytes));
  if (write_buffer_bytes < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("write_buffer_bytes must not be negative, got ", write_buffer_bytes));
  return absl::OkStatus();
}

std::vector<std::pair<std::string, int>> Http2Tuning::ChannelArgs() const {
  std::vector<std::pair<std::string, int>> args;
  if (max_frame_bytes != 0) args.emplace_back(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, max_frame_bytes);
  if (stream_window_bytes != 0)
    args.emplace_back(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, stream_window_bytes);
  if (write_buffer_bytes != 0)
    args.emplace_back(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, write_buffer_bytes);
  if (!bdp_probe) args.emplace_back(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  return args;
}

}  // namespace gemm
