// The real GemmServer (CPU backend) in-process on 127.0.0.1:0, driven through
// gemm::Client the way an application uses it: operands held on the host in
// their own dtype, problems built with MatrixView/AddProblem, results read
// back with ReadResult. Every result is checked against the float64 reference
// computed from the host operands themselves (not from the request the client
// built), so a client that mangles a field cannot hide it. Output buffers are
// poisoned with NaN before ReadResult fills them, and RelativeError never
// passes a NaN, so an element left unwritten fails the check.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/reference_gemm.h"
#include "service/exec/cpu_executor.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_executors.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

constexpr DType kDTypes[] = {DType::kFp32, DType::kFp16, DType::kBf16};
constexpr Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};

ServerOptions TestServerOptions() {
  ServerOptions o = test::LoopbackCpuServerOptions();
  o.cpu.calibrate = true;  // GetServerInfo reports measured peaks
  o.limits.max_message_bytes = 32 << 20;
  o.limits.max_dimension = 8192;
  o.limits.max_matrix_bytes = 8 << 20;
  o.limits.max_problems_per_request = 64;
  o.limits.max_queued_requests = 256;
  o.limits.max_inflight_bytes = 256 << 20;
  o.limits.max_stream_inflight = 16;
  return o;
}

std::unique_ptr<Client> ConnectClient(int port, RetryPolicy retry = {}) {
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.default_timeout = absl::Seconds(60);
  options.retry = retry;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// ---------------------------------------------------------------------------
// Host operands and their expected results

// A matrix the way a caller holds it: fp32 values or fp16/bf16 bit patterns.
struct HostMatrix {
  DType dtype = DType::kFp32;
  uint64_t rows = 0;
  uint64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  std::vector<float> f32;
  std::vector<uint16_t> f16;

  MatrixView View() const {
    if (dtype == DType::kFp32) return MatrixView(f32.data(), rows, cols, layout);
    return MatrixView(f16.data(), rows, cols, dtype, layout);
  }
  MatrixRef Ref() const { return View().ref(); }
};

HostMatrix RandomHostMatrix(DType dtype, uint64_t rows, uint64_t cols, Layout layout,
                            std::mt19937* rng) {
  HostMatrix h;
  h.dtype = dtype;
  h.rows = rows;
  h.cols = cols;
  h.layout = layout;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = dist(*rng);
  if (dtype == DType::kFp32) {
    h.f32 = std::move(values);
  } else {
    h.f16.resize(values.size());
    FromFloat(dtype, values.data(), h.f16.data(), values.size());
  }
  return h;
}

// One problem: its shape, scalars and host operands.
struct Case {
  GemmShape shape;
  bool output_dtype_set = true;  // false leaves output_dtype to its default
  double alpha = 1.0;
  double beta = 0.0;
  HostMatrix a;
  HostMatrix b;
  std::optional<HostMatrix> c;

  ProblemOptions Options() const {
    ProblemOptions o;
    o.transpose_a = shape.transpose_a;
    o.transpose_b = shape.transpose_b;
    if (output_dtype_set) o.output_dtype = shape.output_dtype;
    o.output_layout = shape.layout_d;
    o.alpha = alpha;
    o.beta = beta;
    if (c.has_value()) o.c = c->View();
    return o;
  }

  absl::Status AddTo(v1::GemmRequest* request) const {
    return AddProblem(request, a.View(), b.View(), Options());
  }

  // The float64 reference from the host operands, row-major M x N.
  std::vector<double> Reference() const {
    GemmProblemRef p;
    p.shape = shape;
    p.alpha = alpha;
    p.beta = beta;
    p.a = a.Ref();
    p.b = b.Ref();
    if (c.has_value()) p.c = c->Ref();
    return ReferenceGemm(p);
  }

  std::string Describe() const {
    auto layout = [](Layout l) { return l == Layout::kRowMajor ? "row" : "col"; };
    return absl::StrCat(shape.m, "x", shape.n, "x", shape.k, " ", DTypeName(shape.input_dtype),
                        "->", DTypeName(shape.output_dtype), output_dtype_set ? "" : "(default)",
                        " ta=", shape.transpose_a, " tb=", shape.transpose_b,
                        " a=", layout(shape.layout_a), " b=", layout(shape.layout_b),
                        " c=", layout(shape.layout_c), " d=", layout(shape.layout_d),
                        " alpha=", alpha, " beta=", beta);
  }
};

struct CaseSpec {
  uint64_t m = 1, n = 1, k = 1;
  DType input = DType::kFp32;
  DType output = DType::kFp32;
  bool output_dtype_set = true;
  bool transpose_a = false, transpose_b = false;
  Layout layout_a = Layout::kRowMajor, layout_b = Layout::kRowMajor;
  Layout layout_c = Layout::kRowMajor, layout_d = Layout::kRowMajor;
  double alpha = 1.0;
  double beta = 0.0;
};

Case MakeCase(const CaseSpec& s, std::mt19937* rng) {
  Case c;
  GemmShape& sh = c.shape;
  sh.m = s.m;
  sh.n = s.n;
  sh.k = s.k;
  sh.input_dtype = s.input;
  sh.output_dtype = s.output_dtype_set ? s.output : s.input;
  sh.transpose_a = s.transpose_a;
  sh.transpose_b = s.transpose_b;
  sh.layout_a = s.layout_a;
  sh.layout_b = s.layout_b;
  sh.layout_c = s.layout_c;
  sh.layout_d = s.layout_d;
  c.output_dtype_set = s.output_dtype_set;
  c.alpha = s.alpha;
  c.beta = s.beta;
  c.a = RandomHostMatrix(s.input, sh.a_rows(), sh.a_cols(), s.layout_a, rng);
  c.b = RandomHostMatrix(s.input, sh.b_rows(), sh.b_cols(), s.layout_b, rng);
  if (s.beta != 0.0) c.c = RandomHostMatrix(sh.output_dtype, s.m, s.n, s.layout_c, rng);
  return c;
}

// A dimension: 1 about one time in six, otherwise 2..71 (odd about half the time).
uint64_t RandomDim(std::mt19937* rng) {
  if (std::uniform_int_distribution<int>(0, 5)(*rng) == 0) return 1;
  return std::uniform_int_distribution<uint64_t>(2, 71)(*rng);
}

// A case of random shape, dtypes, transposes, layouts and scalars.
Case RandomCase(std::mt19937* rng) {
  CaseSpec s;
  s.m = RandomDim(rng);
  s.n = RandomDim(rng);
  s.k = RandomDim(rng);
  std::uniform_int_distribution<int> pick(0, 2), coin(0, 1), four(0, 3);
  s.input = kDTypes[pick(*rng)];
  s.output = kDTypes[pick(*rng)];
  s.output_dtype_set = s.output != s.input || coin(*rng);
  s.transpose_a = coin(*rng);
  s.transpose_b = coin(*rng);
  s.layout_a = kLayouts[coin(*rng)];
  s.layout_b = kLayouts[coin(*rng)];
  s.layout_c = kLayouts[coin(*rng)];
  s.layout_d = kLayouts[coin(*rng)];
  const int scalars = four(*rng);
  if (scalars == 1) s.alpha = -0.75;
  if (scalars >= 2) s.beta = scalars == 2 ? 1.5 : -1.0;
  return MakeCase(s, rng);
}

v1::GemmRequest RequestOf(const std::string& id, const std::vector<const Case*>& cases) {
  v1::GemmRequest request;
  request.set_request_id(id);
  for (const Case* c : cases) {
    const absl::Status st = c->AddTo(&request);
    EXPECT_TRUE(st.ok()) << c->Describe() << ": " << st;
  }
  return request;
}

// Checks one result against the case's float64 reference, reading it through
// the client library into a NaN-poisoned buffer.
::testing::AssertionResult ResultMatchesCase(const Case& c, const v1::GemmResult& result) {
  const GemmShape& s = c.shape;
  if (result.dtype() != ToProto(s.output_dtype))
    return ::testing::AssertionFailure() << "dtype " << v1::DataType_Name(result.dtype());
  if (result.layout() != ToProto(s.layout_d))
    return ::testing::AssertionFailure() << "layout " << v1::Layout_Name(result.layout());
  if (result.rows() != s.m || result.cols() != s.n)
    return ::testing::AssertionFailure() << "shape " << result.rows() << "x" << result.cols();
  std::vector<float> out(s.m * s.n, std::numeric_limits<float>::quiet_NaN());
  const absl::Status st = ReadResult(result, out.data(), out.size(), Layout::kRowMajor);
  if (!st.ok()) return ::testing::AssertionFailure() << "ReadResult: " << st;
  const std::vector<double> got(out.begin(), out.end());
  const double err = RelativeError(got, c.Reference());
  const double tol = Tolerance(s.input_dtype, s.output_dtype, /*tf32=*/false);
  if (!(err <= tol))
    return ::testing::AssertionFailure() << "relative error " << err << " over " << tol;
  return ::testing::AssertionSuccess();
}

// Checks a whole response: the request id, one matching result per case, and
// the backend named. The server's own reading of the request is checked too
// (test::ResponseMatches reads the request message independently).
::testing::AssertionResult ResponseMatchesCases(const v1::GemmRequest& request,
                                                const std::vector<const Case*>& cases,
                                                const GemmResult& response) {
  if (!response.ok()) return ::testing::AssertionFailure() << response.status();
  if (response->results_size() != static_cast<int>(cases.size()))
    return ::testing::AssertionFailure()
           << response->results_size() << " results for " << cases.size() << " problems";
  for (size_t i = 0; i < cases.size(); ++i) {
    ::testing::AssertionResult r = ResultMatchesCase(*cases[i], response->results(i));
    if (!r)
      return ::testing::AssertionFailure()
             << "problems[" << i << "] " << cases[i]->Describe() << ": " << r.message();
  }
  ::testing::AssertionResult wire = test::ResponseMatches(request, *response);
  if (!wire) return wire;
  if (response->backend() != "cpu")
    return ::testing::AssertionFailure() << "backend \"" << response->backend() << "\"";
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// The shared server

class ClientIntegrationTest : public test::SharedServerTest<ClientIntegrationTest> {
 public:
  static ServerOptions Options() { return TestServerOptions(); }

 protected:
  void SetUp() override {
    SharedServerTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = ConnectClient(server_->port());
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<Client> client_;
  std::mt19937 rng_{20240611};
};

TEST_F(ClientIntegrationTest, CheckerRejectsPoisonedResults) {
  // The checks below would pass anything if they passed this: a right result
  // with one element replaced by NaN, by infinity, or left zero must fail.
  for (DType out : kDTypes) {
    CaseSpec s;
    s.m = 5;
    s.n = 7;
    s.k = 3;
    s.output = out;
    const Case c = MakeCase(s, &rng_);
    const v1::GemmRequest request = RequestOf("poison", {&c});
    GemmResult response = client_->Gemm(request);
    ASSERT_TRUE(ResponseMatchesCases(request, {&c}, response));
    const std::string good = response->results(0).data();
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(), 1e4f}) {
      std::string data = good;
      FromFloat(out, &bad, data.data() + 3 * SizeOf(out), 1);
      response->mutable_results(0)->set_data(data);
      EXPECT_FALSE(ResultMatchesCase(c, response->results(0))) << DTypeName(out) << " " << bad;
      EXPECT_FALSE(test::ResultMatches(request.problems(0), response->results(0)))
          << DTypeName(out) << " " << bad;
    }
    std::string zeros(good.size(), '\0');
    response->mutable_results(0)->set_data(zeros);
    EXPECT_FALSE(ResultMatchesCase(c, response->results(0))) << DTypeName(out);
    response->mutable_results(0)->set_data(good.substr(1));
    EXPECT_FALSE(ResultMatchesCase(c, response->results(0))) << "short data, " << DTypeName(out);
  }
}

TEST_F(ClientIntegrationTest, SyncSweepOverDtypesTransposesLayoutsAndScalars) {
  // Every input x output dtype, transpose pair and layout of A, B, C and D,
  // each on its own random shape and with alpha/beta varying: 576 calls.
  int checked = 0;
  for (DType in : kDTypes)
    for (DType out : kDTypes)
      for (int t = 0; t < 4; ++t)
        for (int l = 0; l < 16; ++l) {
          CaseSpec s;
          s.m = RandomDim(&rng_);
          s.n = RandomDim(&rng_);
          s.k = RandomDim(&rng_);
          s.input = in;
          s.output = out;
          s.output_dtype_set = in != out || l % 2 == 1;
          s.transpose_a = t & 1;
          s.transpose_b = t & 2;
          s.layout_a = kLayouts[l & 1];
          s.layout_b = kLayouts[(l >> 1) & 1];
          s.layout_c = kLayouts[(l >> 2) & 1];
          s.layout_d = kLayouts[(l >> 3) & 1];
          const int scalars = (l + t) % 4;
          if (scalars == 1) s.alpha = -0.75;
          if (scalars == 2) s.beta = 1.5;
          if (scalars == 3) {
            s.alpha = 2.0;
            s.beta = -1.0;
          }
          const Case c = MakeCase(s, &rng_);
          const v1::GemmRequest request = RequestOf(absl::StrCat("sweep-", checked), {&c});
          const GemmResult response = client_->Gemm(request);
          ASSERT_TRUE(ResponseMatchesCases(request, {&c}, response)) << c.Describe();
          ++checked;
        }
  EXPECT_EQ(checked, 3 * 3 * 4 * 16);
}

TEST_F(ClientIntegrationTest, ShapeEdgesIncludingOnesAndLongThinMatrices) {
  const uint64_t shapes[][3] = {{1, 1, 1},   {1, 1, 257}, {257, 1, 1}, {1, 257, 1},
                                {1, 300, 7}, {300, 1, 7}, {3, 5, 513}, {129, 127, 1},
                                {64, 64, 64}, {65, 63, 67}};
  int i = 0;
  for (const auto& mnk : shapes)
    for (DType in : kDTypes) {
      CaseSpec s;
      s.m = mnk[0];
      s.n = mnk[1];
      s.k = mnk[2];
      s.input = in;
      s.output = kDTypes[i % 3];
      s.transpose_a = i & 1;
      s.transpose_b = i & 2;
      s.layout_a = kLayouts[(i >> 1) & 1];
      s.layout_d = kLayouts[(i >> 2) & 1];
      s.beta = i % 2 ? 0.5 : 0.0;
      const Case c = MakeCase(s, &rng_);
      const v1::GemmRequest request = RequestOf(absl::StrCat("edge-", i++), {&c});
      EXPECT_TRUE(ResponseMatchesCases(request, {&c}, client_->Gemm(request))) << c.Describe();
    }
}

TEST_F(ClientIntegrationTest, MultiProblemRequestsOfMixedShapes) {
  for (int r = 0; r < 12; ++r) {
    std::vector<Case> cases;
    const int problems = 1 + r % 7 + (r == 11 ? 20 : 0);
    for (int i = 0; i < problems; ++i) cases.push_back(RandomCase(&rng_));
    // Some repeated shapes in one request, too (the same problem twice).
    if (r % 3 == 0) cases.push_back(cases.front());
    std::vector<const Case*> ptrs;
    for (const Case& c : cases) ptrs.push_back(&c);
    const v1::GemmRequest request = RequestOf(absl::StrCat("multi-", r), ptrs);
    EXPECT_TRUE(ResponseMatchesCases(request, ptrs, client_->Gemm(request))) << "request " << r;
  }
}

TEST_F(ClientIntegrationTest, AsyncCallbacksAllRunOnceWithRightResults) {
  constexpr int kCalls = 48;
  std::vector<Case> cases;
  std::vector<v1::GemmRequest> requests;
  for (int i = 0; i < kCalls; ++i) cases.push_back(RandomCase(&rng_));
  for (int i = 0; i < kCalls; ++i) requests.push_back(RequestOf(absl::StrCat("async-", i), {&cases[i]}));

  absl::Mutex mu;
  std::vector<std::optional<GemmResult>> results(kCalls);
  std::atomic<int> callbacks{0};
  absl::BlockingCounter pending(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client_->GemmAsync(requests[i], CallOptions{}, [&, i](GemmResult result) {
      {
        absl::MutexLock lock(&mu);
        EXPECT_FALSE(results[i].has_value()) << "callback " << i << " ran twice";
        results[i] = std::move(result);
      }
      callbacks.fetch_add(1);
      pending.DecrementCount();
    });
  }
  pending.Wait();  // every call has a 60 s deadline, so this is bounded
  EXPECT_EQ(callbacks.load(), kCalls);
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(results[i].has_value());
    EXPECT_TRUE(ResponseMatchesCases(requests[i], {&cases[i]}, *results[i])) << cases[i].Describe();
  }
}

