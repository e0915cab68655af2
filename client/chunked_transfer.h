// Moves the bytes of server-side resident matrices in chunks through
// gemm.v1.Transfer, striped over several channels: one matrix is cut into
// contiguous byte ranges, one stream per range, each stream on its own
// HTTP/2 connection. One connection tops out far below the machine (gRPC's
// per-connection framing and flow control; see bench/BASELINES.md), so
// striping is what lets one client move one large operand at wire speed.
//
// Chunks are sent straight from the caller's memory and received straight
// into it (common/chunk_wire.h): no protobuf copy of an operand is made.
#ifndef GEMM_CLIENT_CHUNKED_TRANSFER_H_
#define GEMM_CLIENT_CHUNKED_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace gemm {

class ChunkedTransfer {
 public:
  struct Options {
    // Bytes per chunk message (each must fit the server's max message size).
    uint64_t chunk_bytes = uint64_t{4} << 20;
    // Streams one matrix is striped over, at most; each gets a channel of
    // the pool in turn.
    int stripes = 4;
  };

  // Sets up each call's context (deadline, credentials metadata).
  using PrepareContext = std::function<void(grpc::ClientContext*)>;

  // `channels` is the pool (at least one); stripe i runs on
  // channels[i % channels.size()].
  ChunkedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels, const Options& options);

  // Writes `bytes` bytes from `data` into the unfinished upload `handle`
  // (BeginUpload). `data` must stay valid until this returns. Returns the
  // first failing stream's status once every stream has ended (the others
  // are not cancelled: each runs until its own end or error).
  absl::Status Upload(const std::string& handle, const void* data, uint64_t bytes,
                      const PrepareContext& prepare) const;

  // Several uploads at once: all their stripes start together, so one
  // request's operands share the connections instead of taking turns.
  struct UploadJob {
    std::string handle;
    const void* data = nullptr;
    uint64_t bytes = 0;
  };
  absl::Status UploadAll(const std::vector<UploadJob>& jobs, const PrepareContext& prepare) const;

  // Reads bytes [0, bytes) of resident matrix `handle` into `dst`.
  // DATA_LOSS if the server sends less or out of order. With `released`
  // non-null the streams ask for DownloadRequest.release_after_download,
  // and *released says whether the server released the matrix (every
  // stream ended OK and said it counted its bytes; an older server does
  // not).
  absl::Status Download(const std::string& handle, void* dst, uint64_t bytes,
                        const PrepareContext& prepare, bool* released = nullptr) const;

  const Options& options() const { return options_; }

  // Implementation details follow.
  struct Range {
    uint64_t begin = 0;
    uint64_t end = 0;
  };
  // How `bytes` splits into at most `stripes` contiguous ranges, each a whole
  // number of chunks (the last may be short); none empty.
  static std::vector<Range> Stripes(uint64_t bytes, uint64_t chunk_bytes, int stripes);

 private:
  class UploadStream;
  class DownloadStream;

  const std::vector<std::shared_ptr<grpc::Channel>> channels_;
  const Options options_;
};

}  // namespace gemm

#endif  // GEMM_CLIENT_CHUNKED_TRANSFER_H_
