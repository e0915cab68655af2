// The real GemmServer in-process on 127.0.0.1:0, driven through the
// generated gRPC stub: correctness on the CPU backend over shapes, transposes,
// layouts and dtypes; the stream API; server info and health; every bad input
// and limit over the wire; queueing behaviour (full queue, deadlines,
// cancellation) with a blocking test executor; graceful shutdown.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "service/exec/cpu_executor.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::gemm::test::Describe;
using ::gemm::test::MakeProblem;
using ::gemm::test::ProblemSpec;
using ::gemm::test::ResponseMatches;
using ::testing::HasSubstr;

constexpr DType kDTypes[] = {DType::kFp32, DType::kFp16, DType::kBf16};
constexpr Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};
constexpr char kPushbackKey[] = "grpc-retry-pushback-ms";

ServerOptions TestOptions() {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.cpu.calibrate = true;  // GetServerInfo reports measured peaks
  o.limits.max_message_bytes = 4 << 20;
  o.limits.max_dimension = 8192;
  o.limits.max_matrix_bytes = 2 << 20;
  o.limits.max_problems_per_request = 64;
  o.limits.max_queued_requests = 256;
  o.limits.max_inflight_bytes = 64 << 20;
  o.limits.max_stream_inflight = 16;
  return o;
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

v1::GemmRequest Request(const std::string& id, std::vector<v1::GemmProblem> problems) {
  v1::GemmRequest r;
  r.set_request_id(id);
  for (auto& p : problems) *r.add_problems() = std::move(p);
  return r;
}

// Bad-input cases: a mutation of a good 3x5x4 fp32 problem, the code the
// server must answer with, and the field its message must name.
struct BadCase {
  std::string name;
  void (*mutate)(v1::GemmRequest*);
  grpc::StatusCode code;
  std::string field;
};

v1::GemmProblem* P0(v1::GemmRequest* r) { return r->mutable_problems(0); }

std::vector<BadCase> BadCases() {
  using C = grpc::StatusCode;
  return {
      {"zero m", [](v1::GemmRequest* r) { P0(r)->set_m(0); }, C::INVALID_ARGUMENT,
       "problems[0].m"},
      {"zero n", [](v1::GemmRequest* r) { P0(r)->set_n(0); }, C::INVALID_ARGUMENT,
       "problems[0].n"},
      {"zero k", [](v1::GemmRequest* r) { P0(r)->set_k(0); }, C::INVALID_ARGUMENT,
       "problems[0].k"},
      {"negative k", [](v1::GemmRequest* r) { P0(r)->set_k(static_cast<uint64_t>(-4)); },
       C::INVALID_ARGUMENT, "problems[0].k"},
      {"m over max_dimension", [](v1::GemmRequest* r) { P0(r)->set_m(8193); },
       C::INVALID_ARGUMENT, "problems[0].m"},
      {"short a", [](v1::GemmRequest* r) { P0(r)->mutable_a()->mutable_data()->pop_back(); },
       C::INVALID_ARGUMENT, "problems[0].a.data"},
      {"long b", [](v1::GemmRequest* r) { P0(r)->mutable_b()->mutable_data()->append("xy"); },
       C::INVALID_ARGUMENT, "problems[0].b.data"},
      {"inner dims differ",
       [](v1::GemmRequest* r) { P0(r)->mutable_a()->set_data(std::string(3 * 7 * 4, '\0')); },
       C::INVALID_ARGUMENT, "problems[0].a.data"},
      {"unspecified dtype",
       [](v1::GemmRequest* r) { P0(r)->set_input_dtype(v1::DATA_TYPE_UNSPECIFIED); },
       C::INVALID_ARGUMENT, "problems[0].input_dtype"},
      {"unknown dtype",
       [](v1::GemmRequest* r) { P0(r)->set_input_dtype(static_cast<v1::DataType>(9)); },
       C::INVALID_ARGUMENT, "problems[0].input_dtype"},
      {"unknown output dtype",
       [](v1::GemmRequest* r) { P0(r)->set_output_dtype(static_cast<v1::DataType>(9)); },
       C::INVALID_ARGUMENT, "problems[0].output_dtype"},
      {"unknown layout",
       [](v1::GemmRequest* r) { P0(r)->mutable_b()->set_layout(static_cast<v1::Layout>(5)); },
       C::INVALID_ARGUMENT, "problems[0].b.layout"},
      {"unknown output layout",
       [](v1::GemmRequest* r) { P0(r)->set_output_layout(static_cast<v1::Layout>(5)); },
       C::INVALID_ARGUMENT, "problems[0].output_layout"},
      {"beta without C", [](v1::GemmRequest* r) { P0(r)->set_beta(1.0); }, C::INVALID_ARGUMENT,
       "problems[0].c"},
      {"C of the wrong shape",
       [](v1::GemmRequest* r) {
         P0(r)->set_beta(1.0);
         P0(r)->mutable_c()->set_data(std::string(5 * 4 * 4, '\0'));
       },
       C::INVALID_ARGUMENT, "problems[0].c.data"},
      {"NaN alpha", [](v1::GemmRequest* r) { P0(r)->set_alpha(std::nan("")); },
       C::INVALID_ARGUMENT, "problems[0].alpha"},
      {"empty batch", [](v1::GemmRequest* r) { r->clear_problems(); }, C::INVALID_ARGUMENT,
       "problems"},
      {"bad second problem",
       [](v1::GemmRequest* r) {
         *r->add_problems() = r->problems(0);
         r->mutable_problems(1)->set_k(0);
       },
       C::INVALID_ARGUMENT, "problems[1].k"},
      {"too many problems",
       [](v1::GemmRequest* r) {
         for (int i = 0; i < 64; ++i) *r->add_problems() = r->problems(0);
       },
       C::RESOURCE_EXHAUSTED, "problems"},
      {"operand over max_matrix_bytes",
       [](v1::GemmRequest* r) {
         // 1024 x 1024 fp32 A is 4 MiB > 2 MiB; A's data is not needed for the check.
         P0(r)->set_m(1024);
         P0(r)->set_k(1024);
       },
       C::RESOURCE_EXHAUSTED, "problems[0].a.data"},
      {"results over max_message_bytes",
       [](v1::GemmRequest* r) {
         // Two 1024 x 512 fp32 results: 2 MiB each, 4 MiB together.
         v1::GemmProblem p = r->problems(0);
         p.set_m(1024);
         p.set_n(512);
         p.set_k(1);
         p.mutable_a()->set_data(std::string(1024 * 4, '\0'));
         p.mutable_b()->set_data(std::string(512 * 4, '\0'));
         r->clear_problems();
         *r->add_problems() = p;
         *r->add_problems() = p;
       },
       C::RESOURCE_EXHAUSTED, "max message size"},
  };
}

v1::GemmRequest GoodRequestForBadCases(std::mt19937* rng) {
  ProblemSpec s;
  s.m = 3;
  s.n = 5;
  s.k = 4;
  return Request("bad", {MakeProblem(s, rng)});
}

// Specs covering shapes x transposes x layouts x dtypes; each shape meets a
// different layout combination.
std::vector<ProblemSpec> SweepSpecs() {
  const uint64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 64}, {1, 129, 3}, {127, 1, 17}};
  std::vector<ProblemSpec> specs;
  int i = 0;
  for (const auto& mnk : shapes)
    for (DType in : kDTypes)
      for (DType out : kDTypes)
        for (int t = 0; t < 4; ++t) {
          ProblemSpec s;
          s.m = mnk[0];
          s.n = mnk[1];
          s.k = mnk[2];
          s.input = in;
          if (out != in || i % 2) s.output = out;
          s.transpose_a = t & 1;
          s.transpose_b = t & 2;
          s.layout_a = kLayouts[i & 1];
          s.layout_b = kLayouts[(i >> 1) & 1];
          s.layout_c = kLayouts[(i >> 2) & 1];
          s.layout_d = kLayouts[(i >> 3) & 1];
          if (i % 3 == 1) s.alpha = -0.5;
          if (i % 3 == 2) s.beta = 1.5;
          specs.push_back(s);
          ++i;
        }
  return specs;
}

