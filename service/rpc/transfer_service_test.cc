// Unit tests of the Transfer service (transfer_service.h) and the resident
// matrix calls around it (BeginUpload, ReleaseMatrix, keep_results), served
// in-process on loopback with a fake executor (testing/service_harness.h).
// The raw gemm.v1.Transfer protocol is spoken through a generic stub, one
// chunk stream per call. Callers are told apart by bearer token.
#include "service/rpc/transfer_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>
#include <deque>
#include <thread>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/chunk_wire.h"
#include "gemm/v1/gemm.pb.h"
#include "service/testing/fake_executor.h"
#include "service/testing/service_harness.h"

namespace gemm {
namespace {

using fake::kAliceToken;
using fake::kBobToken;
using fake::ServiceHarness;
using ::testing::HasSubstr;

struct Piece {
  std::string handle;
  uint64_t offset;
  std::string data;
};

struct UploadOutcome {
  grpc::Status status;
  v1::UploadSummary summary;
};

struct DownloadOutcome {
  grpc::Status status;
  std::string bytes;
  std::vector<uint64_t> offsets;  // of each chunk received
  // The stream's "gemm-release-after-download" trailer; empty when absent.
  std::string release_trailer;
};

class TransferServiceTest : public ::testing::Test {
 protected:
  TransferServiceTest() : h_(Limits(), /*tokens=*/true) {}

  // Requests here never wait for uploads (max_waiting_requests 0), so an
  // unfinished upload is seen as it is; pipelined_gemm_test.cc covers waiting.
  static ServiceLimits Limits() {
    ServiceLimits l = fake::SmallLimits();
    l.max_waiting_requests = 0;
    return l;
  }

  void SetUp() override {
    ASSERT_TRUE(h_.started());
    alice_ = h_.NewChannel();
    bob_ = h_.NewChannel();
  }

  std::shared_ptr<grpc::Channel> ChannelOf(const std::string& token) {
    return token == kBobToken ? bob_ : alice_;
  }

  // BeginUpload of a rows x cols fp32 matrix.
  grpc::Status Begin(uint64_t rows, uint64_t cols, std::string* handle,
                     const std::string& token = kAliceToken) {
    v1::BeginUploadRequest r;
    r.set_dtype(v1::DATA_TYPE_FP32);
    r.set_rows(rows);
    r.set_cols(cols);
    v1::RegisterMatrixResponse out;
    auto ctx = ServiceHarness::Context(token);
    grpc::Status st = v1::GemmService::NewStub(ChannelOf(token))->BeginUpload(ctx.get(), r, &out);
    *handle = out.handle();
    return st;
  }

  // One Transfer.Upload stream carrying `pieces` in order.
  UploadOutcome Upload(const std::vector<Piece>& pieces, const std::string& token = kAliceToken) {
    grpc::GenericStub stub(ChannelOf(token));
    auto ctx = ServiceHarness::Context(token);
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(ctx.get(), TransferService::kUploadMethod, &cq);
    void* tag;
    bool ok;
    call->StartCall(nullptr);
    cq.Next(&tag, &ok);
    for (const Piece& p : pieces) {
      call->Write(EncodeChunk(p.handle, p.offset, p.data.data(), p.data.size()), nullptr);
      cq.Next(&tag, &ok);
      if (!ok) break;  // the server has ended the call
    }
    call->WritesDone(nullptr);
    cq.Next(&tag, &ok);
    UploadOutcome out;
    grpc::ByteBuffer summary;
    call->Read(&summary, nullptr);
    cq.Next(&tag, &ok);
    if (ok) grpc::SerializationTraits<v1::UploadSummary>::Deserialize(&summary, &out.summary);
    call->Finish(&out.status, nullptr);
    cq.Next(&tag, &ok);
    return out;
  }

