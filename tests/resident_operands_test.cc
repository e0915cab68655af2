// Resident operands end to end (CPU backend, in-process server on loopback,
// driven through gemm::Client): a registered B named by many requests, every
// result checked against the float64 reference of the same problem sent with
// its bytes; resident A and C; release while requests are in flight; errors
// (released handle, wrong shape or dtype, budget, another caller's handle over
// bearer-token auth) and the resident-memory metrics.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/dtype.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "tests/test_util.h"

namespace gemm {
namespace {

using ::testing::HasSubstr;

// A matrix held by the test: fp32 values or fp16/bf16 bits.
struct HostMatrix {
  DType dtype = DType::kFp32;
  uint64_t rows = 0, cols = 0;
  Layout layout = Layout::kRowMajor;
  std::vector<float> f32;
  std::vector<uint16_t> f16;

  MatrixView View() const {
    if (dtype == DType::kFp32) return MatrixView(f32.data(), rows, cols, layout);
    return MatrixView(f16.data(), rows, cols, dtype, layout);
  }
};

HostMatrix Random(DType dtype, uint64_t rows, uint64_t cols, std::mt19937* rng,
                  Layout layout = Layout::kRowMajor) {
  HostMatrix h{dtype, rows, cols, layout, {}, {}};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  h.f32.resize(rows * cols);
  for (float& v : h.f32) v = dist(*rng);
  if (dtype != DType::kFp32) {
    h.f16.resize(h.f32.size());
    FromFloat(dtype, h.f32.data(), h.f16.data(), h.f32.size());
    h.f32.clear();
  }
  return h;
}

class ResidentOperandsTest : public ::testing::Test {
 protected:
  static ServerOptions Options() {
    ServerOptions o = test::LoopbackCpuServerOptions();
    o.limits.max_resident_bytes = 1 << 20;
    return o;
  }

  void Start(const ServerOptions& options = Options()) {
    auto server = GemmServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = Connect();
  }

  std::unique_ptr<Client> Connect(const std::string& token = "") {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server_->port());
    o.default_timeout = absl::Seconds(60);
    o.bearer_token = token;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(5));
  }

  double Metric(const std::string& name, const std::vector<std::string>& labels = {}) {
    return test::MetricValue(server_->metrics()->Scrape(), name, labels);
  }