// The CPU-backed server shared by the tests that do not reconfigure it.
class ServerIntegrationTest : public test::SharedServerTest<ServerIntegrationTest> {
 public:
  static ServerOptions Options() { return TestOptions(); }

 protected:
  void SetUp() override {
    SharedServerTest::SetUp();
    if (HasFatalFailure()) return;
    stub_ = test::LoopbackStub(server_->port());
  }

  grpc::Status Call(const v1::GemmRequest& request, v1::GemmResponse* response) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    return stub_->Gemm(&ctx, request, response);
  }

  std::unique_ptr<v1::GemmService::Stub> stub_;
  std::mt19937 rng_{12345};
};

TEST_F(ServerIntegrationTest, EveryShapeTransposeLayoutAndDtype) {
  int n = 0;
  for (const ProblemSpec& spec : SweepSpecs()) {
    const v1::GemmRequest request = Request(absl::StrCat("sweep-", n++), {MakeProblem(spec, &rng_)});
    v1::GemmResponse response;
    const grpc::Status st = Call(request, &response);
    ASSERT_TRUE(st.ok()) << Describe(spec) << ": " << st.error_message();
    EXPECT_TRUE(ResponseMatches(request, response)) << Describe(spec);
  }
}

TEST_F(ServerIntegrationTest, ResponseNamesBackendAndTiming) {
  ProblemSpec s;
  s.m = 64;
  s.n = 64;
  s.k = 64;
  const v1::GemmRequest request = Request("timed", {MakeProblem(s, &rng_)});
  v1::GemmResponse response;
  ASSERT_TRUE(Call(request, &response).ok());
  EXPECT_TRUE(ResponseMatches(request, response));
  EXPECT_EQ(response.backend(), "cpu");
  EXPECT_FALSE(response.kernel().empty());
  EXPECT_EQ(response.status_code(), 0);
  const v1::Timing& t = response.timing();
  EXPECT_GT(t.total_ns(), 0u);
  EXPECT_GE(t.total_ns(), t.compute_ns());
  EXPECT_GE(t.total_ns(), t.queue_ns());
}

