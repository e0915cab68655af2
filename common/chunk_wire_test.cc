#include "common/chunk_wire.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <grpcpp/impl/codegen/proto_utils.h>
#include <gtest/gtest.h>

#include "gemm/v1/gemm.pb.h"

namespace gemm {
namespace {

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Splits `bytes` into slices at the given cut points, as gRPC may deliver it.
grpc::ByteBuffer Sliced(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  for (size_t cut : cuts) {
    if (cut <= at || cut >= bytes.size()) continue;
    slices.emplace_back(bytes.data() + at, cut - at);
    at = cut;
  }
  slices.emplace_back(bytes.data() + at, bytes.size() - at);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(ChunkWireTest, EncodedChunkIsTheProtobufMessage) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{100000}}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 40}) {
      const std::string data = RandomBytes(size, static_cast<uint32_t>(size + offset));
      grpc::ByteBuffer buffer = EncodeChunk("0123abcd", offset, data.data(), data.size());
      v1::Chunk parsed;
      ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer))) << size;
      EXPECT_EQ(parsed.handle(), "0123abcd");
      EXPECT_EQ(parsed.offset(), offset);
      EXPECT_EQ(parsed.data(), data);
    }
  }
}

TEST(ChunkWireTest, ReaderFindsTheDataOfAProtobufMessageSplitAnywhere) {
  v1::Chunk chunk;
  chunk.set_handle("feedface");
  chunk.set_offset(123456789);
  chunk.set_data(RandomBytes(5000, 7));
  const std::string bytes = chunk.SerializeAsString();
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts;
    for (int i = 0; i < trial % 7; ++i) cuts.push_back(rng() % bytes.size());
    std::sort(cuts.begin(), cuts.end());
    ChunkReader reader;
    ASSERT_TRUE(reader.Parse(Sliced(bytes, cuts)).ok());
    EXPECT_EQ(reader.handle(), "feedface");
    EXPECT_EQ(reader.offset(), 123456789u);
    ASSERT_EQ(reader.size(), 5000u);
    std::string out(reader.size(), '\0');
    reader.CopyDataTo(out.data());
    EXPECT_EQ(out, chunk.data());
  }
}

TEST(ChunkWireTest, FieldsInAnyOrderAndUnknownFieldsAreAccepted) {
  // data first, then an unknown varint field 9 and a fixed32 field 10, then
  // the handle: valid protobuf that a generic client might produce.
  std::string bytes;
  bytes += '\x1a';
  bytes += '\x03';
  bytes += "xyz";
  bytes += '\x48';  // field 9, varint
  bytes += '\x96';
  bytes += '\x01';
  bytes += '\x55';  // field 10, fixed32
  bytes += std::string(4, '\x01');
  bytes += '\x0a';
  bytes += '\x02';
  bytes += "hh";
  ChunkReader reader;
  ASSERT_TRUE(reader.Parse(Sliced(bytes, {})).ok());
  EXPECT_EQ(reader.handle(), "hh");
  EXPECT_EQ(reader.offset(), 0u);
  std::string out(reader.size(), '\0');
  reader.CopyDataTo(out.data());
  EXPECT_EQ(out, "xyz");
}

TEST(ChunkWireTest, MalformedMessagesAreRejected) {
  for (const std::string& bad :
       {std::string("\x1a\x05" "ab", 4),  // data shorter than its length
        std::string("\x0a", 1),           // truncated length
        std::string("\x12\x01x", 3),      // offset as bytes
        std::string("\x08\xff", 2),       // truncated varint (field 1 as varint is bad too)
        std::string("\x0b", 1),           // group wire type
        std::string("\x00\x01", 2),       // field number 0
        // field number past 2^29 - 1 (found by fuzz/chunk_fuzzer)
        std::string("\xe0\xfc\x8a\x86\x85\xb6\x05\x97\x68", 9),
        std::string("\x0a\x02h\xeb", 4),  // handle not ASCII (not UTF-8 either)
        // a 6-byte tag varint (found by fuzz/chunk_fuzzer in CI)
        std::string("\xe0\xfc\x8a\x86\x85\x00\xb6\x05", 8)}) {
    ChunkReader reader;
    absl::Status st = reader.Parse(Sliced(bad, {}));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(bad);
    EXPECT_NE(st.message().find("chunk"), absl::string_view::npos);
  }
}

TEST(ChunkWireTest, KeepaliveIsDroppedWhenTheBufferIsFreed) {
  auto owner = std::make_shared<std::string>(RandomBytes(64, 3));
  std::weak_ptr<std::string> watch = owner;
  {
    grpc::ByteBuffer buffer = EncodeChunk("h", 0, owner->data(), owner->size(), owner);
    owner.reset();
    EXPECT_FALSE(watch.expired());  // the buffer's slice holds it
    ChunkReader reader;
    ASSERT_TRUE(reader.Parse(buffer).ok());
    std::string out(reader.size(), '\0');
    reader.CopyDataTo(out.data());
    EXPECT_EQ(out, *watch.lock());
  }
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace gemm