  // One request of one problem, and the same problem with every operand's
  // bytes, for the reference check.
  struct Pair {
    v1::GemmRequest sent, checked;
  };
  static Pair MakePair(const Operand& a, const Operand& b, const MatrixView& a_bytes,
                       const MatrixView& b_bytes, const ProblemOptions& options = {},
                       const ProblemOptions& checked_options = {}) {
    Pair p;
    EXPECT_TRUE(AddProblem(&p.sent, a, b, options).ok());
    EXPECT_TRUE(AddProblem(&p.checked, a_bytes, b_bytes, checked_options).ok());
    return p;
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ResidentOperandsTest, ManyRequestsNameOneResidentB) {
  Start();
  std::mt19937 rng(1);
  const HostMatrix b = Random(DType::kBf16, 96, 80, &rng);  // K x N
  auto handle = client_->RegisterMatrix(b.View(), "weights");
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(handle->bytes, 96u * 80 * 2);
  EXPECT_EQ(Metric("gemm_resident_bytes"), 96.0 * 80 * 2);
  EXPECT_EQ(Metric("gemm_resident_matrices"), 1.0);

  // Sent together so that the batcher puts several into one launch.
  std::vector<HostMatrix> as;
  std::vector<Pair> pairs;
  for (int i = 0; i < 40; ++i) {
    as.push_back(Random(DType::kBf16, i % 3 == 0 ? 17 : 32, 96, &rng));
    pairs.push_back(MakePair(as.back().View(), *handle, as.back().View(), b.View()));
  }
  std::vector<std::future<GemmResult>> results;
  for (const Pair& p : pairs) results.push_back(client_->GemmFuture(p.sent));
  for (size_t i = 0; i < pairs.size(); ++i) {
    GemmResult r = results[i].get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_TRUE(test::ResponseMatches(pairs[i].checked, *r)) << i;
  }
  // The bytes sent for B are the handle's, not the matrix's.
  EXPECT_LT(pairs[0].sent.ByteSizeLong(), pairs[0].checked.ByteSizeLong() - 96 * 80 * 2 + 100);
  EXPECT_EQ(Metric("gemm_requests_total", {"method=\"RegisterMatrix\"", "code=\"OK\""}), 1.0);
}

TEST_F(ResidentOperandsTest, ResidentATransposedBAndResidentCOnTheStream) {
  Start();
  std::mt19937 rng(2);
  // A^T stored K x M column-major, B^T stored N x K, C M x N column-major.
  const HostMatrix a = Random(DType::kFp32, 24, 10, &rng, Layout::kColMajor);
  const HostMatrix b32 = Random(DType::kFp32, 12, 24, &rng);
  const HostMatrix c = Random(DType::kFp32, 10, 12, &rng, Layout::kColMajor);
  auto ra = client_->RegisterMatrix(a.View());
  auto rc = client_->RegisterMatrix(c.View());
  ASSERT_TRUE(ra.ok() && rc.ok()) << ra.status() << rc.status();
  ProblemOptions o;
  o.transpose_a = true;
  o.transpose_b = true;
  o.alpha = 0.5;
  o.beta = -2.0;
  o.output_layout = Layout::kColMajor;
  ProblemOptions checked = o;
  o.c = *rc;
  checked.c = c.View();
  Pair pair = MakePair(*ra, b32.View(), a.View(), b32.View(), o, checked);
  pair.sent.set_request_id("r1");
  auto stream = client_->OpenStream();
  auto future = stream->Send(pair.sent);
  ASSERT_TRUE(future.ok()) << future.status();
  GemmResult r = future->get();
  stream->CloseSend();
  EXPECT_TRUE(stream->Finish().ok());
  ASSERT_TRUE(r.ok()) << r.status();
  pair.checked.set_request_id("r1");
  EXPECT_TRUE(test::ResponseMatches(pair.checked, *r));
}

TEST_F(ResidentOperandsTest, ReleasedHandleIsNotFound) {
  Start();
  std::mt19937 rng(3);
  const HostMatrix a = Random(DType::kFp32, 8, 8, &rng), b = Random(DType::kFp32, 8, 8, &rng);
  auto handle = client_->RegisterMatrix(b.View());
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(client_->ReleaseMatrix(*handle).ok());
  EXPECT_EQ(Metric("gemm_resident_bytes"), 0.0);
  v1::GemmRequest request;
  ASSERT_TRUE(AddProblem(&request, a.View(), *handle).ok());
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.handle"));
  EXPECT_EQ(client_->ReleaseMatrix(*handle).code(), absl::StatusCode::kNotFound);
}

TEST_F(ResidentOperandsTest, MismatchedHandleIsInvalidArgumentNamingTheField) {
  Start();
  std::mt19937 rng(4);
  const HostMatrix b = Random(DType::kFp32, 8, 6, &rng);
  auto handle = client_->RegisterMatrix(b.View());
  ASSERT_TRUE(handle.ok());
  // Lie about the shape and the dtype: the client builds the problem from the
  // handle's description, the server checks it against what it stored.
  ResidentHandle wrong_shape = *handle;
  wrong_shape.rows = 6;
  wrong_shape.cols = 8;
  const HostMatrix a6 = Random(DType::kFp32, 4, 6, &rng);
  v1::GemmRequest request;
  ASSERT_TRUE(AddProblem(&request, a6.View(), wrong_shape).ok());
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.handle"));

  ResidentHandle wrong_dtype = *handle;
  wrong_dtype.dtype = DType::kBf16;
  const HostMatrix a16 = Random(DType::kBf16, 4, 8, &rng);
  request.Clear();
  ASSERT_TRUE(AddProblem(&request, a16.View(), wrong_dtype).ok());
  r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.handle"));

  // As A (4 x 8 needed, 8 x 6 stored).
  request.Clear();
  ASSERT_TRUE(AddProblem(&request, ResidentHandle{handle->handle, 4, 8}, b.View()).ok());
  r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].a.handle"));
}