  // One Transfer.Download stream for `request`.
  DownloadOutcome Download(const v1::DownloadRequest& request,
                           const std::string& token = kAliceToken) {
    grpc::GenericStub stub(ChannelOf(token));
    auto ctx = ServiceHarness::Context(token);
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(ctx.get(), TransferService::kDownloadMethod, &cq);
    void* tag;
    bool ok;
    call->StartCall(nullptr);
    cq.Next(&tag, &ok);
    grpc::ByteBuffer buffer;
    bool own;
    grpc::SerializationTraits<v1::DownloadRequest>::Serialize(request, &buffer, &own);
    call->Write(buffer, nullptr);
    cq.Next(&tag, &ok);
    call->WritesDone(nullptr);
    cq.Next(&tag, &ok);
    DownloadOutcome out;
    while (true) {
      grpc::ByteBuffer in;
      call->Read(&in, nullptr);
      cq.Next(&tag, &ok);
      if (!ok) break;
      v1::Chunk chunk;
      EXPECT_TRUE(grpc::SerializationTraits<v1::Chunk>::Deserialize(&in, &chunk).ok());
      out.offsets.push_back(chunk.offset());
      out.bytes += chunk.data();
    }
    call->Finish(&out.status, nullptr);
    cq.Next(&tag, &ok);
    auto trailer = ctx->GetServerTrailingMetadata().find(TransferService::kReleaseAfterDownloadKey);
    if (trailer != ctx->GetServerTrailingMetadata().end())
      out.release_trailer.assign(trailer->second.data(), trailer->second.size());
    return out;
  }

  DownloadOutcome DownloadAll(const std::string& handle, uint64_t chunk_bytes = 0,
                              const std::string& token = kAliceToken) {
    v1::DownloadRequest r;
    r.set_handle(handle);
    r.set_chunk_bytes(chunk_bytes);
    return Download(r, token);
  }

  grpc::Status Release(const std::string& handle, const std::string& token = kAliceToken) {
    v1::ReleaseMatrixRequest r;
    r.set_handle(handle);
    v1::ReleaseMatrixResponse out;
    auto ctx = ServiceHarness::Context(token);
    return v1::GemmService::NewStub(ChannelOf(token))->ReleaseMatrix(ctx.get(), r, &out);
  }

  // A Gemm whose B is the resident matrix `handle` (4 x 4 fp32, A 4 x 4).
  grpc::Status GemmWithB(const std::string& handle) {
    v1::GemmRequest request;
    v1::GemmProblem* p = request.add_problems();
    p->set_m(4);
    p->set_n(4);
    p->set_k(4);
    p->set_input_dtype(v1::DATA_TYPE_FP32);
    p->mutable_a()->set_data(std::string(64, '\0'));
    p->mutable_b()->set_handle(handle);
    v1::GemmResponse response;
    auto ctx = ServiceHarness::Context(kAliceToken);
    return v1::GemmService::NewStub(alice_)->Gemm(ctx.get(), request, &response);
  }

  // `n` distinct bytes.
  static std::string Bytes(size_t n, int seed = 1) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
    return s;
  }