TEST_F(ClientIntegrationTest, FuturesOfSharedAndOwnedRequests) {
  constexpr int kCalls = 32;
  std::vector<Case> cases;
  for (int i = 0; i < kCalls; ++i) cases.push_back(RandomCase(&rng_));
  std::vector<std::shared_ptr<const v1::GemmRequest>> requests;
  std::vector<std::future<GemmResult>> futures;
  for (int i = 0; i < kCalls; ++i) {
    requests.push_back(std::make_shared<const v1::GemmRequest>(
        RequestOf(absl::StrCat("future-", i), {&cases[i]})));
    if (i % 2 == 0) {
      futures.push_back(client_->GemmFuture(requests[i]));
    } else {
      futures.push_back(client_->GemmFuture(*requests[i]));
    }
  }
  // One shared request sent many times at once.
  std::vector<std::future<GemmResult>> repeats;
  for (int i = 0; i < 8; ++i) repeats.push_back(client_->GemmFuture(requests[0]));
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(90)), std::future_status::ready) << i;
    EXPECT_TRUE(ResponseMatchesCases(*requests[i], {&cases[i]}, futures[i].get()))
        << cases[i].Describe();
  }
  for (auto& f : repeats) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(90)), std::future_status::ready);
    EXPECT_TRUE(ResponseMatchesCases(*requests[0], {&cases[0]}, f.get()));
  }
}

