#include "common/chunk_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gemm {
namespace {

// Field numbers of gemm.v1.Chunk and protobuf's wire types.
constexpr uint32_t kHandleField = 1;
constexpr uint32_t kOffsetField = 2;
constexpr uint32_t kDataField = 3;
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads forward through a message held in several slices.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { SkipEmpty(); }

  bool done() const { return slice_ == slices_.size(); }
  size_t slice() const { return slice_; }
  size_t offset() const { return offset_; }

  bool ReadByte(uint8_t* b) {
    if (done()) return false;
    *b = slices_[slice_].begin()[offset_];
    Advance(1);
    return true;
  }
  // A varint of at most `max_bytes` bytes (10 for 64 bits; 5 for a tag,
  // which protobuf reads as 32 bits).
  bool ReadVarint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }
  // Moves `n` bytes on, appending them to `out` when it is not null.
  bool Take(uint64_t n, std::string* out) {
    while (n > 0) {
      if (done()) return false;
      const size_t here = slices_[slice_].size() - offset_;
      const size_t step = n < here ? static_cast<size_t>(n) : here;
      if (out != nullptr)
        out->append(reinterpret_cast<const char*>(slices_[slice_].begin()) + offset_, step);
      Advance(step);
      n -= step;
    }
    return true;
  }

 private:
  void Advance(size_t n) {
    offset_ += n;
    if (offset_ == slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (slice_ < slices_.size() && slices_[slice_].size() == 0) ++slice_;
  }

  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0;
  size_t offset_ = 0;
};

void ReleaseKeepalive(void* keepalive) {
  delete static_cast<std::shared_ptr<const void>*>(keepalive);
}

}  // namespace

grpc::ByteBuffer EncodeChunk(absl::string_view handle, uint64_t offset, const void* data,
                             size_t size, std::shared_ptr<const void> keepalive) {
  std::string header;
  header.reserve(handle.size() + 32);
  if (!handle.empty()) {
    header.push_back(static_cast<char>(kHandleField << 3 | kLengthDelimited));
    AppendVarint(handle.size(), &header);
    header.append(handle.data(), handle.size());
  }
  if (offset != 0) {
    header.push_back(static_cast<char>(kOffsetField << 3 | kVarint));
    AppendVarint(offset, &header);
  }
  if (size == 0) {
    grpc::Slice only(header);
    return grpc::ByteBuffer(&only, 1);
  }
  header.push_back(static_cast<char>(kDataField << 3 | kLengthDelimited));
  AppendVarint(size, &header);
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      keepalive == nullptr
          ? grpc::Slice(data, size, grpc::Slice::STATIC_SLICE)
          // gRPC frees the slice, and so drops the keepalive, when it is done
          // with the bytes.
          : grpc::Slice(const_cast<void*>(data), size, &ReleaseKeepalive,
                        new std::shared_ptr<const void>(std::move(keepalive)))};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status ChunkReader::Parse(const grpc::ByteBuffer& buffer) {
  slices_.clear();
  handle_.clear();
  offset_ = 0;
  data_size_ = 0;
  data_slice_ = 0;
  data_offset_ = 0;
  grpc::Status dumped = buffer.Dump(&slices_);
  if (!dumped.ok())
    return absl::InvalidArgumentError(absl::StrCat("chunk: unreadable message: ",
                                                   dumped.error_message()));
  auto malformed = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: not a gemm.v1.Chunk message (", why,
                                                   ")"));
  };
  Cursor in(slices_);
  while (!in.done()) {
    uint64_t tag;
    if (!in.ReadVarint(&tag, 5) || tag > 0xffffffffu) return malformed("bad tag");
    const uint64_t field = tag >> 3;
    const uint32_t wire = static_cast<uint32_t>(tag & 7);
    // Protobuf's field numbers are 1 to 2^29 - 1.
    if (field == 0 || field > (uint64_t{1} << 29) - 1)
      return malformed(absl::StrCat("field number ", field));
    if (field == kOffsetField && wire == kVarint) {
      if (!in.ReadVarint(&offset_)) return malformed("truncated offset");
      continue;
    }
    if ((field == kHandleField || field == kDataField) && wire != kLengthDelimited)
      return malformed(absl::StrCat("field ", field, " has wire type ", wire));
    if (field == kOffsetField) return malformed(absl::StrCat("offset has wire type ", wire));
    switch (wire) {
      case kVarint: {
        uint64_t ignored;
        if (!in.ReadVarint(&ignored)) return malformed("truncated varint");
        break;
      }
      case kFixed64:
        if (!in.Take(8, nullptr)) return malformed("truncated fixed64");
        break;
      case kFixed32:
        if (!in.Take(4, nullptr)) return malformed("truncated fixed32");
        break;
      case kLengthDelimited: {
        uint64_t length;
        if (!in.ReadVarint(&length)) return malformed("truncated length");
        if (field == kHandleField) {
          if (length > 1024) return malformed("handle longer than 1024 bytes");
          handle_.clear();
          if (!in.Take(length, &handle_)) return malformed("truncated handle");
          // Handles are hex digits; anything outside printable ASCII (which
          // also keeps the string valid UTF-8, as proto3 requires) is not one.
          for (char c : handle_)
            if (c < 0x20 || c > 0x7e) return malformed("handle is not printable ASCII");
        } else {
          if (field == kDataField) {  // the last occurrence wins, as in protobuf
            data_size_ = length;
            data_slice_ = in.slice();
            data_offset_ = in.offset();
          }
          if (!in.Take(length, nullptr)) return malformed("truncated bytes field");
        }
        break;
      }
      default:
        return malformed(absl::StrCat("wire type ", wire));
    }
  }
  return absl::OkStatus();
}

void ChunkReader::ForEachDataPiece(const std::function<void(const char*, size_t)>& piece) const {
  uint64_t left = data_size_;
  size_t slice = data_slice_;
  size_t offset = data_offset_;
  while (left > 0 && slice < slices_.size()) {
    const grpc::Slice& s = slices_[slice];
    const size_t here = s.size() - offset;
    const size_t step = left < here ? static_cast<size_t>(left) : here;
    if (step > 0) piece(reinterpret_cast<const char*>(s.begin()) + offset, step);
    left -= step;
    ++slice;
    offset = 0;
  }
}

void ChunkReader::CopyDataTo(void* dst) const {
  char* out = static_cast<char*>(dst);
  ForEachDataPiece([&out](const char* p, size_t n) {
    std::memcpy(out, p, n);
    out += n;
  });
}

}  // namespace gemm