  ServiceHarness h_;
  std::shared_ptr<grpc::Channel> alice_, bob_;
};

TEST_F(TransferServiceTest, InOrderChunksUploadAMatrixThatDownloadsInChunks) {
  std::string h;
  ASSERT_TRUE(Begin(4, 4, &h).ok());  // 64 bytes
  const std::string data = Bytes(64);
  UploadOutcome up = Upload({{h, 0, data.substr(0, 16)},
                             {h, 16, data.substr(16, 32)},
                             {h, 48, data.substr(48)}});
  ASSERT_TRUE(up.status.ok()) << up.status.error_message();
  EXPECT_EQ(up.summary.bytes_received(), 64u);
  EXPECT_EQ(up.summary.chunks(), 3u);
  DownloadOutcome down = DownloadAll(h, /*chunk_bytes=*/10);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  EXPECT_EQ(down.bytes, data);
  EXPECT_EQ(down.offsets, (std::vector<uint64_t>{0, 10, 20, 30, 40, 50, 60}));
  // A range of it.
  v1::DownloadRequest range;
  range.set_handle(h);
  range.set_offset(5);
  range.set_length(7);
  down = Download(range);
  ASSERT_TRUE(down.status.ok());
  EXPECT_EQ(down.bytes, data.substr(5, 7));
}

TEST_F(TransferServiceTest, ReleaseAfterDownloadReleasesOnceEveryByteIsRead) {
  std::string h;
  ASSERT_TRUE(Begin(4, 4, &h).ok());  // 64 bytes
  const std::string data = Bytes(64);
  v1::DownloadRequest r;
  r.set_handle(h);
  r.set_release_after_download(true);
  // An unfinished upload cannot be read: nothing counts.
  EXPECT_EQ(Download(r).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Upload({{h, 0, data}}).status.ok());
  // Two stripes, as a client reads one matrix over two streams, with a read
  // that does not ask for the release between them.
  r.set_offset(32);
  r.set_length(32);
  DownloadOutcome down = Download(r);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  EXPECT_EQ(down.bytes, data.substr(32));
  EXPECT_EQ(down.release_trailer, "counted");
  EXPECT_EQ(h_.residents_->count(), 1u);
  down = DownloadAll(h);
  ASSERT_TRUE(down.status.ok());
  EXPECT_EQ(down.release_trailer, "");
  EXPECT_EQ(h_.residents_->count(), 1u);
  r.set_offset(0);
  down = Download(r);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  EXPECT_EQ(down.bytes, data.substr(0, 32));
  EXPECT_EQ(down.release_trailer, "released");
  EXPECT_EQ(h_.residents_->count(), 0u);
  EXPECT_EQ(h_.residents_->bytes(), 0u);
  EXPECT_EQ(DownloadAll(h).status.error_code(), grpc::StatusCode::NOT_FOUND);
  // Another caller's matrix is not counted, nor read.
  std::string bobs;
  ASSERT_TRUE(Begin(4, 4, &bobs, kBobToken).ok());
  ASSERT_TRUE(Upload({{bobs, 0, data}}, kBobToken).status.ok());
  r.set_handle(bobs);
  r.set_offset(0);
  r.set_length(0);
  EXPECT_EQ(Download(r).status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(h_.residents_->count(), 1u);
}

TEST_F(TransferServiceTest, StreamsCanEachCarryPartOfOneMatrix) {
  std::string h;
  ASSERT_TRUE(Begin(4, 4, &h).ok());
  const std::string data = Bytes(64, 7);
  // The back half first, on one stream; the front half on another.
  ASSERT_TRUE(Upload({{h, 32, data.substr(32, 16)}, {h, 48, data.substr(48)}}).status.ok());
  // Until every byte is there, the matrix cannot be used.
  EXPECT_EQ(DownloadAll(h).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(Upload({{h, 0, data.substr(0, 32)}}).status.ok());
  DownloadOutcome down = DownloadAll(h);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  EXPECT_EQ(down.bytes, data);
  EXPECT_EQ(h_.residents_->bytes(), 64u);
}

TEST_F(TransferServiceTest, BadChunksAreInvalidArgumentNamingTheField) {
  std::string h;
  ASSERT_TRUE(Begin(4, 4, &h).ok());
  const std::string x = Bytes(64);
  // A gap within one stream.
  UploadOutcome out = Upload({{h, 0, x.substr(0, 8)}, {h, 16, x.substr(16, 8)}});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("offset: chunk out of order"));
  // Bytes [0, 8) arrived above: a chunk over them, from another stream.
  out = Upload({{h, 4, x.substr(4, 8)}});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("offset: bytes [4, 12) overlap bytes [0, 8)"));
  // Past the end of the 64 bytes.
  out = Upload({{h, 60, x.substr(0, 8)}});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("offset: bytes [60, 68) run past"));
  // No data, no handle.
  out = Upload({{h, 8, ""}});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("data:"));
  out = Upload({{"", 8, "abcd"}});
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("handle:"));
  // None of the refused chunks took its range: the rest still uploads.
  ASSERT_TRUE(Upload({{h, 8, x.substr(8)}}).status.ok());
  DownloadOutcome down = DownloadAll(h);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  EXPECT_EQ(down.bytes, x);
}

