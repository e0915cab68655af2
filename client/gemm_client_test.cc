// gemm::Client against a test-only fake GemmService on 127.0.0.1:0: retries,
// pushback, deadlines, and the unary, async and stream paths.
#include "client/gemm_client.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include "absl/synchronization/notification.h"
#include "client/gemm_client_internal.h"
#include "client/matrix_view.h"
#include "common/reference_gemm.h"

namespace gemm {
namespace {

// A stopping replica's bare CANCELLED fails over, also with the operand or
// transfer named in front of it; other cancellations and codes do not.
TEST(FailsOverTest, UnavailableAndAStoppingReplicasCancelledFailOver) {
  using client_internal::FailsOver;
  EXPECT_TRUE(FailsOver(absl::UnavailableError("draining; retry on another replica")));
  EXPECT_TRUE(FailsOver(absl::CancelledError("CANCELLED")));
  EXPECT_TRUE(FailsOver(absl::CancelledError("problems[0].a: CANCELLED")));
  EXPECT_TRUE(FailsOver(absl::CancelledError("upload: CANCELLED")));
  EXPECT_FALSE(FailsOver(absl::CancelledError("client is shutting down")));
  EXPECT_FALSE(FailsOver(absl::InvalidArgumentError("CANCELLED")));
  EXPECT_FALSE(FailsOver(absl::OkStatus()));
}

// Answers with the float64 reference, after failing the first `reject` calls
// with `reject_code` (and the pushback value, if any), or every call with
// `fail_code`. A request whose id is "bad" fails with INVALID_ARGUMENT.
// The settings are atomics: tests change them while the server runs, and the
// order the loopback connection gives (set, then call) is invisible to
// ThreadSanitizer.
class FakeGemmService final : public v1::GemmService::CallbackService {
 public:
  std::atomic<int> reject{0};
  std::atomic<grpc::StatusCode> reject_code{grpc::StatusCode::RESOURCE_EXHAUSTED};
  std::atomic<const char*> pushback{""};  // a string literal; "" sends none
  std::atomic<grpc::StatusCode> fail_code{grpc::StatusCode::OK};
  std::atomic<int64_t> delay_ms{0};

  int calls() {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(call_times_.size());
  }
  std::vector<absl::Time> call_times() {
    absl::MutexLock lock(&mu_);
    return call_times_;
  }

  static v1::GemmResponse Compute(const v1::GemmRequest& request) {
    v1::GemmResponse response;
    response.set_request_id(request.request_id());
    response.set_backend("fake");
    response.set_kernel("reference");
    // Shows the test what the client sent in GemmRequest.deterministic.
    if (request.has_deterministic())
      response.mutable_reproducibility()->set_backend(request.deterministic() ? "det" : "not");
    if (request.request_id() == "bad") {
      response.set_status_code(grpc::StatusCode::INVALID_ARGUMENT);
      response.set_status_message("bad request");
      return response;
    }
    for (const v1::GemmProblem& p : request.problems()) {
      absl::StatusOr<GemmProblemRef> ref = ViewProblem(p);
      if (!ref.ok()) {
        response.set_status_code(grpc::StatusCode::INVALID_ARGUMENT);
        return response;
      }
      const std::vector<double> d = ReferenceGemm(*ref);
      std::vector<float> f(d.begin(), d.end());
      v1::GemmResult* r = response.add_results();
      r->set_dtype(ToProto(ref->shape.output_dtype));
      r->set_layout(v1::LAYOUT_ROW_MAJOR);
      r->set_rows(ref->shape.m);
      r->set_cols(ref->shape.n);
      std::string* bytes = r->mutable_data();
      bytes->resize(f.size() * SizeOf(ref->shape.output_dtype));
      FromFloat(ref->shape.output_dtype, f.data(), bytes->data(), f.size());
    }
    return response;
  }