TEST_F(ClientIntegrationTest, StreamSessionAnswersManyPipelinedRequests) {
  // Far more requests than max_stream_inflight (16): the server's flow
  // control and the session's write queue both come into play.
  constexpr int kRequests = 150;
  std::vector<Case> cases;
  for (int i = 0; i < kRequests; ++i) cases.push_back(RandomCase(&rng_));

  CallOptions options;
  options.timeout = absl::Seconds(120);
  std::unique_ptr<GemmStreamSession> stream = client_->OpenStream(options);

  absl::Mutex mu;
  std::vector<std::optional<GemmResult>> by_callback(kRequests);
  std::vector<std::future<GemmResult>> futures(kRequests);
  std::vector<v1::GemmRequest> sent(kRequests);
  std::map<std::string, int> bad_sent;
  std::map<std::string, absl::Status> bad_got;
  for (int i = 0; i < kRequests; ++i) {
    // Ids: explicit on even requests, filled in by the session on odd ones.
    v1::GemmRequest request = RequestOf(i % 2 == 0 ? absl::StrCat("s-", i) : "", {&cases[i]});
    request.set_priority(i % 3);
    sent[i] = request;
    if (i % 4 < 2) {
      ASSERT_TRUE(stream
                      ->Send(std::move(request),
                             [&, i](GemmResult r) {
                               absl::MutexLock lock(&mu);
                               EXPECT_FALSE(by_callback[i].has_value()) << "answered twice: " << i;
                               by_callback[i] = std::move(r);
                             })
                      .ok());
    } else {
      absl::StatusOr<std::future<GemmResult>> f = stream->Send(std::move(request));
      ASSERT_TRUE(f.ok()) << f.status();
      futures[i] = std::move(*f);
    }
    if (i % 37 == 5) {
      // A bad request in the middle: answered with its own error, and the
      // stream goes on.
      v1::GemmRequest bad = RequestOf(absl::StrCat("bad-", i), {&cases[i]});
      bad.mutable_problems(0)->set_k(0);
      bad_sent[bad.request_id()] = i;
      ASSERT_TRUE(stream
                      ->Send(bad,
                             [&, id = bad.request_id()](GemmResult r) {
                               absl::MutexLock lock(&mu);
                               bad_got[id] = r.status();
                             })
                      .ok());
    }
  }
  stream->CloseSend();
  const absl::Status finish = stream->Finish();
  EXPECT_TRUE(finish.ok()) << finish;
  EXPECT_EQ(stream->pending(), 0u);
  EXPECT_FALSE(stream->Send(sent[0], [](GemmResult) {}).ok()) << "Send after CloseSend";

  std::set<std::string> ids;
  for (int i = 0; i < kRequests; ++i) {
    GemmResult result = absl::UnknownError("no answer");
    if (i % 4 < 2) {
      absl::MutexLock lock(&mu);
      ASSERT_TRUE(by_callback[i].has_value()) << "request " << i << " never answered";
      result = *by_callback[i];
    } else {
      ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(10)), std::future_status::ready) << i;
      result = futures[i].get();
    }
    ASSERT_TRUE(result.ok()) << i << ": " << result.status();
    if (i % 2 == 0) {
      EXPECT_EQ(result->request_id(), sent[i].request_id());
    } else {
      EXPECT_FALSE(result->request_id().empty()) << i;
      sent[i].set_request_id(result->request_id());  // so ResponseMatches can compare it
    }
    EXPECT_TRUE(ids.insert(result->request_id()).second) << "id answered twice";
    EXPECT_TRUE(ResponseMatchesCases(sent[i], {&cases[i]}, result)) << i << " "
                                                                    << cases[i].Describe();
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(bad_got.size(), bad_sent.size());
  for (const auto& [id, status] : bad_got) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << id << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("problems[0].k")) << id;
  }
}