TEST_F(ServerIntegrationTest, BatchOfDifferentShapesAnswersInOrder) {
  std::vector<v1::GemmProblem> problems;
  const uint64_t shapes[][3] = {{1, 1, 1}, {9, 2, 31}, {64, 64, 64}, {3, 100, 1}, {17, 5, 129}};
  int i = 0;
  for (const auto& mnk : shapes) {
    ProblemSpec s;
    s.m = mnk[0];
    s.n = mnk[1];
    s.k = mnk[2];
    s.input = kDTypes[i % 3];
    s.output = kDTypes[(i + 1) % 3];
    s.transpose_a = i & 1;
    s.layout_d = kLayouts[(i >> 1) & 1];
    problems.push_back(MakeProblem(s, &rng_));
    ++i;
  }
  // The same shape twice in one batch, too.
  problems.push_back(problems[2]);
  const v1::GemmRequest request = Request("batch", problems);
  v1::GemmResponse response;
  const grpc::Status st = Call(request, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(ResponseMatches(request, response));
}

TEST_F(ServerIntegrationTest, StreamAnswersManyPipelinedRequestsTaggedById) {
  // More requests than max_stream_inflight (16), so flow control is exercised.
  constexpr int kRequests = 60;
  std::map<std::string, v1::GemmRequest> sent;
  std::vector<v1::GemmRequest> order;
  for (int i = 0; i < kRequests; ++i) {
    ProblemSpec s;
    s.m = 1 + (i * 7) % 40;
    s.n = 1 + (i * 13) % 33;
    s.k = 1 + (i * 5) % 70;
    s.input = kDTypes[i % 3];
    s.transpose_b = i & 1;
    s.layout_a = kLayouts[(i >> 1) & 1];
    v1::GemmRequest r = Request(absl::StrCat("s", i), {MakeProblem(s, &rng_)});
    r.set_priority(i % 3);
    sent[r.request_id()] = r;
    order.push_back(r);
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(60));
  auto stream = stub_->GemmStream(&ctx);
  std::thread writer([&] {
    for (const v1::GemmRequest& r : order)
      if (!stream->Write(r)) break;
    stream->WritesDone();
  });
  std::set<std::string> answered;
  v1::GemmResponse response;
  while (stream->Read(&response)) {
    auto it = sent.find(response.request_id());
    ASSERT_NE(it, sent.end()) << "unknown request_id " << response.request_id();
    EXPECT_TRUE(answered.insert(response.request_id()).second) << "answered twice";
    EXPECT_TRUE(ResponseMatches(it->second, response)) << response.request_id();
  }
  writer.join();
  const grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(answered.size(), static_cast<size_t>(kRequests));
}

TEST_F(ServerIntegrationTest, StreamAnswersEachRequestBeforeTheNextIsSent) {
  // Request, wait for its response, then the next: a response must not wait
  // for a later read or for the end of the client's writes.
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  auto stream = stub_->GemmStream(&ctx);
  for (int i = 0; i < 5; ++i) {
    ProblemSpec s;
    s.m = 4 + i;
    s.n = 3;
    s.k = 9;
    const v1::GemmRequest r = Request(absl::StrCat("ping-", i), {MakeProblem(s, &rng_)});
    ASSERT_TRUE(stream->Write(r));
    v1::GemmResponse response;
    ASSERT_TRUE(stream->Read(&response)) << "no response to " << r.request_id()
                                         << " before the stream's deadline";
    EXPECT_TRUE(ResponseMatches(r, response));
  }
  stream->WritesDone();
  v1::GemmResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServerIntegrationTest, StreamErrorsArePerRequestAndDoNotEndTheStream) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(30));
  auto stream = stub_->GemmStream(&ctx);
  std::map<std::string, v1::GemmRequest> good;
  std::vector<v1::GemmRequest> order;
  for (int i = 0; i < 6; ++i) {
    ProblemSpec s;
    s.m = 5;
    s.n = 6;
    s.k = 7 + i;
    v1::GemmRequest r = Request(absl::StrCat("g", i), {MakeProblem(s, &rng_)});
    good[r.request_id()] = r;
    order.push_back(r);
    if (i == 1) {
      v1::GemmRequest bad = r;
      bad.set_request_id("bad-k");
      bad.mutable_problems(0)->set_k(0);
      order.push_back(bad);
    }
    if (i == 3) {
      v1::GemmRequest no_id = r;
      no_id.clear_request_id();
      order.push_back(no_id);
    }
  }
  for (const v1::GemmRequest& r : order) ASSERT_TRUE(stream->Write(r));
  stream->WritesDone();
  int good_answers = 0;
  bool saw_bad = false, saw_missing_id = false;
  v1::GemmResponse response;
  while (stream->Read(&response)) {
    if (response.request_id() == "bad-k") {
      saw_bad = true;
      EXPECT_EQ(response.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(response.status_message(), HasSubstr("problems[0].k"));
      EXPECT_EQ(response.results_size(), 0);
    } else if (response.request_id().empty()) {
      saw_missing_id = true;
      EXPECT_EQ(response.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_THAT(response.status_message(), HasSubstr("request_id"));
    } else {
      auto it = good.find(response.request_id());
      ASSERT_NE(it, good.end()) << response.request_id();
      EXPECT_TRUE(ResponseMatches(it->second, response));
      ++good_answers;
    }
  }
  EXPECT_TRUE(saw_bad);
  EXPECT_TRUE(saw_missing_id);
  EXPECT_EQ(good_answers, 6);
  const grpc::Status st = stream->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(ServerIntegrationTest, ServerInfoReportsBackendLimitsAndRates) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(10));
  v1::ServerInfo info;
  const grpc::Status st = stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_FALSE(info.version().empty());
  ASSERT_GE(info.devices_size(), 1);
  EXPECT_FALSE(info.devices(0).name().empty());
  EXPECT_GE(info.devices(0).threads(), 1u);
  EXPECT_FALSE(info.kernels().empty());
  EXPECT_EQ(info.input_dtypes_size(), 5);  // fp32, fp16, bf16 and the two FP8 formats

  const ServiceLimits want = TestOptions().limits;
  const v1::Limits& l = info.limits();
  EXPECT_EQ(l.max_message_bytes(), want.max_message_bytes);
  EXPECT_EQ(l.max_dimension(), want.max_dimension);
  EXPECT_EQ(l.max_problem_bytes(), want.max_matrix_bytes);
  EXPECT_EQ(l.max_problems_per_request(), want.max_problems_per_request);
  EXPECT_EQ(l.max_queued_requests(), want.max_queued_requests);
  EXPECT_EQ(l.max_queued_bytes(), want.max_inflight_bytes);

  std::set<std::string> kinds;
  for (const v1::PeakRate& r : info.peak_rates()) {
    kinds.insert(r.kind());
    EXPECT_GT(r.per_second(), 0) << r.kind();
    EXPECT_FALSE(r.method().empty()) << r.kind();
  }
  for (const char* kind : {"fp32", "fp16", "bf16", "memory"})
    EXPECT_TRUE(kinds.count(kind)) << "no peak rate for " << kind;
}

