// libFuzzer target: bytes, cut into gRPC slices at fuzzer-chosen points ->
// ChunkReader (the zero-copy gemm.v1.Chunk parser the server runs on every
// Transfer.Upload message). Differential check: a message that both accept
// must give the same handle, offset and data.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "common/chunk_wire.h"
#include "gemm/v1/gemm.pb.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks up to 7 cut points (one byte each, scaled).
  const size_t cuts = data[0] % 8;
  if (size < 1 + cuts) return 0;
  const std::string message(reinterpret_cast<const char*>(data + 1 + cuts), size - 1 - cuts);
  std::vector<size_t> at;
  for (size_t i = 0; i < cuts; ++i)
    at.push_back(message.empty() ? 0 : data[1 + i] * message.size() / 256);
  std::sort(at.begin(), at.end());
  std::vector<grpc::Slice> slices;
  size_t from = 0;
  for (size_t cut : at) {
    slices.emplace_back(message.data() + from, cut - from);  // empty slices too
    from = cut;
  }
  slices.emplace_back(message.data() + from, message.size() - from);
  grpc::ByteBuffer buffer(slices.data(), slices.size());

  gemm::ChunkReader reader;
  if (!reader.Parse(buffer).ok()) return 0;
  // Encodings protobuf refuses but ChunkReader reads (over-long varints and
  // the like; three such were found and made refusals, see the seeds) are
  // not a safety problem: ASan watches every read. What must hold is that a
  // message both accept reads the same.
  gemm::v1::Chunk parsed;
  if (!parsed.ParseFromString(message)) return 0;
  Check(parsed.handle() == reader.handle(), "handle differs from protobuf's");
  Check(parsed.offset() == reader.offset(), "offset differs from protobuf's");
  Check(parsed.data().size() == reader.size(), "data size differs from protobuf's");
  std::string copy(reader.size(), '\0');
  reader.CopyDataTo(copy.data());
  Check(copy == parsed.data(), "data differs from protobuf's");
  return 0;
}