TEST_F(ClientIntegrationTest, ShortDeadlineOnABigRequestIsDeadlineExceeded) {
  // 1024^3 fp32 is 2 GFLOP plus 12 MiB on the wire: no CPU does it in 2 ms.
  CaseSpec s;
  s.m = 1024;
  s.n = 1024;
  s.k = 1024;
  const Case big = MakeCase(s, &rng_);
  const auto request =
      std::make_shared<const v1::GemmRequest>(RequestOf("big", {&big}));
  CallOptions short_deadline;
  short_deadline.timeout = absl::Milliseconds(2);

  absl::Time t0 = absl::Now();
  GemmResult sync = client_->Gemm(*request, short_deadline);
  EXPECT_EQ(sync.status().code(), absl::StatusCode::kDeadlineExceeded) << sync.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(20)) << "the deadline did not cut the call short";

  CallOptions absolute;
  absolute.deadline = absl::Now() + absl::Milliseconds(2);
  std::future<GemmResult> fut = client_->GemmFuture(request, absolute);
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(fut.get().status().code(), absl::StatusCode::kDeadlineExceeded);

  // A deadline already past fails without reaching the server's executor.
  CallOptions past;
  past.deadline = absl::Now() - absl::Seconds(1);
  EXPECT_EQ(client_->Gemm(*request, past).status().code(), absl::StatusCode::kDeadlineExceeded);

  // The server is unharmed, and the same big request goes through with time.
  CallOptions generous;
  generous.timeout = absl::Seconds(120);
  EXPECT_TRUE(ResponseMatchesCases(*request, {&big}, client_->Gemm(*request, generous)));
}

