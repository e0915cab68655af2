// Large operands in chunks end to end (CPU backend, in-process server on
// loopback): gemm::Client's chunked path (uploads, keep_results, striped
// downloads) gives the same results as single messages for every dtype and
// size from 2 bytes up; the raw gemm.v1.Transfer protocol refuses bad chunk
// streams (out of order, duplicated, past the end, unknown, malformed, sizes
// that disagree with the shape) with a status naming the field; and a stream
// that stops midway leaves nothing behind once the idle timeout has passed.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "common/chunk_wire.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

class ChunkedTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options = test::LoopbackCpuServerOptions(2);
    options.transient_idle_timeout = absl::Seconds(1);
    auto server = GemmServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    target_ = absl::StrCat("127.0.0.1:", server_->port());
  }

  std::unique_ptr<Client> MakeClient(uint64_t threshold, uint64_t chunk_bytes, int channels,
                                     bool pipelined = true) {
    ClientOptions o;
    o.target = target_;
    o.pipelined_uploads = pipelined;
    o.chunked_threshold_bytes = threshold;
    o.chunk_bytes = chunk_bytes;
    o.transfer_channels = channels;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  double Metric(const std::string& name, const std::vector<std::string>& labels = {}) {
    return test::MetricValue(server_->metrics()->Scrape(), name, labels);
  }

  // Whether the server holds no resident bytes within 10 s. A matrix
  // released while the request that used it is still being torn down (its
  // answer already sent) is freed a moment later.
  bool NothingResident() {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (Metric("gemm_resident_bytes") != 0) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

  // A request for one random problem of `spec` whose result stays on the
  // server (keep_results).
  static v1::GemmRequest KeepResultRequest(const test::ProblemSpec& spec, uint32_t seed) {
    std::mt19937 rng(seed);
    v1::GemmRequest request;
    *request.add_problems() = test::MakeProblem(spec, &rng);
    request.set_keep_results(true);
    return request;
  }

  // `kept` (a result left on the server) with its `bytes` bytes downloaded
  // into `full`'s data.
  static absl::Status DownloadKept(Client* client, const v1::GemmResult& kept, uint64_t bytes,
                                   v1::GemmResult* full) {
    *full = kept;
    full->mutable_data()->resize(bytes);
    return client->DownloadMatrix(kept.handle(), full->mutable_data()->data(), bytes);
  }

  std::unique_ptr<GemmServer> server_;
  std::string target_;
};

// The same problems through single messages and through chunks with several
// chunk sizes and stripe counts: every result checked against the reference.
TEST_F(ChunkedTransferTest, ChunkedGemmMatchesTheReferenceForEverySizeAndType) {
  std::mt19937 rng(20261129);
  std::vector<test::ProblemSpec> specs;
  // 1x1x1 fp16/bf16: 2-byte operands; ragged sizes; transposes; C with beta.
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    specs.push_back({1, 1, 1, t});
    test::ProblemSpec s{37, 53, 129, t};
    s.transpose_a = true;
    s.layout_b = Layout::kColMajor;
    s.layout_d = Layout::kColMajor;
    s.beta = 0.5;
    s.layout_c = Layout::kColMajor;  // resident C must be in D's layout
    specs.push_back(s);
    specs.push_back({300, 257, 64, t, DType::kFp32});
  }
  struct Setting {
    uint64_t threshold, chunk;
    int channels;
  };
  for (Setting setting : {Setting{1, 1, 1}, Setting{1, 61, 3}, Setting{64, 1000, 4},
                          Setting{1, 1 << 20, 8}}) {
    std::unique_ptr<Client> client = MakeClient(setting.threshold, setting.chunk,
                                                setting.channels);
    for (const test::ProblemSpec& spec : specs) {
      // One-byte chunks only for the smallest problems (a chunk per byte is
      // slow, not interesting, for larger ones).
      if (setting.chunk == 1 && spec.m * spec.k > 1) continue;
      v1::GemmRequest request;
      request.set_request_id(test::Describe(spec));
      *request.add_problems() = test::MakeProblem(spec, &rng);
      auto response = client->Gemm(request);
      ASSERT_TRUE(response.ok()) << test::Describe(spec) << ": " << response.status();
      EXPECT_TRUE(test::ResponseMatches(request, *response))
          << test::Describe(spec) << " chunk " << setting.chunk;
      EXPECT_TRUE(response->results(0).handle().empty());
    }
  }
  // Every upload and kept result was released: nothing is left on the server.
  EXPECT_TRUE(NothingResident()) << Metric("gemm_resident_bytes");
  EXPECT_GT(Metric("gemm_chunk_bytes_total", {"direction=\"upload\""}), 0);
  EXPECT_GT(Metric("gemm_chunk_bytes_total", {"direction=\"download\""}), 0);
}