TEST_F(ServerIntegrationTest, HealthServiceReportsServing) {
  // Debian's libgrpc++-dev ships no generated grpc.health.v1 header, so the
  // call goes out as raw bytes: an empty HealthCheckRequest (service "") and
  // a HealthCheckResponse whose field 1 (status) is SERVING = 1: 08 01.
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  // Only the server-wide status ("") is checked: the default health service
  // knows no per-service names unless the server registers them.
  {
    const std::string service;
    grpc::Slice slice(std::string{});
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    done.WaitForNotification();
    ASSERT_TRUE(status.ok()) << "service \"" << service << "\": " << status.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    EXPECT_EQ(bytes, std::string("\x08\x01", 2)) << "service \"" << service << "\"";
  }
}

TEST_F(ServerIntegrationTest, EveryBadInputGetsItsCodeNamingTheField) {
  for (const BadCase& c : BadCases()) {
    v1::GemmRequest request = GoodRequestForBadCases(&rng_);
    c.mutate(&request);
    v1::GemmResponse response;
    const grpc::Status st = Call(request, &response);
    EXPECT_EQ(st.error_code(), c.code) << c.name << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(c.field)) << c.name;
  }
  // The server is unharmed.
  const v1::GemmRequest good = GoodRequestForBadCases(&rng_);
  v1::GemmResponse response;
  ASSERT_TRUE(Call(good, &response).ok());
  EXPECT_TRUE(ResponseMatches(good, response));
}