  grpc::ServerUnaryReactor* Gemm(grpc::CallbackServerContext* ctx, const v1::GemmRequest* request,
                                 v1::GemmResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      call_times_.push_back(absl::Now());
    }
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (reject.fetch_sub(1) > 0) {
      if (const std::string value = pushback.load(); !value.empty())
        ctx->AddTrailingMetadata(std::string(kRetryPushbackKey), value);
      reactor->Finish(grpc::Status(reject_code, "rejected"));
      return reactor;
    }
    if (fail_code != grpc::StatusCode::OK) {
      reactor->Finish(grpc::Status(fail_code, "failed"));
      return reactor;
    }
    if (request->request_id() == "bad") {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad request"));
      return reactor;
    }
    *response = Compute(*request);
    if (const absl::Duration d = absl::Milliseconds(delay_ms.load()); d > absl::ZeroDuration()) {
      // Test-only: a detached thread stands in for a slow backend.
      std::thread([reactor, d] {
        absl::SleepFor(d);
        reactor->Finish(grpc::Status::OK);
      }).detach();
    } else {
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  grpc::ServerBidiReactor<v1::GemmRequest, v1::GemmResponse>* GemmStream(
      grpc::CallbackServerContext*) override {
    // Answers each request in turn.
    class Stream : public grpc::ServerBidiReactor<v1::GemmRequest, v1::GemmResponse> {
     public:
      Stream() { StartRead(&request_); }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        response_ = Compute(request_);
        StartWrite(&response_);
      }
      void OnWriteDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
          return;
        }
        StartRead(&request_);
      }
      void OnDone() override { delete this; }

     private:
      v1::GemmRequest request_;
      v1::GemmResponse response_;
    };
    return new Stream();
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetServerInfoRequest*,
                                          v1::ServerInfo* info) override {
    info->set_backend("fake");
    info->mutable_limits()->set_max_message_bytes(1 << 30);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::Time> call_times_ ABSL_GUARDED_BY(mu_);
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  void TearDown() override { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5))); }

  // A client whose own backoff is tiny, so a wait of pushback length shows
  // that the pushback was honoured.
  std::unique_ptr<Client> MakeClient(int max_attempts = 5) {
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port_);
    options.default_timeout = absl::Seconds(10);
    options.retry.max_attempts = max_attempts;
    options.retry.initial_backoff = absl::Milliseconds(1);
    options.retry.max_backoff = absl::Milliseconds(5);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(client).value();
  }

  // A 3x4 * 4x5 fp32 request with known data, and its reference result.
  v1::GemmRequest MakeRequest(const std::string& id = "r") {
    v1::GemmRequest request;
    request.set_request_id(id);
    EXPECT_TRUE(AddProblem(&request, MatrixView(a_.data(), 3, 4), MatrixView(b_.data(), 4, 5)).ok());
    return request;
  }
  void ExpectCorrect(const GemmResult& result) {
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->results_size(), 1);
    absl::StatusOr<std::vector<float>> d = ReadResult(result->results(0));
    ASSERT_TRUE(d.ok()) << d.status();
    const std::vector<double> ref = ReferenceGemm(*ViewProblem(MakeRequest().problems(0)));
    EXPECT_LT(RelativeError(std::vector<double>(d->begin(), d->end()), ref), 1e-6);
  }

  FakeGemmService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  const std::vector<float> a_ = {1, -2, 3, 0.5f, 2, 1, -1, 4, 0, 3, 2, 1};
  const std::vector<float> b_ = {1, 2, 3, 4, 5, -1, 0, 1, 2, 3, 2, 2, 2, 2, 2, 0.25f, 1, -3, 0, 1};
};

TEST_F(ClientTest, CreateValidatesOptions) {
  ClientOptions options;
  EXPECT_THAT(std::string(Client::Create(options).status().message()), ::testing::HasSubstr("target"));
  options.target = "127.0.0.1:1";
  options.retry.max_attempts = 0;
  EXPECT_THAT(std::string(Client::Create(options).status().message()),
              ::testing::HasSubstr("max_attempts"));
  options.retry = RetryPolicy();
  options.default_timeout = absl::ZeroDuration();
  EXPECT_EQ(Client::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, UnaryGemmAndServerInfo) {
  std::unique_ptr<Client> client = MakeClient();
  ExpectCorrect(client->Gemm(MakeRequest()));
  absl::StatusOr<v1::ServerInfo> info = client->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "fake");
}

