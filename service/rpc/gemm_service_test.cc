// Unit tests of the gRPC GemmService (gemm_service.h) in-process on
// loopback with a fake executor and no batcher: the test moves admitted work
// from the queue to the executor itself (testing/service_harness.h), so what
// is queued, running or answered at each step is decided here, and times
// come from a fake clock.
#include "service/rpc/gemm_service.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "service/rpc/transfer_service.h"
#include "service/testing/fake_executor.h"
#include "service/testing/rpc_helpers.h"
#include "service/testing/service_harness.h"
#include "service/version.h"

namespace gemm {
namespace {

using fake::AsyncGemm;
using fake::Eventually;
using fake::FakeExecutor;
using fake::ServiceHarness;
using fake::ZeroProblem;
using ::testing::HasSubstr;

// Checks `r` holds what FakeExecutor writes for an fp32 m x n result of `k`.
void ExpectFakeResult(const v1::GemmResult& r, uint64_t m, uint64_t n, uint64_t k, double alpha) {
  EXPECT_EQ(r.rows(), m);
  EXPECT_EQ(r.cols(), n);
  EXPECT_EQ(r.dtype(), v1::DATA_TYPE_FP32);
  ASSERT_EQ(r.data().size(), m * n * 4);
  GemmProblemRef ref;
  ref.shape.m = m;
  ref.shape.n = n;
  ref.shape.k = k;
  ref.alpha = alpha;
  for (uint64_t i = 0; i < m * n; ++i) {
    float v;
    std::memcpy(&v, r.data().data() + 4 * i, 4);
    ASSERT_EQ(v, FakeExecutor::ExpectedElement(ref, i)) << "element " << i;
  }
}

class GemmServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(h_.started());
    stub_ = v1::GemmService::NewStub(h_.NewChannel());
  }

  // A blocking Gemm with a 30 s deadline.
  grpc::Status Call(const v1::GemmRequest& request, v1::GemmResponse* response,
                    grpc::ClientContext* ctx = nullptr) {
    std::unique_ptr<grpc::ClientContext> own;
    if (ctx == nullptr) {
      own = ServiceHarness::Context();
      ctx = own.get();
    }
    return stub_->Gemm(ctx, request, response);
  }

  ServiceHarness h_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

TEST_F(GemmServiceTest, GemmAnswersWithTheExecutorsResultsAndTiming) {
  AsyncGemm call;
  call.request.set_request_id("r1");
  *call.request.add_problems() = ZeroProblem(2, 3, 4, /*alpha=*/2.0);
  *call.request.add_problems() = ZeroProblem(1, 1, 5);
  call.Start(stub_.get());
  ASSERT_TRUE(Eventually([&] { return h_.queue_->queued() == 1; }));
  h_.clock_.Advance(absl::Milliseconds(7));  // the time it waits in the queue
  EXPECT_EQ(h_.Dispatch(1), 1u);
  ASSERT_TRUE(call.Wait().ok()) << call.status.error_message();
  const v1::GemmResponse& r = call.response;
  EXPECT_EQ(r.request_id(), "r1");
  ASSERT_EQ(r.results_size(), 2);
  ExpectFakeResult(r.results(0), 2, 3, 4, 2.0);
  ExpectFakeResult(r.results(1), 1, 1, 5, 1.0);
  EXPECT_TRUE(r.results(0).handle().empty());
  EXPECT_EQ(r.backend(), FakeExecutor::kBackend);
  EXPECT_EQ(r.kernel(), FakeExecutor::kKernel);
  EXPECT_EQ(r.timing().queue_ns(), 7'000'000u);
  EXPECT_EQ(r.timing().total_ns(), 7'000'000u);
  EXPECT_EQ(h_.queue_->inflight_bytes(), 0u);
}

TEST_F(GemmServiceTest, InvalidRequestsAreInvalidArgumentNamingTheField) {
  struct Case {
    const char* what;
    v1::GemmRequest request;
    const char* field;
  };
  std::vector<Case> cases;
  {
    Case c{"no problems", {}, "problems"};
    cases.push_back(c);
  }
  {
    Case c{"m of 0", {}, "problems[0].m"};
    *c.request.add_problems() = ZeroProblem(0, 2, 2);
    cases.push_back(c);
  }
  {
    Case c{"k over max_dimension", {}, "problems[1].k"};
    *c.request.add_problems() = ZeroProblem(1, 1, 1);
    *c.request.add_problems() = ZeroProblem(1, 1, h_.limits_.max_dimension + 1);
    cases.push_back(c);
  }
  {
    Case c{"a short of bytes", {}, "problems[0].a"};
    v1::GemmProblem p = ZeroProblem(2, 2, 2);
    p.mutable_a()->mutable_data()->resize(3);
    *c.request.add_problems() = p;
    cases.push_back(c);
  }
  {
    Case c{"no input dtype", {}, "problems[0].input_dtype"};
    v1::GemmProblem p = ZeroProblem(2, 2, 2);
    p.clear_input_dtype();
    *c.request.add_problems() = p;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    v1::GemmResponse response;
    auto ctx = ServiceHarness::Context();
    const grpc::Status st = Call(c.request, &response, ctx.get());
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_THAT(st.error_message(), HasSubstr(c.field)) << c.what;
    // Refused before admission: no pushback, nothing queued.
    EXPECT_EQ(ctx->GetServerTrailingMetadata().count("grpc-retry-pushback-ms"), 0u) << c.what;
  }
  EXPECT_EQ(h_.queue_->queued(), 0u);
}

TEST_F(GemmServiceTest, AFullQueueIsResourceExhaustedWithARetryPushback) {
  // Fill the queue (max_queued_requests = 2) with work of the test's own.
  for (int i = 0; i < 2; ++i) {
    auto item = std::make_shared<WorkItem>();
    item->done = [](const absl::Status&, const ExecutionReport&) {};
    ASSERT_TRUE(h_.queue_->Push(item).ok());
  }
  v1::GemmRequest request;
  *request.add_problems() = ZeroProblem(2, 2, 2);
  v1::GemmResponse response;
  auto ctx = ServiceHarness::Context();
  const grpc::Status st = Call(request, &response, ctx.get());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("queue is full"));
  const auto& trailers = ctx->GetServerTrailingMetadata();
  auto it = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(it, trailers.end());
  // RetryHint on a fake clock that has not moved: its 1 ms floor.
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), "1");
  EXPECT_EQ(h_.queue_->queued(), 2u);
}