TEST_F(ClientIntegrationTest, BadRequestsAreNotRetriedAndNameTheField) {
  CaseSpec s;
  s.m = 3;
  s.n = 4;
  s.k = 5;
  const Case c = MakeCase(s, &rng_);
  v1::GemmRequest request = RequestOf("bad", {&c});
  request.mutable_problems(0)->mutable_b()->mutable_data()->pop_back();
  const absl::Time t0 = absl::Now();
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.data"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  // The client refuses to build what the server would refuse.
  ProblemOptions o;
  o.beta = 1.0;
  EXPECT_FALSE(MakeProblem(c.a.View(), c.b.View(), o).ok()) << "beta without C";
  EXPECT_FALSE(MakeProblem(c.a.View(), c.a.View()).ok()) << "inner dimensions differ";
}

TEST_F(ClientIntegrationTest, ServerInfoThroughTheClient) {
  absl::StatusOr<v1::ServerInfo> info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->backend(), "cpu");
  EXPECT_FALSE(info->version().empty());
  ASSERT_GE(info->devices_size(), 1);
  EXPECT_FALSE(info->devices(0).name().empty());
  EXPECT_FALSE(info->kernels().empty());
  EXPECT_EQ(info->input_dtypes_size(), 5);  // fp32, fp16, bf16 and the two FP8 formats
  const ServiceLimits want = TestServerOptions().limits;
  EXPECT_EQ(info->limits().max_message_bytes(), want.max_message_bytes);
  EXPECT_EQ(info->limits().max_dimension(), want.max_dimension);
  EXPECT_EQ(info->limits().max_problem_bytes(), want.max_matrix_bytes);
  EXPECT_EQ(info->limits().max_problems_per_request(), want.max_problems_per_request);
  EXPECT_EQ(info->limits().max_queued_requests(), want.max_queued_requests);
  EXPECT_EQ(info->limits().max_queued_bytes(), want.max_inflight_bytes);
  std::set<std::string> kinds;
  for (const v1::PeakRate& r : info->peak_rates()) {
    kinds.insert(r.kind());
    EXPECT_GT(r.per_second(), 0) << r.kind();
  }
  for (const char* kind : {"fp32", "fp16", "bf16", "memory"})
    EXPECT_TRUE(kinds.count(kind)) << "no peak rate for " << kind;
}

