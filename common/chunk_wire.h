// The wire form of gemm.v1.Chunk (Transfer.Upload / Transfer.Download) read
// and written without copying the chunk's bytes through a protobuf message:
// encoding hands gRPC a slice that points at the caller's memory; decoding
// finds the data field inside gRPC's received slices so it can be copied once,
// straight to where it belongs. The bytes on the wire are ordinary protobuf,
// so generated stubs in any language interoperate.
#ifndef GEMM_COMMON_CHUNK_WIRE_H_
#define GEMM_COMMON_CHUNK_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gemm {

// A Chunk {handle, offset, data = [data, data + size)} as a message buffer.
// The data is not copied: gRPC reads it while sending, so it must stay valid
// until gRPC frees the buffer's slices, which drops `keepalive` (pass the
// owner of the memory, or null when the caller outlives the send).
grpc::ByteBuffer EncodeChunk(absl::string_view handle, uint64_t offset, const void* data,
                             size_t size, std::shared_ptr<const void> keepalive = nullptr);

// A received Chunk: its handle and offset parsed, its data left in place.
class ChunkReader {
 public:
  // Parses `buffer` (which is read, not consumed). INVALID_ARGUMENT for bytes
  // that are not a Chunk message.
  absl::Status Parse(const grpc::ByteBuffer& buffer);

  const std::string& handle() const { return handle_; }
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return data_size_; }

  // Calls `piece` for each contiguous run of the data bytes, in order.
  void ForEachDataPiece(const std::function<void(const char*, size_t)>& piece) const;
  // Copies the data bytes to `dst` (size() bytes).
  void CopyDataTo(void* dst) const;

 private:
  std::vector<grpc::Slice> slices_;
  std::string handle_;
  uint64_t offset_ = 0;
  uint64_t data_size_ = 0;
  size_t data_slice_ = 0;   // where the data field's bytes start
  size_t data_offset_ = 0;  // within slices_[data_slice_]
};

}  // namespace gemm

#endif  // GEMM_COMMON_CHUNK_WIRE_H_