// A size limit fails the same way every time: RESOURCE_EXHAUSTED naming the
// operand, with a negative pushback (do not retry).
TEST(GemmServiceLimitsTest, AnOperandOverMaxMatrixBytesIsRefusedWithoutRetry) {
  ServiceLimits tight = fake::SmallLimits();
  tight.max_matrix_bytes = 63;  // a 4 x 4 fp32 operand is 64 bytes
  ServiceHarness h(tight);
  ASSERT_TRUE(h.started());
  auto stub = v1::GemmService::NewStub(h.NewChannel());
  v1::GemmRequest request;
  *request.add_problems() = ZeroProblem(4, 4, 4);
  v1::GemmResponse response;
  auto ctx = ServiceHarness::Context();
  const grpc::Status st = stub->Gemm(ctx.get(), request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(st.error_message(), HasSubstr("problems[0].a.data: 4 x 4 fp32 is 64 bytes, over the limit of 63"));
  const auto& trailers = ctx->GetServerTrailingMetadata();
  auto it = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(it, trailers.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), "-1");
  EXPECT_EQ(h.queue_->queued(), 0u);
}

TEST_F(GemmServiceTest, AnExecutorFailureIsTheCallsStatus) {
  for (const absl::Status& failure :
       {absl::InternalError("device lost"), absl::ResourceExhaustedError("out of device memory"),
        absl::UnavailableError("device reset")}) {
    h_.executor_.FailWith(failure);
    AsyncGemm call;
    *call.request.add_problems() = ZeroProblem(2, 2, 2);
    call.Start(stub_.get());
    EXPECT_EQ(h_.Dispatch(1), 1u);
    call.Wait();
    EXPECT_EQ(static_cast<int>(call.status.error_code()), static_cast<int>(failure.code()))
        << failure;
    EXPECT_EQ(call.status.error_message(), failure.message());
    EXPECT_EQ(call.response.results_size(), 0) << "no results on failure";
  }
  EXPECT_EQ(h_.queue_->inflight_bytes(), 0u);
}