// A size limit fails the same way on every attempt: the server says so with a
// negative pushback, which tells clients (ours included) not to retry.
TEST_F(ServerIntegrationTest, SizeLimitRejectionsSayDoNotRetry) {
  v1::GemmRequest request = GoodRequestForBadCases(&rng_);
  request.mutable_problems(0)->set_m(1024);  // A would be 4 MiB, over 2 MiB
  request.mutable_problems(0)->set_k(1024);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(30));
  v1::GemmResponse response;
  const grpc::Status st = stub_->Gemm(&ctx, request, &response);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  const auto& trailers = ctx.GetServerTrailingMetadata();
  auto it = trailers.find(kPushbackKey);
  ASSERT_NE(it, trailers.end());
  EXPECT_EQ(std::string(it->second.data(), it->second.size()), "-1");
}

TEST_F(ServerIntegrationTest, MessageOverTheSizeLimitIsResourceExhausted) {
  // 5 MiB of A against a 4 MiB message limit: gRPC refuses it before the
  // service sees it.
  v1::GemmRequest request = GoodRequestForBadCases(&rng_);
  request.mutable_problems(0)->mutable_a()->set_data(std::string(5 << 20, '\0'));
  v1::GemmResponse response;
  const absl::Time t0 = absl::Now();
  const grpc::Status st = Call(request, &response);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST_F(ServerIntegrationTest, ConcurrentBadAndGoodRequestsAreAllAnsweredRight) {
  constexpr int kThreads = 4, kPerThread = 12;
  const std::vector<BadCase> bad_cases = BadCases();
  std::atomic<int> good_ok{0}, bad_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto stub = test::LoopbackStub(server_->port());
      std::mt19937 rng(1000 + t);
      for (int i = 0; i < kPerThread; ++i) {
        grpc::ClientContext ctx;
        SetDeadline(&ctx, absl::Seconds(60));
        v1::GemmResponse response;
        if ((i + t) % 2 == 0) {
          const BadCase& c = bad_cases[(t * kPerThread + i) % bad_cases.size()];
          v1::GemmRequest request = GoodRequestForBadCases(&rng);
          c.mutate(&request);
          const grpc::Status st = stub->Gemm(&ctx, request, &response);
          EXPECT_EQ(st.error_code(), c.code) << c.name << ": " << st.error_message();
          EXPECT_THAT(st.error_message(), HasSubstr(c.field)) << c.name;
          if (st.error_code() == c.code) bad_ok.fetch_add(1);
        } else {
          ProblemSpec s;
          s.m = 1 + (i * 11 + t) % 70;
          s.n = 1 + (i * 3 + t * 7) % 50;
          s.k = 1 + (i * 17 + t) % 90;
          s.input = kDTypes[(i + t) % 3];
          s.transpose_a = i & 2;
          s.layout_b = kLayouts[t & 1];
          s.beta = (i % 3 == 0) ? 0.25 : 0.0;
          const v1::GemmRequest request =
              Request(absl::StrCat("t", t, "-", i), {MakeProblem(s, &rng), MakeProblem(s, &rng)});
          const grpc::Status st = stub->Gemm(&ctx, request, &response);
          EXPECT_TRUE(st.ok()) << Describe(s) << ": " << st.error_message();
          const ::testing::AssertionResult match = ResponseMatches(request, response);
          EXPECT_TRUE(match) << Describe(s);
          if (st.ok() && match) good_ok.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(good_ok.load() + bad_ok.load(), kThreads * kPerThread);
}

// An executor that holds every item until released and records which ran,
// so that queueing can be observed deterministically. Items it runs are
// computed on the CPU, so their results are checkable.
class BlockingExecutor : public Executor {
 public:
  BlockingExecutor() {
    info_.backend = "blocking-test";
    info_.devices.push_back(DeviceDescription{"test", "", 0, 0, 1});
    info_.kernels = {"cpu_gemm"};
  }

  const BackendInfo& info() const override { return info_; }
  std::vector<PeakRate> peak_rates() const override { return {}; }
  int max_concurrent_batches() const override { return 1; }

  // Runs on the batcher's thread, so one batch at a time, like a backend with
  // one slot.
  void Execute(Batch batch) override {
    RunItems(batch);
    if (batch.on_done) batch.on_done();
  }

  void RunItems(const Batch& batch) {
    for (const std::shared_ptr<WorkItem>& item : batch.items) {
      {
        absl::MutexLock lock(&mu_);
        ++started_;
        mu_.Await(absl::Condition(&released_));
      }
      if (item->cancelled.load()) {
        item->Complete(absl::CancelledError("cancelled before it ran"));
        continue;
      }
      for (const GemmProblemRef& p : item->problems) RunCpuGemm(p).status().IgnoreError();
      {
        absl::MutexLock lock(&mu_);
        // Tests tag each request by its first problem's alpha.
        ran_.push_back(item->problems.front().alpha);
      }
      item->report.backend = info_.backend;
      item->report.kernel = "cpu_gemm";
      item->Complete(absl::OkStatus());
    }
  }

  // Lets every held and future item run.
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

  // Waits until `n` items have entered Execute.
  bool WaitStarted(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  std::multiset<double> ran() {
    absl::MutexLock lock(&mu_);
    return {ran_.begin(), ran_.end()};
  }

 private:
  BackendInfo info_;
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> ran_ ABSL_GUARDED_BY(mu_);
};

// An asynchronous unary call and its outcome.
struct AsyncCall {
  grpc::ClientContext ctx;
  v1::GemmRequest request;
  v1::GemmResponse response;
  grpc::Status status;
  absl::Time sent;
  absl::Time finished;
  absl::Notification done;

  void Start(v1::GemmService::Stub* stub) {
    sent = absl::Now();
    stub->async()->Gemm(&ctx, &request, &response, [this](grpc::Status s) {
      status = std::move(s);
      finished = absl::Now();
      done.Notify();
    });
  }
  bool Wait(absl::Duration timeout) { return done.WaitForNotificationWithTimeout(timeout); }
};

// Servers on the blocking executor, one per test.
class QueueingIntegrationTest : public ::testing::Test {
 protected:
  void StartServer(uint32_t max_queued_requests) {
    ServerOptions o = TestOptions();
    o.limits.max_queued_requests = max_queued_requests;
    auto executor = std::make_unique<BlockingExecutor>();
    executor_ = executor.get();
    auto s = GemmServer::Start(o, std::move(executor));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = test::LoopbackStub(server_->port());
  }

  void TearDown() override {
    if (executor_ != nullptr) executor_->Release();
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(5));
  }

  // A small request tagged with `tag` (its alpha).
  std::unique_ptr<AsyncCall> Tagged(double tag) {
    ProblemSpec s;
    s.m = 6;
    s.n = 5;
    s.k = 4;
    s.alpha = tag;
    auto call = std::make_unique<AsyncCall>();
    call->request = Request(absl::StrCat("tag-", tag), {MakeProblem(s, &rng_)});
    return call;
  }

  // Starts a call with tag `tag` and waits until the executor holds it.
  std::unique_ptr<AsyncCall> OccupyExecutor(double tag) {
    auto call = Tagged(tag);
    call->Start(stub_.get());
    EXPECT_TRUE(executor_->WaitStarted(1, absl::Seconds(10)));
    return call;
  }

  BlockingExecutor* executor_ = nullptr;
  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
  std::mt19937 rng_{777};
};

TEST_F(QueueingIntegrationTest, FullQueueRejectsFastWithPushback) {
  constexpr int kQueued = 2, kExtra = 3;
  ASSERT_NO_FATAL_FAILURE(StartServer(kQueued));
  auto running = OccupyExecutor(100);
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 1; i <= kQueued + kExtra; ++i) {
    calls.push_back(Tagged(i));
    calls.back()->Start(stub_.get());
  }
  // Whichever arrive after the queue is full are refused at once; the
  // others wait behind the held item.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  auto rejected = [&] {
    return std::count_if(calls.begin(), calls.end(),
                         [](const auto& c) { return c->done.HasBeenNotified(); });
  };
  while (rejected() < kExtra && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
  absl::SleepFor(absl::Milliseconds(50));  // no more than kExtra may finish
  ASSERT_EQ(rejected(), kExtra);
  std::multiset<double> admitted = {100};
  for (const auto& c : calls) {
    if (!c->done.HasBeenNotified()) {
      admitted.insert(c->request.problems(0).alpha());
      continue;
    }
    EXPECT_EQ(c->status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << c->status.error_message();
    EXPECT_THAT(c->status.error_message(), HasSubstr("queue"));
    EXPECT_LT(c->finished - c->sent, absl::Milliseconds(100));
    const auto& trailers = c->ctx.GetServerTrailingMetadata();
    auto it = trailers.find(kPushbackKey);
    ASSERT_NE(it, trailers.end()) << "no " << kPushbackKey << " trailer";
    const std::string ms(it->second.data(), it->second.size());
    EXPECT_GT(std::atoi(ms.c_str()), 0) << ms;
  }
  executor_->Release();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)));
  EXPECT_TRUE(running->status.ok()) << running->status.error_message();
  EXPECT_TRUE(ResponseMatches(running->request, running->response));
  for (const auto& c : calls) {
    ASSERT_TRUE(c->Wait(absl::Seconds(10)));
    if (c->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) continue;
    EXPECT_TRUE(c->status.ok()) << c->status.error_message();
    EXPECT_TRUE(ResponseMatches(c->request, c->response));
  }
  EXPECT_EQ(executor_->ran(), admitted);
}