// The client's large-request path both ways: the Gemm sent beside its
// uploads with release_after_use and results released as they are read (the
// default, above), and upload, Gemm, download, release one after another (an older client's order, which the server
// serves unchanged).
TEST_F(ChunkedTransferTest, PipelinedAndSequentialLargeRequestsAgree) {
  std::mt19937 rng(49);
  for (bool pipelined : {true, false}) {
    std::unique_ptr<Client> client = MakeClient(1, 4096, 4, pipelined);
    for (DType t : {DType::kFp32, DType::kBf16}) {
      test::ProblemSpec spec{96, 80, 200, t};
      spec.beta = 1.0;  // C uploaded too
      v1::GemmRequest request;
      *request.add_problems() = test::MakeProblem(spec, &rng);
      auto response = client->Gemm(request);
      ASSERT_TRUE(response.ok()) << pipelined << ": " << response.status();
      EXPECT_TRUE(test::ResponseMatches(request, *response)) << pipelined;
    }
    EXPECT_TRUE(NothingResident()) << pipelined;
    // Pipelined, the operands go with the request (release_after_use) and
    // the downloaded results with their reads (release_after_download): no
    // ReleaseMatrix round trip at all.
    if (pipelined) {
      EXPECT_EQ(Metric("gemm_requests_total", {"method=\"ReleaseMatrix\""}), 0);
    }
    EXPECT_GT(Metric("gemm_requests_total", {"method=\"Download\""}), 0);
  }
}