TEST_F(GemmServiceTest, GemmStreamTagsEachAnswerAndABadRequestDoesNotEndTheStream) {
  auto ctx = ServiceHarness::Context();
  auto stream = stub_->GemmStream(ctx.get());
  std::vector<v1::GemmRequest> requests(4);
  requests[0].set_request_id("good-1");
  *requests[0].add_problems() = ZeroProblem(2, 3, 4);
  requests[1].set_request_id("bad-m");
  *requests[1].add_problems() = ZeroProblem(0, 3, 4);
  // requests[2]: no request_id, which a stream requires.
  *requests[2].add_problems() = ZeroProblem(1, 1, 1);
  requests[3].set_request_id("good-2");
  *requests[3].add_problems() = ZeroProblem(3, 1, 2, 0.5);
  for (const auto& r : requests) ASSERT_TRUE(stream->Write(r));
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_EQ(h_.Dispatch(2), 2u);  // the two good ones, and only they, reach the queue
  std::map<std::string, v1::GemmResponse> answers;
  v1::GemmResponse response;
  while (stream->Read(&response)) answers[response.request_id()] = response;
  const grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_EQ(answers["good-1"].status_code(), 0);
  ASSERT_EQ(answers["good-1"].results_size(), 1);
  ExpectFakeResult(answers["good-1"].results(0), 2, 3, 4, 1.0);
  EXPECT_EQ(answers["good-2"].status_code(), 0);
  ASSERT_EQ(answers["good-2"].results_size(), 1);
  ExpectFakeResult(answers["good-2"].results(0), 3, 1, 2, 0.5);
  EXPECT_EQ(answers["bad-m"].status_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(answers["bad-m"].status_message(), HasSubstr("problems[0].m"));
  EXPECT_EQ(answers[""].status_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(answers[""].status_message(), HasSubstr("request_id"));
  EXPECT_EQ(h_.executor_.items_run(), 2);
}

TEST_F(GemmServiceTest, GemmStreamRefusesASecondRequestWithAnIdInFlight) {
  auto ctx = ServiceHarness::Context();
  auto stream = stub_->GemmStream(ctx.get());
  v1::GemmRequest first;
  first.set_request_id("same");
  *first.add_problems() = ZeroProblem(2, 3, 4);
  v1::GemmRequest second = first;
  second.mutable_problems(0)->set_alpha(2.0);
  ASSERT_TRUE(stream->Write(first));
  ASSERT_TRUE(stream->Write(second));
  // The duplicate is answered at once, before the first has run.
  v1::GemmResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "same");
  EXPECT_EQ(response.status_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(response.status_message(), HasSubstr("request_id"));
  EXPECT_THAT(response.status_message(), HasSubstr("already in flight"));
  EXPECT_EQ(h_.Dispatch(1), 1u);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "same");
  EXPECT_EQ(response.status_code(), 0) << response.status_message();
  ASSERT_EQ(response.results_size(), 1);
  ExpectFakeResult(response.results(0), 2, 3, 4, 1.0);
  // Once answered, the id can be used again.
  ASSERT_TRUE(stream->Write(second));
  EXPECT_EQ(h_.Dispatch(1), 1u);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "same");
  EXPECT_EQ(response.status_code(), 0) << response.status_message();
  ASSERT_EQ(response.results_size(), 1);
  ExpectFakeResult(response.results(0), 2, 3, 4, 2.0);
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(h_.executor_.items_run(), 2);
}

grpc::ByteBuffer Bytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Bytes that do not parse as any message: field 1 claims 127 bytes that
// are not there.
const std::string kUnparsable("\x0a\x7f", 2);

TEST_F(GemmServiceTest, AGemmMessageThatDoesNotParseIsInvalidArgument) {
  grpc::GenericStub generic(h_.NewChannel());
  auto ctx = ServiceHarness::Context();
  grpc::ByteBuffer request = Bytes(kUnparsable), response;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(ctx.get(), "/gemm.v1.GemmService/Gemm", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status st) {
                      status = std::move(st);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("did not parse as a gemm.v1.GemmRequest"));
  EXPECT_EQ(h_.queue_->queued(), 0u);
}

