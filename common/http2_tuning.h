// HTTP/2 settings that matter for bulk transfer, shared by the server and the
// client so that both sides are tuned by the same names. Zero keeps gRPC's
// own default for that setting. The defaults chosen, and the measurements
// behind them, are in bench/BASELINES.md ("Transport").
#ifndef GEMM_COMMON_HTTP2_TUNING_H_
#define GEMM_COMMON_HTTP2_TUNING_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace gemm {

struct Http2Tuning {
  // Largest HTTP/2 frame this side accepts (GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
  // 16 KiB to 16 MiB - 1).
  int max_frame_bytes = 0;
  // Initial per-stream receive window (GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES);
  // gRPC grows it further by its bandwidth-delay probe unless that is off.
  int stream_window_bytes = 0;
  // Bytes gRPC may buffer for writing per call (GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE).
  int write_buffer_bytes = 0;
  // gRPC's bandwidth-delay-product probe, which sizes windows by measurement
  // (GRPC_ARG_HTTP2_BDP_PROBE).
  bool bdp_probe = true;

  // InvalidArgument naming the field, or OK.
  absl::Status Validate() const;
  // The gRPC channel arguments that express these settings.
  std::vector<std::pair<std::string, int>> ChannelArgs() const;
};

}  // namespace gemm

#endif  // GEMM_COMMON_HTTP2_TUNING_H_