TEST_F(TransferServiceTest, AnUnfinishedUploadIsFailedPreconditionUntilComplete) {
  std::string h;
  ASSERT_TRUE(Begin(4, 4, &h).ok());
  const std::string x = Bytes(64);
  ASSERT_TRUE(Upload({{h, 0, x.substr(0, 40)}}).status.ok());
  grpc::Status st = GemmWithB(h);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("40 of 64 bytes have arrived"));
  EXPECT_EQ(DownloadAll(h).status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(h_.queue_->queued(), 0u);
  ASSERT_TRUE(Upload({{h, 40, x.substr(40)}}).status.ok());
  // Complete: usable by a request, and no longer open to chunks.
  std::thread run([&] { h_.Dispatch(1); });
  EXPECT_TRUE(GemmWithB(h).ok());
  run.join();
  UploadOutcome again = Upload({{h, 0, x.substr(0, 4)}});
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(TransferServiceLimitsTest, OversizedUploadsAreRefusedBeforeAnyData) {
  ServiceLimits limits = fake::SmallLimits();
  limits.max_matrix_bytes = 2048;
  limits.max_resident_bytes = 1024;
  ServiceHarness h(limits);
  ASSERT_TRUE(h.started());
  auto stub = v1::GemmService::NewStub(h.NewChannel());
  struct Case {
    uint64_t rows, cols;
    const char* needle;
  } cases[] = {{16, 33, "max_matrix_bytes"},     // 2112 bytes
               {16, 20, "max_resident_bytes"}};  // 1280 bytes
  for (const Case& c : cases) {
    v1::BeginUploadRequest r;
    r.set_dtype(v1::DATA_TYPE_FP32);
    r.set_rows(c.rows);
    r.set_cols(c.cols);
    v1::RegisterMatrixResponse out;
    auto ctx = ServiceHarness::Context();
    const grpc::Status st = stub->BeginUpload(ctx.get(), r, &out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << c.needle;
    EXPECT_THAT(st.error_message(), HasSubstr(c.needle));
    EXPECT_TRUE(out.handle().empty());
    auto it = ctx->GetServerTrailingMetadata().find("grpc-retry-pushback-ms");
    ASSERT_NE(it, ctx->GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "-1");
  }
  EXPECT_EQ(h.residents_->bytes(), 0u);  // nothing reserved
  EXPECT_EQ(h.residents_->count(), 0u);
}

TEST_F(TransferServiceTest, AKeptResultDownloadsAndReleases) {
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  p->set_m(3);
  p->set_n(5);
  p->set_k(2);
  p->set_input_dtype(v1::DATA_TYPE_FP32);
  p->set_alpha(0.5);
  p->mutable_a()->set_data(std::string(3 * 2 * 4, '\0'));
  p->mutable_b()->set_data(std::string(2 * 5 * 4, '\0'));
  request.set_keep_results(true);
  v1::GemmResponse response;
  std::thread run([&] { h_.Dispatch(1); });
  auto ctx = ServiceHarness::Context(kAliceToken);
  ASSERT_TRUE(v1::GemmService::NewStub(alice_)->Gemm(ctx.get(), request, &response).ok());
  run.join();
  ASSERT_EQ(response.results_size(), 1);
  const std::string handle = response.results(0).handle();
  ASSERT_FALSE(handle.empty());
  EXPECT_TRUE(response.results(0).data().empty());
  EXPECT_EQ(h_.residents_->bytes(), 60u);
  DownloadOutcome down = DownloadAll(handle, 16);
  ASSERT_TRUE(down.status.ok()) << down.status.error_message();
  ASSERT_EQ(down.bytes.size(), 60u);
  GemmProblemRef ref;
  ref.shape.k = 2;
  ref.alpha = 0.5;
  for (uint64_t i = 0; i < 15; ++i) {
    float v;
    std::memcpy(&v, down.bytes.data() + 4 * i, 4);
    EXPECT_EQ(v, fake::FakeExecutor::ExpectedElement(ref, i)) << i;
  }
  ASSERT_TRUE(Release(handle).ok());
  EXPECT_EQ(h_.residents_->bytes(), 0u);
  EXPECT_EQ(DownloadAll(handle).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Release(handle).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(TransferServiceTest, AnotherCallersMatrixIsPermissionDenied) {
  std::string h;
  ASSERT_TRUE(Begin(2, 2, &h, kAliceToken).ok());
  const std::string x = Bytes(16);
  UploadOutcome out = Upload({{h, 0, x}}, kBobToken);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Upload({{h, 0, x}}, kAliceToken).status.ok());
  EXPECT_EQ(DownloadAll(h, 0, kBobToken).status.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status st = Release(h, kBobToken);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("handle:"));
  // Still Alice's, untouched.
  DownloadOutcome down = DownloadAll(h, 0, kAliceToken);
  ASSERT_TRUE(down.status.ok());
  EXPECT_EQ(down.bytes, x);
  EXPECT_TRUE(Release(h, kAliceToken).ok());
}

TEST_F(TransferServiceTest, AnUnknownHandleIsNotFound) {
  const std::string unknown = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(Upload({{unknown, 0, "abcd"}}).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(DownloadAll(unknown).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Release(unknown).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::DownloadRequest none;  // no handle at all
  const DownloadOutcome d = Download(none);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(d.status.error_message(), HasSubstr("handle: required"));
}

TEST_F(TransferServiceTest, DownloadRangesPastTheEndNameTheField) {
  std::string h;
  ASSERT_TRUE(Begin(2, 2, &h).ok());
  ASSERT_TRUE(Upload({{h, 0, Bytes(16)}}).status.ok());
  v1::DownloadRequest r;
  r.set_handle(h);
  r.set_offset(17);
  DownloadOutcome d = Download(r);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(d.status.error_message(), HasSubstr("offset: 17 is past"));
  r.set_offset(8);
  r.set_length(9);
  d = Download(r);
  EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(d.status.error_message(), HasSubstr("length: bytes [8, 17)"));
}

}  // namespace
}  // namespace gemm