TEST_F(QueueingIntegrationTest, DeadlinePassingWhileQueuedDropsTheWork) {
  ASSERT_NO_FATAL_FAILURE(StartServer(8));
  auto running = OccupyExecutor(100);
  auto late = Tagged(1);
  SetDeadline(&late->ctx, absl::Milliseconds(300));
  late->Start(stub_.get());
  ASSERT_TRUE(late->Wait(absl::Seconds(10)));
  EXPECT_EQ(late->status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << late->status.error_message();
  // Let the server see the expiry before the worker is free to pop.
  absl::SleepFor(absl::Milliseconds(100));
  executor_->Release();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)));
  EXPECT_TRUE(running->status.ok());
  // One more call goes through the same single worker after the expired one.
  auto after = Tagged(2);
  after->Start(stub_.get());
  ASSERT_TRUE(after->Wait(absl::Seconds(10)));
  EXPECT_TRUE(after->status.ok()) << after->status.error_message();
  EXPECT_EQ(executor_->ran(), (std::multiset<double>{100, 2}));
}

TEST_F(QueueingIntegrationTest, CancelledCallsQueuedWorkIsDropped) {
  ASSERT_NO_FATAL_FAILURE(StartServer(8));
  auto running = OccupyExecutor(100);
  auto cancelled = Tagged(1);
  cancelled->Start(stub_.get());
  absl::SleepFor(absl::Milliseconds(100));  // let it reach the queue
  cancelled->ctx.TryCancel();
  ASSERT_TRUE(cancelled->Wait(absl::Seconds(10)));
  EXPECT_EQ(cancelled->status.error_code(), grpc::StatusCode::CANCELLED);
  absl::SleepFor(absl::Milliseconds(100));  // let the server see the cancellation
  executor_->Release();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)));
  auto after = Tagged(2);
  after->Start(stub_.get());
  ASSERT_TRUE(after->Wait(absl::Seconds(10)));
  EXPECT_TRUE(after->status.ok()) << after->status.error_message();
  EXPECT_EQ(executor_->ran(), (std::multiset<double>{100, 2}));
}