// ---------------------------------------------------------------------------
// Retries against a full queue

class FullQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = TestServerOptions();
    o.limits.max_queued_requests = 1;
    o.cpu.concurrent_requests = 1;
    o.cpu.calibrate = false;
    auto cpu = CpuExecutor::Create(o.cpu);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    // Batches wait at the gate, so while it is shut one request runs (held)
    // and one waits, and every other request finds the queue full.
    auto gated = std::make_unique<test::GatedExecutor>(std::move(*cpu));
    gated_ = gated.get();
    auto s = GemmServer::Start(o, std::move(gated));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    if (gated_ != nullptr) gated_->Open();
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(10));
  }

  double Rejected() const {
    return test::MetricValue(server_->metrics()->Scrape(), "gemm_requests_total",
                       {"code=\"RESOURCE_EXHAUSTED\"", "method=\"Gemm\""});
  }

  test::GatedExecutor* gated_ = nullptr;
  std::unique_ptr<GemmServer> server_;
  std::mt19937 rng_{99};
};

TEST_F(FullQueueTest, WithoutRetriesAFullQueueIsResourceExhausted) {
  std::unique_ptr<Client> client = ConnectClient(server_->port());
  std::vector<Case> cases;
  for (int i = 0; i < 3; ++i) cases.push_back(RandomCase(&rng_));
  std::vector<v1::GemmRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(RequestOf(absl::StrCat("q", i), {&cases[i]}));
  // One held in the executor, one in the queue...
  std::future<GemmResult> running = client->GemmFuture(requests[0]);
  ASSERT_TRUE(gated_->WaitEntered(absl::Seconds(30)));
  std::future<GemmResult> queued = client->GemmFuture(requests[1]);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (test::MetricValue(server_->metrics()->Scrape(), "gemm_queue_depth") < 1 &&
         absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(5));
  // ...and the third is refused at once when it may not retry.
  CallOptions once;
  once.retry = false;
  const GemmResult refused = client->Gemm(requests[2], once);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("queue"));
  gated_->Open();
  EXPECT_TRUE(ResponseMatchesCases(requests[0], {&cases[0]}, running.get()));
  EXPECT_TRUE(ResponseMatchesCases(requests[1], {&cases[1]}, queued.get()));
  EXPECT_TRUE(ResponseMatchesCases(requests[2], {&cases[2]}, client->Gemm(requests[2])));
}