// A pipelined request the server holds for its uploads and then refuses
// (its kept result does not fit in max_resident_bytes once they are in) has
// had its operands released with it: the client answers with that refusal,
// not with the NOT_FOUND a plain retry would meet, and nothing stays behind.
TEST_F(ChunkedTransferTest, AHeldRequestRefusedAfterItsWaitAnswersWithTheRefusal) {
  server_->Shutdown(absl::Seconds(5));
  ServerOptions options = test::LoopbackCpuServerOptions(2);
  options.transient_idle_timeout = absl::Seconds(1);
  options.limits.max_resident_bytes = (uint64_t{5} << 20) / 2;  // A and B fit, D does not too
  auto server = GemmServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  target_ = absl::StrCat("127.0.0.1:", server_->port());
  // Small chunks: the uploads take long enough that the Gemm is held.
  std::unique_ptr<Client> client = MakeClient(1, 4096, 2);
  std::mt19937 rng(50);
  test::ProblemSpec spec{512, 512, 512, DType::kFp32};
  v1::GemmRequest request;
  *request.add_problems() = test::MakeProblem(spec, &rng);
  const absl::Time start = absl::Now();
  auto response = client->Gemm(request);
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted) << response.status();
  EXPECT_THAT(response.status().message(), HasSubstr("keep_results"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_TRUE(NothingResident()) << Metric("gemm_resident_bytes");
}

TEST_F(ChunkedTransferTest, KeptResultsAreHandlesThatCanBeDownloadedAndReleased) {
  std::unique_ptr<Client> client = MakeClient(0, 4096, 2);
  const v1::GemmRequest request = KeepResultRequest({64, 96, 32, DType::kBf16}, 7);
  auto response = client->Gemm(request);
  ASSERT_TRUE(response.ok()) << response.status();
  const v1::GemmResult& kept = response->results(0);
  ASSERT_FALSE(kept.handle().empty());
  EXPECT_TRUE(kept.data().empty());
  v1::GemmResult full;
  ASSERT_TRUE(DownloadKept(client.get(), kept, 64 * 96 * 2, &full).ok());
  EXPECT_TRUE(test::ResultMatches(request.problems(0), full));
  EXPECT_EQ(Metric("gemm_resident_bytes"), 64 * 96 * 2);
  ASSERT_TRUE(client->ReleaseMatrix(kept.handle()).ok());
  EXPECT_EQ(Metric("gemm_resident_bytes"), 0);
  // A download past the end or of a released handle fails cleanly.
  std::string sink(64 * 96 * 2 + 2, '\0');
  EXPECT_EQ(client->DownloadMatrix(kept.handle(), sink.data(), sink.size()).code(),
            absl::StatusCode::kNotFound);
}

// A caller that asks for keep_results gets handles even when the client
// sends the operands in chunks (it does not download them on its own).
TEST_F(ChunkedTransferTest, KeepResultsIsHonouredOnTheChunkedPath) {
  std::unique_ptr<Client> client = MakeClient(1, 4096, 2);
  const v1::GemmRequest request = KeepResultRequest({64, 64, 64, DType::kFp32}, 8);
  auto response = client->Gemm(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_FALSE(response->results(0).handle().empty());
  v1::GemmResult full;
  ASSERT_TRUE(DownloadKept(client.get(), response->results(0), 64 * 64 * 4, &full).ok());
  EXPECT_TRUE(test::ResultMatches(request.problems(0), full));
  EXPECT_TRUE(client->ReleaseMatrix(full.handle()).ok());
  EXPECT_TRUE(NothingResident());  // the uploads were released
}

TEST_F(ChunkedTransferTest, RegisterMatrixAboveTheThresholdUploadsInChunks) {
  std::unique_ptr<Client> client = MakeClient(1024, 1000, 3);
  std::mt19937 rng(3);
  std::vector<float> b(512 * 64);
  for (float& v : b) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  const double before = Metric("gemm_chunk_bytes_total", {"direction=\"upload\""});
  auto handle = client->RegisterMatrix(MatrixView(b.data(), 512, 64));
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(Metric("gemm_chunk_bytes_total", {"direction=\"upload\""}) - before, b.size() * 4);
  std::vector<float> back(b.size());
  ASSERT_TRUE(client->DownloadMatrix(handle->handle, back.data(), back.size() * 4).ok());
  EXPECT_EQ(back, b);
  EXPECT_TRUE(client->ReleaseMatrix(*handle).ok());
}

// The raw protocol, as any gRPC client could speak it.
class RawTransferTest : public ChunkedTransferTest {
 protected:
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
  }

  std::string Begin(uint64_t rows, uint64_t cols) {
    auto stub = v1::GemmService::NewStub(Channel());
    v1::BeginUploadRequest r;
    r.set_dtype(v1::DATA_TYPE_FP32);
    r.set_rows(rows);
    r.set_cols(cols);
    v1::RegisterMatrixResponse out;
    grpc::ClientContext ctx;
    grpc::Status st = stub->BeginUpload(&ctx, r, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.handle();
  }
  grpc::ByteBuffer Chunk(const std::string& handle, uint64_t offset, uint64_t size) {
    data_.emplace_back(size, 'x');
    return EncodeChunk(handle, offset, data_.back().data(), size);
  }

  // A raw Transfer.Upload stream: writes `chunks` then reads the outcome.
  grpc::Status RawUpload(const std::vector<grpc::ByteBuffer>& chunks) {
    grpc::GenericStub stub(Channel());
    grpc::ClientContext ctx;
    grpc::CompletionQueue cq;
    auto call = stub.PrepareCall(&ctx, "/gemm.v1.Transfer/Upload", &cq);
    void* tag;
    bool ok;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    for (const grpc::ByteBuffer& b : chunks) {
      call->Write(b, reinterpret_cast<void*>(2));
      cq.Next(&tag, &ok);
      if (!ok) break;
    }
    call->WritesDone(reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    grpc::ByteBuffer summary;
    call->Read(&summary, reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    cq.Next(&tag, &ok);
    return status;
  }

  std::deque<std::string> data_;
};

TEST_F(RawTransferTest, BadChunkStreamsAreRefusedNamingTheField) {
  const std::string h = Begin(4, 4);  // 64 bytes
  grpc::Status st = RawUpload({Chunk(h, 0, 16), Chunk(h, 32, 16)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("offset: chunk out of order"));

  st = RawUpload({Chunk(h, 8, 8)});  // overlaps bytes [0, 16) from the stream above
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("duplicate"));

  st = RawUpload({Chunk(h, 48, 17)});  // one byte past the end: the size disagrees
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("offset: bytes [48, 65)"));

  st = RawUpload({Chunk("0123456789abcdef0123456789abcdef", 0, 4)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);

  st = RawUpload({Chunk("", 0, 4)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("handle"));

  grpc::Slice junk(std::string("\x1a\x7f", 2));
  st = RawUpload({grpc::ByteBuffer(&junk, 1)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("chunk: not a gemm.v1.Chunk"));

  // A unary Gemm naming an unfinished matrix waits for it: here until its
  // deadline (pipelined_gemm_test covers the rest of waiting).
  std::unique_ptr<Client> client = MakeClient(0, 4096, 1);
  v1::GemmRequest request;
  v1::GemmProblem* p = request.add_problems();
  p->set_m(4);
  p->set_n(4);
  p->set_k(4);
  p->set_input_dtype(v1::DATA_TYPE_FP32);
  p->mutable_a()->set_handle(h);
  p->mutable_b()->set_data(std::string(64, '\0'));
  CallOptions once;
  once.retry = false;
  CallOptions short_once = once;
  short_once.timeout = absl::Milliseconds(500);  // well within the 1 s idle timeout
  GemmResult response;
  std::thread waiter([&] { response = client->Gemm(request, short_once); });
  // Seen waiting on /metrics while held.
  double seen = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (seen == 0 && absl::Now() < give_up) {
    seen = Metric("gemm_waiting_requests");
    absl::SleepFor(absl::Milliseconds(5));
  }
  waiter.join();
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded) << response.status();
  // The server ends the wait at the same deadline, a moment after the client.
  const absl::Time settle = absl::Now() + absl::Seconds(5);
  while (Metric("gemm_waiting_requests") != 0 && absl::Now() < settle)
    absl::SleepFor(absl::Milliseconds(1));
  EXPECT_EQ(Metric("gemm_waiting_requests"), 0);

  // The rest of the bytes, out of order across streams, completes it.
  EXPECT_TRUE(RawUpload({Chunk(h, 48, 16), Chunk(h, 16, 8)}).ok() == false);  // gap in stream
  EXPECT_TRUE(RawUpload({Chunk(h, 16, 8), Chunk(h, 24, 8)}).ok());
  EXPECT_TRUE(RawUpload({Chunk(h, 32, 16)}).ok());
  response = client->Gemm(request, once);
  EXPECT_TRUE(response.ok()) << response.status();
}

TEST_F(RawTransferTest, AnUploadThatStopsMidwayIsFreedAfterTheIdleTimeout) {
  const double base = Metric("gemm_resident_bytes");
  const std::string h = Begin(256, 256);  // 256 KiB reserved
  EXPECT_EQ(Metric("gemm_resident_bytes") - base, 256 * 256 * 4);
  EXPECT_TRUE(RawUpload({Chunk(h, 0, 1000)}).ok());  // then the client goes away
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (Metric("gemm_resident_bytes") != base && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(Metric("gemm_resident_bytes"), base);
  grpc::Status st = RawUpload({Chunk(h, 1000, 8)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RawTransferTest, UnknownMethodsAreUnimplemented) {
  grpc::GenericStub stub(Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/gemm.v1.Transfer/Nope", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(RawTransferTest, DownloadRequestsAreChecked) {
  std::unique_ptr<Client> client = MakeClient(0, 4096, 1);
  const std::string h = Begin(2, 2);
  std::string sink(16, '\0');
  // Unfinished: not downloadable.
  EXPECT_EQ(client->DownloadMatrix(h, sink.data(), 16).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(RawUpload({Chunk(h, 0, 16)}).ok());
  EXPECT_TRUE(client->DownloadMatrix(h, sink.data(), 16).ok());
  EXPECT_EQ(sink, std::string(16, 'x'));
  std::string big(17, '\0');
  absl::Status past = client->DownloadMatrix(h, big.data(), 17);
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(past.message()), HasSubstr("length"));
}

}  // namespace
}  // namespace gemm