TEST_F(QueueingIntegrationTest, CancelledStreamsQueuedWorkIsDropped) {
  ASSERT_NO_FATAL_FAILURE(StartServer(8));
  auto running = OccupyExecutor(100);
  grpc::ClientContext ctx;
  auto stream = stub_->GemmStream(&ctx);
  for (double tag : {1.0, 2.0}) ASSERT_TRUE(stream->Write(Tagged(tag)->request));
  absl::SleepFor(absl::Milliseconds(100));  // let them reach the queue
  ctx.TryCancel();
  v1::GemmResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  absl::SleepFor(absl::Milliseconds(100));  // let the server see the cancellation
  executor_->Release();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)));
  auto after = Tagged(3);
  after->Start(stub_.get());
  ASSERT_TRUE(after->Wait(absl::Seconds(10)));
  EXPECT_TRUE(after->status.ok()) << after->status.error_message();
  EXPECT_EQ(executor_->ran(), (std::multiset<double>{100, 3}));
}

TEST_F(QueueingIntegrationTest, StreamOutlivingItsRunningWorkStillFinishes) {
  // The stream is cancelled while its request is running (not queued); the
  // item completes afterwards and the stream must still finish, or shutdown
  // would wait for it.
  ASSERT_NO_FATAL_FAILURE(StartServer(8));
  grpc::ClientContext ctx;
  auto stream = stub_->GemmStream(&ctx);
  ASSERT_TRUE(stream->Write(Tagged(1)->request));
  ASSERT_TRUE(executor_->WaitStarted(1, absl::Seconds(10)));
  ctx.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  executor_->Release();
  const absl::Time t0 = absl::Now();
  server_->Shutdown(absl::Seconds(5));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(4)) << "the cancelled stream held up shutdown";
}