TEST_F(ResidentOperandsTest, OverTheBudgetIsResourceExhaustedAndNotRetried) {
  ServerOptions o = Options();
  o.limits.max_resident_bytes = 1000;
  Start(o);
  std::mt19937 rng(5);
  const HostMatrix m = Random(DType::kFp32, 10, 20, &rng);  // 800 bytes
  auto first = client_->RegisterMatrix(m.View());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = client_->RegisterMatrix(m.View());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("max_resident_bytes"));
  EXPECT_EQ(Metric("gemm_requests_total",
                   {"method=\"RegisterMatrix\"", "code=\"RESOURCE_EXHAUSTED\""}),
            1.0);
  ASSERT_TRUE(client_->ReleaseMatrix(*first).ok());
  EXPECT_TRUE(client_->RegisterMatrix(m.View()).ok());
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->limits().max_resident_bytes(), 1000u);
  EXPECT_EQ(Metric("gemm_resident_limit_bytes"), 1000.0);
}

TEST_F(ResidentOperandsTest, ReleaseWhileRequestsAreInFlight) {
  ServerOptions o = Options();
  o.cpu.concurrent_requests = 1;
  Start(o);
  std::mt19937 rng(6);
  const HostMatrix b = Random(DType::kFp32, 128, 128, &rng);
  auto handle = client_->RegisterMatrix(b.View());
  ASSERT_TRUE(handle.ok());
  std::vector<HostMatrix> as;
  std::vector<Pair> pairs;
  for (int i = 0; i < 30; ++i) {
    as.push_back(Random(DType::kFp32, 128, 128, &rng));
    pairs.push_back(MakePair(as.back().View(), *handle, as.back().View(), b.View()));
  }
  std::vector<std::future<GemmResult>> results;
  for (const Pair& p : pairs) results.push_back(client_->GemmFuture(p.sent));
  ASSERT_TRUE(client_->ReleaseMatrix(*handle).ok());
  int ok = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    GemmResult r = results[i].get();
    if (r.ok()) {
      ++ok;
      EXPECT_TRUE(test::ResponseMatches(pairs[i].checked, *r)) << i;
    } else {
      // Admitted after the release.
      EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << i << ": " << r.status();
    }
  }
  EXPECT_GT(ok, 0);
  // Freed once the last request using it is done.
  EXPECT_EQ(Metric("gemm_resident_matrices"), 0.0);
  EXPECT_EQ(Metric("gemm_resident_bytes"), 0.0);
}

// Over bearer-token auth each caller has its own scope.
TEST_F(ResidentOperandsTest, AnotherCallersHandleIsPermissionDenied) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string tokens = absl::StrCat(tmp ? tmp : "/tmp", "/resident_tokens");
  std::ofstream(tokens) << "alice alice-0123456789abcdef\nbob bob-0123456789abcdef01\n";
  ServerOptions o = Options();
  o.security.auth_tokens_file = tokens;
  Start(o);
  auto alice = Connect("alice-0123456789abcdef");
  auto bob = Connect("bob-0123456789abcdef01");
  std::mt19937 rng(7);
  const HostMatrix a = Random(DType::kFp32, 4, 8, &rng), b = Random(DType::kFp32, 8, 4, &rng);
  auto handle = alice->RegisterMatrix(b.View());
  ASSERT_TRUE(handle.ok()) << handle.status();
  Pair pair = MakePair(a.View(), *handle, a.View(), b.View());

  GemmResult stolen = bob->Gemm(pair.sent);
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied) << stolen.status();
  EXPECT_THAT(std::string(stolen.status().message()), HasSubstr("problems[0].b.handle"));
  EXPECT_EQ(bob->ReleaseMatrix(*handle).code(), absl::StatusCode::kPermissionDenied);

  GemmResult own = alice->Gemm(pair.sent);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_TRUE(test::ResponseMatches(pair.checked, *own));
  EXPECT_TRUE(alice->ReleaseMatrix(*handle).ok());
}

}  // namespace
}  // namespace gemm
