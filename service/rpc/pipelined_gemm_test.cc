// Unit tests of pipelined requests (docs/api.md, "Pipelined requests"): a
// Gemm (unary or on GemmStream) that names uploads still receiving bytes is
// held until they
// complete (UploadWait), fails cleanly when one never will, and operands
// marked release_after_use go when a taken request ends. Served in-process
// with a fake executor (testing/service_harness.h); the test dispatches the
// queue itself, so nothing runs before it says.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/chunk_wire.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/testing/fake_executor.h"
#include "service/testing/rpc_helpers.h"
#include "service/testing/service_harness.h"

namespace gemm {
namespace {

using fake::AsyncGemm;
using fake::Eventually;
using fake::ServiceHarness;
using ::testing::HasSubstr;

constexpr uint64_t kBytes = 4 * 4 * sizeof(float);  // every operand: 4 x 4 fp32

// A Transfer.Upload stream the test writes chunks into and then closes
// cleanly (Close) or breaks off (Cancel).
class UploadStream {
 public:
  explicit UploadStream(const std::shared_ptr<grpc::Channel>& channel) : stub_(channel) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    call_ = stub_.PrepareCall(&context_, TransferService::kUploadMethod, &cq_);
    call_->StartCall(nullptr);
    Next();
  }
  ~UploadStream() {
    if (!closed_) Cancel();
  }

  // Writes bytes [offset, offset + data.size()) of `handle`; false once the
  // server has ended the stream.
  bool Write(const std::string& handle, uint64_t offset, const std::string& data) {
    call_->Write(EncodeChunk(handle, offset, data.data(), data.size()), nullptr);
    return Next();
  }
  grpc::Status Close() {
    closed_ = true;
    call_->WritesDone(nullptr);
    Next();
    grpc::ByteBuffer summary;
    call_->Read(&summary, nullptr);
    Next();
    grpc::Status status;
    call_->Finish(&status, nullptr);
    Next();
    return status;
  }
  // The client going away mid-upload.
  void Cancel() {
    closed_ = true;
    context_.TryCancel();
    grpc::Status status;
    call_->Finish(&status, nullptr);
    Next();
  }

 private:
  bool Next() {
    void* tag;
    bool ok = false;
    cq_.Next(&tag, &ok);
    return ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool closed_ = false;
};

class PipelinedGemmTest : public ::testing::Test {
 protected:
  PipelinedGemmTest() : PipelinedGemmTest(fake::SmallLimits()) {}
  explicit PipelinedGemmTest(const ServiceLimits& limits)
      : h_(std::make_unique<ServiceHarness>(limits)) {}

  void SetUp() override {
    ASSERT_TRUE(h_->started());
    channel_ = h_->NewChannel();
    stub_ = v1::GemmService::NewStub(channel_);
  }