TEST_F(QueueingIntegrationTest, ShutdownDrainsInFlightCallsThenRefuses) {
  ASSERT_NO_FATAL_FAILURE(StartServer(8));
  auto running = OccupyExecutor(100);
  auto queued = Tagged(1);
  queued->Start(stub_.get());
  absl::SleepFor(absl::Milliseconds(100));  // let it reach the queue
  const int port = server_->port();
  absl::Notification shut_down;
  std::thread stopper([&] {
    server_->Shutdown(absl::Seconds(20));
    shut_down.Notify();
  });
  // Draining: the admitted calls are still waiting, not cut off.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(running->done.HasBeenNotified());
  EXPECT_FALSE(queued->done.HasBeenNotified());
  EXPECT_FALSE(shut_down.HasBeenNotified());
  executor_->Release();
  ASSERT_TRUE(running->Wait(absl::Seconds(10)));
  EXPECT_TRUE(running->status.ok()) << running->status.error_message();
  EXPECT_TRUE(ResponseMatches(running->request, running->response));
  ASSERT_TRUE(queued->Wait(absl::Seconds(10)));
  EXPECT_TRUE(queued->status.ok()) << queued->status.error_message();
  EXPECT_TRUE(ResponseMatches(queued->request, queued->response));
  EXPECT_TRUE(shut_down.WaitForNotificationWithTimeout(absl::Seconds(10)));
  stopper.join();

  auto stub = test::LoopbackStub(port);
  auto after = Tagged(3);
  SetDeadline(&after->ctx, absl::Seconds(5));
  after->Start(stub.get());
  ASSERT_TRUE(after->Wait(absl::Seconds(10)));
  EXPECT_EQ(after->status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << after->status.error_message();
  EXPECT_EQ(executor_->ran(), (std::multiset<double>{100, 1}));
}

}  // namespace
}  // namespace gemm