// A stream message that does not parse ends the stream INVALID_ARGUMENT,
// after the request admitted before it is answered.
TEST_F(GemmServiceTest, AGemmStreamMessageThatDoesNotParseEndsTheStreamAfterItsAnswers) {
  grpc::GenericStub generic(h_.NewChannel());
  auto ctx = ServiceHarness::Context();
  grpc::CompletionQueue cq;
  auto next = [&cq] {
    void* tag;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      generic.PrepareCall(ctx.get(), "/gemm.v1.GemmService/GemmStream", &cq);
  call->StartCall(nullptr);
  ASSERT_TRUE(next());
  v1::GemmRequest good;
  good.set_request_id("before");
  *good.add_problems() = ZeroProblem(2, 3, 4);
  call->Write(Bytes(good.SerializeAsString()), nullptr);
  ASSERT_TRUE(next());
  call->Write(Bytes(kUnparsable), nullptr);
  ASSERT_TRUE(next());
  ASSERT_TRUE(Eventually([&] { return h_.queue_->queued() == 1; }));
  EXPECT_EQ(h_.Dispatch(1), 1u);
  grpc::ByteBuffer in;
  call->Read(&in, nullptr);
  ASSERT_TRUE(next());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  v1::GemmResponse answer;
  ASSERT_TRUE(answer.ParseFromString(bytes));
  EXPECT_EQ(answer.request_id(), "before");
  EXPECT_EQ(answer.status_code(), 0) << answer.status_message();
  ExpectFakeResult(answer.results(0), 2, 3, 4, 1.0);
  call->Read(&in, nullptr);
  EXPECT_FALSE(next());  // nothing more: the stream ends
  grpc::Status status;
  call->Finish(&status, nullptr);
  ASSERT_TRUE(next());
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("did not parse"));
  EXPECT_EQ(h_.executor_.items_run(), 1);
}

TEST_F(GemmServiceTest, ACancelledCallLeavesNothingQueued) {
  AsyncGemm call;
  *call.request.add_problems() = ZeroProblem(8, 8, 8);
  call.Start(stub_.get());
  ASSERT_TRUE(Eventually([&] { return h_.queue_->queued() == 1; }));
  EXPECT_GT(h_.queue_->inflight_bytes(), 0u);
  call.ctx.TryCancel();
  EXPECT_EQ(call.Wait().error_code(), grpc::StatusCode::CANCELLED);
  // The server hears of it on its own time: its OnCancel takes the item out.
  ASSERT_TRUE(Eventually([&] {
    return h_.queue_->queued() == 0 && h_.queue_->inflight_bytes() == 0;
  }));
  EXPECT_EQ(h_.executor_.items_run(), 0);
  // The service still serves.
  AsyncGemm next;
  *next.request.add_problems() = ZeroProblem(1, 1, 1);
  next.Start(stub_.get());
  EXPECT_EQ(h_.Dispatch(1), 1u);
  EXPECT_TRUE(next.Wait().ok());
  EXPECT_EQ(h_.executor_.items_run(), 1);
}

TEST_F(GemmServiceTest, GetServerInfoReportsTheLimitsAndTheBackend) {
  v1::ServerInfo info;
  auto ctx = ServiceHarness::Context();
  ASSERT_TRUE(stub_->GetServerInfo(ctx.get(), v1::GetServerInfoRequest(), &info).ok());
  const ServiceLimits& l = h_.limits_;
  EXPECT_EQ(info.version(), kVersion);
  EXPECT_EQ(info.backend(), FakeExecutor::kBackend);
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).name(), "fake-device");
  EXPECT_EQ(info.devices(0).threads(), 2u);
  EXPECT_EQ(info.devices(0).memory_bytes(), uint64_t{1} << 30);
  ASSERT_EQ(info.peak_rates_size(), 1);
  EXPECT_EQ(info.peak_rates(0).kind(), "fp32");
  EXPECT_EQ(info.peak_rates(0).per_second(), 1e12);
  ASSERT_EQ(info.kernels_size(), 1);
  EXPECT_EQ(info.kernels(0), FakeExecutor::kKernel);
  EXPECT_EQ(info.input_dtypes_size(), 3);
  EXPECT_EQ(info.limits().max_message_bytes(), l.max_message_bytes);
  EXPECT_EQ(info.limits().max_dimension(), l.max_dimension);
  EXPECT_EQ(info.limits().max_problem_bytes(), l.max_matrix_bytes);
  EXPECT_EQ(info.limits().max_problems_per_request(), l.max_problems_per_request);
  EXPECT_EQ(info.limits().max_queued_requests(), l.max_queued_requests);
  EXPECT_EQ(info.limits().max_queued_bytes(), l.max_inflight_bytes);
  EXPECT_EQ(info.limits().max_resident_bytes(), l.max_resident_bytes);
  EXPECT_EQ(info.limits().max_chunk_bytes(), MaxChunkBytes(l));
}

}  // namespace
}  // namespace gemm