TEST_F(FullQueueTest, RetryingClientsAllSucceedOnceTheQueueDrains) {
  // A policy with room for the wait: the server's pushback decides the delay
  // between attempts, the deadline (60 s) bounds the whole call.
  RetryPolicy retry;
  retry.max_attempts = 100000;
  retry.initial_backoff = absl::Milliseconds(2);
  retry.max_backoff = absl::Milliseconds(50);
  std::unique_ptr<Client> client = ConnectClient(server_->port(), retry);
  constexpr int kCalls = 10;
  std::vector<Case> cases;
  std::vector<std::shared_ptr<const v1::GemmRequest>> requests;
  for (int i = 0; i < kCalls; ++i) cases.push_back(RandomCase(&rng_));
  for (int i = 0; i < kCalls; ++i)
    requests.push_back(std::make_shared<const v1::GemmRequest>(
        RequestOf(absl::StrCat("retry-", i), {&cases[i]})));

  std::vector<std::future<GemmResult>> futures;
  futures.push_back(client->GemmFuture(requests[0]));
  ASSERT_TRUE(gated_->WaitEntered(absl::Seconds(30)));
  for (int i = 1; i < kCalls; ++i) futures.push_back(client->GemmFuture(requests[i]));
  // Hold the gate until every extra call has been refused at least once.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (Rejected() < kCalls - 2 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_GE(Rejected(), kCalls - 2);
  absl::SleepFor(absl::Milliseconds(100));
  gated_->Open();
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(futures[i].wait_for(std::chrono::seconds(90)), std::future_status::ready) << i;
    EXPECT_TRUE(ResponseMatchesCases(*requests[i], {&cases[i]}, futures[i].get()))
        << "call " << i;
  }
  const std::string scrape = server_->metrics()->Scrape();
  EXPECT_EQ(test::MetricValue(scrape, "gemm_requests_total", {"code=\"OK\"", "method=\"Gemm\""}),
            kCalls);
  RecordProperty("rejected_attempts", static_cast<int>(Rejected()));
}

}  // namespace
}  // namespace gemm