TEST_F(ClientTest, DeterministicOptionFillsOnlyUnsetRequests) {
  std::unique_ptr<Client> plain = MakeClient();
  GemmResult r = plain->Gemm(MakeRequest());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_reproducibility());  // unset: the server's default

  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", port_);
  options.deterministic = true;
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  r = (*client)->Gemm(MakeRequest());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reproducibility().backend(), "det");
  v1::GemmRequest explicit_off = MakeRequest();
  explicit_off.set_deterministic(false);
  r = (*client)->Gemm(explicit_off);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reproducibility().backend(), "not");
  r = (*client)->GemmFuture(MakeRequest()).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reproducibility().backend(), "det");
  r = (*client)->GemmFuture(std::make_shared<const v1::GemmRequest>(MakeRequest())).get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reproducibility().backend(), "det");
}

TEST_F(ClientTest, DnsTargetWithRoundRobin) {
  ClientOptions options;
  options.target = absl::StrCat("dns:///localhost:", port_);
  std::unique_ptr<Client> client = *Client::Create(options);
  CallOptions call;
  call.timeout = absl::Seconds(10);
  ExpectCorrect(client->Gemm(MakeRequest(), call));
}

TEST_F(ClientTest, RetriesResourceExhaustedAfterThePushback) {
  service_.reject = 2;
  service_.pushback = "150";
  std::unique_ptr<Client> client = MakeClient();
  ExpectCorrect(client->Gemm(MakeRequest()));
  const std::vector<absl::Time> times = service_.call_times();
  ASSERT_EQ(times.size(), 3u);
  EXPECT_GE(times[1] - times[0], absl::Milliseconds(145));
  EXPECT_GE(times[2] - times[1], absl::Milliseconds(145));
}

TEST_F(ClientTest, NegativePushbackMeansDoNotRetry) {
  service_.reject = 1;
  service_.pushback = "-1";
  std::unique_ptr<Client> client = MakeClient();
  EXPECT_EQ(client->Gemm(MakeRequest()).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_.calls(), 1);
}

TEST_F(ClientTest, RetriesUnavailableWithBackoff) {
  service_.reject = 3;
  service_.reject_code = grpc::StatusCode::UNAVAILABLE;
  std::unique_ptr<Client> client = MakeClient();
  ExpectCorrect(client->Gemm(MakeRequest()));
  EXPECT_EQ(service_.calls(), 4);
}