  // BeginUpload of a 4 x 4 fp32 matrix (transient).
  std::string Begin() {
    v1::BeginUploadRequest r;
    r.set_dtype(v1::DATA_TYPE_FP32);
    r.set_rows(4);
    r.set_cols(4);
    r.set_transient(true);
    v1::RegisterMatrixResponse out;
    auto ctx = ServiceHarness::Context();
    grpc::Status st = stub_->BeginUpload(ctx.get(), r, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.handle();
  }

  // RegisterMatrix of a whole 4 x 4 fp32 matrix.
  std::string Register() {
    v1::RegisterMatrixRequest r;
    r.set_dtype(v1::DATA_TYPE_FP32);
    r.set_rows(4);
    r.set_cols(4);
    r.set_data(std::string(kBytes, '\0'));
    v1::RegisterMatrixResponse out;
    auto ctx = ServiceHarness::Context();
    grpc::Status st = stub_->RegisterMatrix(ctx.get(), r, &out);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return out.handle();
  }

  grpc::Status Release(const std::string& handle) {
    v1::ReleaseMatrixRequest r;
    r.set_handle(handle);
    v1::ReleaseMatrixResponse out;
    auto ctx = ServiceHarness::Context();
    return stub_->ReleaseMatrix(ctx.get(), r, &out);
  }

  // A 4 x 4 x 4 problem with A and B the resident matrices `a` and `b`.
  static v1::GemmRequest Request(const std::string& a, const std::string& b,
                                 bool release_after_use = false) {
    v1::GemmRequest request;
    v1::GemmProblem* p = request.add_problems();
    p->set_m(4);
    p->set_n(4);
    p->set_k(4);
    p->set_input_dtype(v1::DATA_TYPE_FP32);
    p->mutable_a()->set_handle(a);
    p->mutable_b()->set_handle(b);
    p->mutable_a()->set_release_after_use(release_after_use);
    p->mutable_b()->set_release_after_use(release_after_use);
    return request;
  }

  // Sends `request` without waiting for its answer.
  std::unique_ptr<AsyncGemm> Send(const v1::GemmRequest& request,
                                  absl::Duration timeout = absl::Seconds(30)) {
    auto call = std::make_unique<AsyncGemm>();
    call->Start(stub_.get(), request, timeout);
    return call;
  }

  static std::string Bytes(size_t n) { return std::string(n, '\x01'); }

  int waiting() const { return h_->service_->waiting_requests(); }
  // One request waits on `uploads` unfinished uploads, and the store holds
  // its waiters. A request counts as waiting just before its waiter is
  // registered; an upload that ends in between is found gone (or complete)
  // by admission instead, so a test that ends the upload waits for this.
  bool OneHeld(size_t uploads = 1) const {
    return waiting() == 1 && h_->residents_->upload_waiters() == uploads;
  }

  std::unique_ptr<ServiceHarness> h_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

TEST_F(PipelinedGemmTest, GemmSentBeforeItsUploadsCompleteWaitsThenRuns) {
  const std::string a = Begin();
  const std::string b = Begin();
  UploadStream stream(channel_);
  ASSERT_TRUE(stream.Write(a, 0, Bytes(kBytes)));
  ASSERT_TRUE(stream.Write(b, 0, Bytes(kBytes / 2)));
  const v1::GemmRequest request = Request(a, b);
  auto call = Send(request);
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  EXPECT_EQ(h_->queue_->queued(), 0u);  // held before the queue, not in it
  ASSERT_TRUE(stream.Write(b, kBytes / 2, Bytes(kBytes / 2)));
  ASSERT_TRUE(stream.Close().ok());
  EXPECT_EQ(h_->Dispatch(1), 1u);
  call->done.WaitForNotification();
  ASSERT_TRUE(call->status.ok()) << call->status.error_message();
  ASSERT_EQ(call->response.results_size(), 1);
  const std::string& d = call->response.results(0).data();
  ASSERT_EQ(d.size(), kBytes);
  // The fake executor's result: a function of the problem (fake_executor.h).
  const float* values = reinterpret_cast<const float*>(d.data());
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(values[i], static_cast<float>(i + 4)) << i;
  EXPECT_EQ(waiting(), 0);
  // Without release_after_use the operands stay: the older flow, unchanged.
  EXPECT_EQ(h_->residents_->count(), 2u);
}

TEST_F(PipelinedGemmTest, AClientThatGoesAwayMidUploadFailsTheWaitingGemmAndLeavesNothing) {
  const std::string a = Begin();
  const std::string b = Register();
  auto stream = std::make_unique<UploadStream>(channel_);
  ASSERT_TRUE(stream->Write(a, 0, Bytes(kBytes / 2)));
  auto call = Send(Request(a, b, /*release_after_use=*/true));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  stream->Cancel();
  call->done.WaitForNotification();
  EXPECT_EQ(call->status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(call->status.error_message(), HasSubstr("problems[0].a.handle: the upload of"));
  EXPECT_THAT(call->status.error_message(), HasSubstr("was abandoned after 32 of 64 bytes"));
  EXPECT_EQ(waiting(), 0);
  // The abandoned upload went with its stream, the registered B with the
  // request (release_after_use); nothing was queued.
  EXPECT_EQ(h_->residents_->count(), 0u);
  EXPECT_EQ(h_->residents_->bytes(), 0u);
  EXPECT_EQ(h_->queue_->queued(), 0u);
}

TEST_F(PipelinedGemmTest, ADeadlineThatPassesWhileWaitingEndsTheRequestAndItsHold) {
  const std::string a = Begin();
  const std::string b = Register();
  auto call = Send(Request(a, b, /*release_after_use=*/true), absl::Milliseconds(300));
  call->done.WaitForNotification();
  EXPECT_EQ(call->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server's side ends too: no request held, its operands released.
  EXPECT_TRUE(Eventually([&] { return waiting() == 0 && h_->residents_->count() == 0; }))
      << waiting() << " waiting, " << h_->residents_->count() << " held";
  EXPECT_EQ(h_->queue_->queued(), 0u);
}

TEST_F(PipelinedGemmTest, CancellingAWaitingRequestEndsItsHold) {
  const std::string a = Begin();
  const std::string b = Begin();
  auto call = Send(Request(a, b));
  ASSERT_TRUE(Eventually([&] { return OneHeld(/*uploads=*/2); }));
  call->ctx.TryCancel();
  call->done.WaitForNotification();
  EXPECT_EQ(call->status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return waiting() == 0; }));
  // Not taken with release_after_use: the uploads stay, and still complete.
  EXPECT_EQ(h_->residents_->count(), 2u);
  UploadStream stream(channel_);
  ASSERT_TRUE(stream.Write(a, 0, Bytes(kBytes)));
  ASSERT_TRUE(stream.Close().ok());
  EXPECT_TRUE(h_->residents_->Lookup("", a).ok());
}

TEST_F(PipelinedGemmTest, AnUploadReleasedOrExpiredWhileWaitedOnFailsTheRequest) {
  const std::string a = Begin();
  const std::string b = Register();
  auto released = Send(Request(a, b));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  ASSERT_TRUE(Release(a).ok());
  released->done.WaitForNotification();
  EXPECT_EQ(released->status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(released->status.error_message(),
              HasSubstr("problems[0].a.handle: the upload of"));
  EXPECT_THAT(released->status.error_message(), HasSubstr("released before all its bytes"));

  const std::string c = Begin();
  auto expired = Send(Request(b, c));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  h_->clock_.Advance(absl::Minutes(2));
  h_->residents_->ExpireIdle();
  expired->done.WaitForNotification();
  EXPECT_EQ(expired->status.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(expired->status.error_message(), HasSubstr("problems[0].b.handle: the upload of"));
  EXPECT_THAT(expired->status.error_message(), HasSubstr("idle timeout"));
  EXPECT_EQ(waiting(), 0);
}

class WaitingLimitTest : public PipelinedGemmTest {
 protected:
  static ServiceLimits OneWaiting() {
    ServiceLimits l = fake::SmallLimits();
    l.max_waiting_requests = 1;
    return l;
  }
  WaitingLimitTest() : PipelinedGemmTest(OneWaiting()) {}
};

TEST_F(WaitingLimitTest, RequestsPastMaxWaitingRequestsAreRefusedAtOnce) {
  const std::string a = Begin();
  const std::string b = Register();
  auto first = Send(Request(a, b));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  // release_after_use: a refusal at the door takes nothing, so a retry finds
  // its operands.
  auto second = Send(Request(a, b, /*release_after_use=*/true));
  second->done.WaitForNotification();
  EXPECT_EQ(second->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(second->status.error_message(), HasSubstr("max_waiting_requests"));
  EXPECT_EQ(h_->residents_->count(), 2u);
  // A request on complete matrices does not wait, so the limit is no bar.
  const std::string c = Register();
  auto third = Send(Request(b, c));
  EXPECT_EQ(h_->Dispatch(1), 1u);
  third->done.WaitForNotification();
  EXPECT_TRUE(third->status.ok()) << third->status.error_message();
  // The first still runs once its upload completes.
  UploadStream stream(channel_);
  ASSERT_TRUE(stream.Write(a, 0, Bytes(kBytes)));
  ASSERT_TRUE(stream.Close().ok());
  EXPECT_EQ(h_->Dispatch(1), 1u);
  first->done.WaitForNotification();
  EXPECT_TRUE(first->status.ok()) << first->status.error_message();
}

TEST_F(PipelinedGemmTest, ReleaseAfterUseReleasesOperandsWhenTheRequestEnds) {
  // Success: gone by the time the answer arrives.
  std::string a = Register(), b = Register();
  auto ok = Send(Request(a, b, /*release_after_use=*/true));
  EXPECT_EQ(h_->Dispatch(1), 1u);
  ok->done.WaitForNotification();
  ASSERT_TRUE(ok->status.ok()) << ok->status.error_message();
  EXPECT_EQ(Release(a).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Release(b).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(h_->residents_->count(), 0u);

  // Failure after admission: released too.
  a = Register();
  b = Register();
  h_->executor_.FailWith(absl::InternalError("the device fell over"));
  auto failed = Send(Request(a, b, /*release_after_use=*/true));
  EXPECT_EQ(h_->Dispatch(1), 1u);
  failed->done.WaitForNotification();
  EXPECT_EQ(failed->status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(h_->residents_->count(), 0u);
  h_->executor_.FailWith(absl::OkStatus());

  // Only the marked operand goes: a shared B stays.
  a = Register();
  b = Register();
  v1::GemmRequest one = Request(a, b);
  one.mutable_problems(0)->mutable_a()->set_release_after_use(true);
  auto shared = Send(one);
  EXPECT_EQ(h_->Dispatch(1), 1u);
  shared->done.WaitForNotification();
  ASSERT_TRUE(shared->status.ok());
  EXPECT_EQ(Release(a).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Release(b).ok());
}

TEST_F(PipelinedGemmTest, ReleaseAfterUseNeedsAHandle) {
  const std::string b = Register();
  v1::GemmRequest request = Request("", b);
  request.mutable_problems(0)->mutable_a()->set_data(std::string(kBytes, '\0'));
  request.mutable_problems(0)->mutable_a()->set_release_after_use(true);
  auto call = Send(request);
  call->done.WaitForNotification();
  EXPECT_EQ(call->status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(call->status.error_message(),
              HasSubstr("problems[0].a.release_after_use: only a matrix given by handle"));
  EXPECT_EQ(h_->residents_->count(), 1u);
}

// A GemmStream request naming an unfinished upload is held as a unary one
// is, while the stream goes on: a later request on the same stream is
// answered first, the held one once its upload completes, and one whose
// upload is abandoned is answered ABORTED on the stream, which stays open.
TEST_F(PipelinedGemmTest, GemmStreamRequestsWaitWhileTheStreamGoesOn) {
  const std::string a = Begin();
  const std::string b = Register();
  UploadStream upload(channel_);
  ASSERT_TRUE(upload.Write(a, 0, Bytes(kBytes / 2)));
  auto ctx = ServiceHarness::Context();
  auto stream = stub_->GemmStream(ctx.get());
  v1::GemmRequest held = Request(a, b, /*release_after_use=*/true);
  held.set_request_id("held");
  ASSERT_TRUE(stream->Write(held));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  EXPECT_EQ(h_->queue_->queued(), 0u);

  // A later request with complete operands runs and is answered first.
  v1::GemmRequest ready = Request(Register(), Register());
  ready.set_request_id("ready");
  ASSERT_TRUE(stream->Write(ready));
  ASSERT_TRUE(Eventually([&] { return h_->queue_->queued() == 1; }));
  EXPECT_EQ(h_->Dispatch(1), 1u);
  v1::GemmResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "ready");
  EXPECT_EQ(response.status_code(), 0) << response.status_message();

  // The held one runs once its upload completes.
  ASSERT_TRUE(upload.Write(a, kBytes / 2, Bytes(kBytes / 2)));
  ASSERT_TRUE(Eventually([&] { return h_->queue_->queued() == 1; }));
  EXPECT_EQ(waiting(), 0);
  EXPECT_EQ(h_->Dispatch(1), 1u);
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "held");
  EXPECT_EQ(response.status_code(), 0) << response.status_message();
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).data().size(), kBytes);
  ASSERT_TRUE(upload.Close().ok());

  // An abandoned upload fails its held request on the stream, not the stream.
  const std::string c = Begin();
  auto breaking = std::make_unique<UploadStream>(channel_);
  ASSERT_TRUE(breaking->Write(c, 0, Bytes(8)));
  v1::GemmRequest doomed = Request(c, Register(), /*release_after_use=*/true);
  doomed.set_request_id("doomed");
  ASSERT_TRUE(stream->Write(doomed));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  breaking->Cancel();
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "doomed");
  EXPECT_EQ(response.status_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(response.status_message(), HasSubstr("problems[0].a.handle: the upload of"));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(waiting(), 0);
  // The held requests' operands went with them (release_after_use), the
  // abandoned upload with its stream; the ready request's two stay.
  EXPECT_TRUE(Eventually([&] { return h_->residents_->count() == 2; }))
      << h_->residents_->count();
  EXPECT_EQ(h_->queue_->queued(), 0u);
}

// Cancelling a stream ends the waits of its held requests.
TEST_F(PipelinedGemmTest, CancellingAStreamEndsItsHeldRequests) {
  const std::string a = Begin();
  const std::string b = Register();
  auto ctx = ServiceHarness::Context();
  auto stream = stub_->GemmStream(ctx.get());
  v1::GemmRequest held = Request(a, b, /*release_after_use=*/true);
  held.set_request_id("held");
  ASSERT_TRUE(stream->Write(held));
  ASSERT_TRUE(Eventually([&] { return OneHeld(); }));
  ctx->TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return waiting() == 0; }));
  // A and B went with the request (release_after_use: the unfinished
  // upload too), as for a unary request.
  EXPECT_TRUE(Eventually([&] { return h_->residents_->count() == 0; }))
      << h_->residents_->count();
  EXPECT_EQ(h_->queue_->queued(), 0u);
}

}  // namespace
}  // namespace gemm