TEST_F(ClientTest, GivesUpAfterMaxAttempts) {
  service_.reject = 100;
  std::unique_ptr<Client> client = MakeClient(/*max_attempts=*/3);
  EXPECT_EQ(client->Gemm(MakeRequest()).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(service_.calls(), 3);
}

TEST_F(ClientTest, DoesNotRetryInvalidArgument) {
  std::unique_ptr<Client> client = MakeClient();
  EXPECT_EQ(client->Gemm(MakeRequest("bad")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.calls(), 1);
  service_.fail_code = grpc::StatusCode::INTERNAL;
  EXPECT_EQ(client->Gemm(MakeRequest()).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(service_.calls(), 2);
}

TEST_F(ClientTest, DeadlineEndsASlowCall) {
  service_.delay_ms = 2000;
  std::unique_ptr<Client> client = MakeClient();
  CallOptions options;
  options.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  EXPECT_EQ(client->Gemm(MakeRequest(), options).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST_F(ClientTest, NeverRetriesPastTheDeadline) {
  service_.reject = 100;
  service_.pushback = "400";
  std::unique_ptr<Client> client = MakeClient(/*max_attempts=*/100);
  CallOptions options;
  options.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  // Attempts at about 0, 400 and 800 ms; one at 1200 ms would be too late.
  EXPECT_EQ(client->Gemm(MakeRequest(), options).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(service_.calls(), 3);
}

TEST_F(ClientTest, UnreachableServerIsUnavailable) {
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.retry.max_attempts = 3;
  options.retry.initial_backoff = absl::Milliseconds(10);
  std::unique_ptr<Client> client = *Client::Create(options);
  CallOptions call;
  call.timeout = absl::Seconds(5);
  EXPECT_EQ(client->Gemm(MakeRequest(), call).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ClientTest, AsyncRetriesAfterThePushback) {
  service_.reject = 2;
  service_.pushback = "100";
  std::unique_ptr<Client> client = MakeClient();
  const absl::Time start = absl::Now();
  std::future<GemmResult> future = client->GemmFuture(MakeRequest());
  ExpectCorrect(future.get());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(195));
  EXPECT_EQ(service_.calls(), 3);
}

TEST_F(ClientTest, ManyConcurrentAsyncCallsShareOneRequest) {
  std::unique_ptr<Client> client = MakeClient();
  auto request = std::make_shared<const v1::GemmRequest>(MakeRequest());
  constexpr int kCalls = 64;
  std::atomic<int> ok{0}, done{0};
  absl::Notification all_done;
  for (int i = 0; i < kCalls; ++i) {
    client->GemmAsync(request, {}, [&](GemmResult result) {
      if (result.ok() && result->results_size() == 1) ok++;
      if (++done == kCalls) all_done.Notify();
    });
  }
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(ok.load(), kCalls);
}

TEST_F(ClientTest, AsyncDeadline) {
  service_.delay_ms = 2000;
  std::unique_ptr<Client> client = MakeClient();
  CallOptions options;
  options.timeout = absl::Milliseconds(100);
  EXPECT_EQ(client->GemmFuture(MakeRequest(), options).get().status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, DestroyingTheClientCancelsAWaitingRetry) {
  service_.reject = 1;
  service_.pushback = "5000";
  std::unique_ptr<Client> client = MakeClient();
  std::future<GemmResult> future = client->GemmFuture(MakeRequest());
  while (service_.calls() == 0) absl::SleepFor(absl::Milliseconds(5));
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  client.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(future.get().status().code(), absl::StatusCode::kCancelled);
}

TEST_F(ClientTest, StreamAnswersEveryRequestById) {
  std::unique_ptr<Client> client = MakeClient();
  std::unique_ptr<GemmStreamSession> stream = client->OpenStream();
  std::vector<std::future<GemmResult>> futures;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<std::future<GemmResult>> f = stream->Send(MakeRequest(absl::StrCat("id-", i)));
    ASSERT_TRUE(f.ok()) << f.status();
    futures.push_back(std::move(*f));
  }
  // A duplicate of a pending id is refused; an empty id is filled in.
  absl::Status dup = stream->Send(MakeRequest("id-19"), [](GemmResult) {});
  // (Unless id-19 was answered already.)
  if (!dup.ok()) {
    EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  }
  std::string filled_id;
  absl::Notification filled;
  ASSERT_TRUE(stream
                  ->Send(MakeRequest(""),
                         [&](GemmResult r) {
                           if (r.ok()) filled_id = r->request_id();
                           filled.Notify();
                         })
                  .ok());
  absl::StatusOr<std::future<GemmResult>> bad = stream->Send(MakeRequest("bad"));
  ASSERT_TRUE(bad.ok());
  stream->CloseSend();
  EXPECT_FALSE(stream->Send(MakeRequest("late")).ok());

  for (int i = 0; i < 20; ++i) {
    GemmResult r = futures[i].get();
    ExpectCorrect(r);
    if (r.ok()) {
      EXPECT_EQ(r->request_id(), absl::StrCat("id-", i));
    }
  }
  filled.WaitForNotification();
  EXPECT_FALSE(filled_id.empty());
  EXPECT_EQ(bad->get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(stream->pending(), 0u);
}

TEST_F(ClientTest, DroppingAnOpenStreamCancelsIt) {
  std::unique_ptr<Client> client = MakeClient();
  std::unique_ptr<GemmStreamSession> stream = client->OpenStream();
  ASSERT_TRUE(stream->Send(MakeRequest("x"), [](GemmResult) {}).ok());
  stream.reset();  // Without CloseSend: must not hang.
}

TEST_F(ClientTest, StreamDeadline) {
  std::unique_ptr<Client> client = MakeClient();
  CallOptions options;
  options.timeout = absl::Milliseconds(200);
  std::unique_ptr<GemmStreamSession> stream = client->OpenStream(options);
  // Never closed for sending, so only the deadline ends it.
  EXPECT_EQ(stream->Finish().code(), absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace gemm
