// The server on the CUDA executor, end to end over gRPC: every dtype, layout
// and transpose through our kernels, batching under concurrency (strided and,
// on sm_90, grouped launches), large problems on stream-K / split-K side by
// side, admission by predicted completion, the kernel portfolio (every
// member a tuning table can name, chosen per shape class, and the cublas
// policy), and soaks of mixed, bad and cancelled requests that must leave
// device memory where it started. Skips with a reason where no CUDA device
// is visible (CI); run on the GPU box with the bundled binary (bench/gpu.sh).
#include <cuda_runtime.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/reference_gemm.h"
#include "gemm/v1/gemm.grpc.pb.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/shape_class.h"
#include "kernels/tuning/tuning_table.h"
#include "service/exec/cuda_executor.h"
#include "service/server.h"
#include "service/version.h"
#include "tests/test_util.h"

ABSL_FLAG(double, soak_seconds, 5.0, "how long each soak test runs (issue 5 asks for >= 60)");
ABSL_FLAG(std::string, tuning_table, "kernels/tuning/tables/nvidia_h200.table",
          "the committed tuning table the table tests load (used where its key matches this "
          "process's; the tests say so either way)");

namespace gemm {
namespace {

using test::MakeProblem;
using test::ProblemSpec;
using test::ResponseMatches;

class GpuServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaExecutor::DeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device visible: the CUDA executor is tested on the GPU box";
    StartServer(DefaultOptions());
  }

  // Replaces the server (and the stub) with one started with `o`.
  void StartServer(const ServerOptions& o) {
    if (server_) server_->Shutdown(absl::Seconds(10));
    server_.reset();
    auto s = GemmServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(1 << 30);
    args.SetMaxSendMessageSize(1 << 30);
    stub_ = v1::GemmService::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials(), args));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(10));
  }

  static ServerOptions DefaultOptions() {
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.backend = "cuda";
    o.cuda.calibrate = false;
    return o;
  }

  void SoakLeavesNothingBehind(uint64_t before);

  // One Gemm call in flight; `done` is notified once it has its status.
  struct Call {
    grpc::ClientContext ctx;
    v1::GemmResponse response;
    grpc::Status status;
    absl::Notification done;
  };

  // Starts every request at once (so the batcher sees them together), each
  // with a 120 s deadline. `requests` must outlive the calls.
  std::vector<std::unique_ptr<Call>> StartAll(const std::vector<v1::GemmRequest>& requests) {
    std::vector<std::unique_ptr<Call>> calls;
    for (const v1::GemmRequest& r : requests) {
      calls.push_back(std::make_unique<Call>());
      Call* c = calls.back().get();
      c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      stub_->async()->Gemm(&c->ctx, &r, &c->response, [c](grpc::Status s) {
        c->status = std::move(s);
        c->done.Notify();
      });
    }
    return calls;
  }

  // Sends every request at once and checks every response.
  void SendAllAndCheck(const std::vector<v1::GemmRequest>& requests) {
    SendAllAndCheck(requests, requests);
  }

  // The same, checking response i against checked[i] (requests[i] with the
  // bytes of the resident operands it names by handle).
  void SendAllAndCheck(const std::vector<v1::GemmRequest>& requests,
                       const std::vector<v1::GemmRequest>& checked) {
    std::vector<std::unique_ptr<Call>> calls = StartAll(requests);
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i]->done.WaitForNotification();
      ASSERT_TRUE(calls[i]->status.ok()) << i << ": " << calls[i]->status.error_message();
      EXPECT_EQ(calls[i]->response.backend(), "cuda");
      EXPECT_TRUE(ResponseMatches(checked[i], calls[i]->response)) << i;
    }
  }

  // Stores `m` (rows x cols of `dtype`) with RegisterMatrix; its handle.
  std::string Register(const v1::Matrix& m, uint64_t rows, uint64_t cols, v1::DataType dtype) {
    v1::RegisterMatrixRequest r;
    r.set_dtype(dtype);
    r.set_rows(rows);
    r.set_cols(cols);
    r.set_layout(m.layout());
    r.set_data(m.data());
    grpc::ClientContext ctx;
    v1::RegisterMatrixResponse response;
    grpc::Status st = stub_->RegisterMatrix(&ctx, r, &response);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return response.handle();
  }

  grpc::Status Release(const std::string& handle) {
    v1::ReleaseMatrixRequest r;
    r.set_handle(handle);
    grpc::ClientContext ctx;
    v1::ReleaseMatrixResponse response;
    return stub_->ReleaseMatrix(&ctx, r, &response);
  }

  // Whether our sm_90a kernels (grouped, stream-K) serve this device.
  bool OnHopper() const {
    return server_->backend().devices.front().compute_capability == "9.0";
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<v1::GemmService::Stub> stub_;
};

// Rows [first, first + rows) of `result` against a float64 reference of
// those rows alone: large problems checked at a small fraction of a full
// reference's cost. A not transposed and row-major; D row-major; no C.
::testing::AssertionResult RowsMatch(const v1::GemmProblem& problem, const v1::GemmResult& result,
                                     uint64_t first, uint64_t rows) {
  const GemmProblemRef full = ViewProblem(problem).value();
  const GemmShape& s = full.shape;
  if (s.transpose_a || s.layout_a != Layout::kRowMajor || s.layout_d != Layout::kRowMajor ||
      full.beta != 0.0)
    return ::testing::AssertionFailure() << "RowsMatch needs row-major A and D, no C";
  if (result.data().size() != s.m * s.n * SizeOf(s.output_dtype))
    return ::testing::AssertionFailure() << result.data().size() << " bytes of result";
  GemmProblemRef part = full;
  part.shape.m = rows;
  part.a = MatrixA(part.shape, static_cast<const char*>(full.a.data) +
                                   first * s.k * SizeOf(s.input_dtype));
  const MatrixRef got{result.data().data() + first * s.n * SizeOf(s.output_dtype), rows, s.n,
                      Layout::kRowMajor, s.output_dtype};
  const double err = RelativeError(ReadMatrix(got), ReferenceGemm(part));
  const double tol = Tolerance(s.input_dtype, s.output_dtype, s.allow_tf32);
  if (!(err <= tol))
    return ::testing::AssertionFailure()
           << "rows " << first << ".." << first + rows << ": relative error " << err << " over "
           << tol;
  return ::testing::AssertionSuccess();
}

v1::GemmRequest Request(const ProblemSpec& spec, std::mt19937* rng, int id) {
  v1::GemmRequest r;
  r.set_request_id(std::to_string(id));
  *r.add_problems() = MakeProblem(spec, rng);
  return r;
}

TEST_F(GpuServerTest, EveryDtypeLayoutAndTransposeIsRight) {
  std::mt19937 rng(11);
  const uint64_t sizes[] = {1, 7, 64, 127, 129, 1000};
  std::uniform_int_distribution<int> pick(0, 5);
  std::vector<v1::GemmRequest> requests;
  int id = 0;
  struct Types {
    DType in, out;
    bool tf32;
  };
  const Types types[] = {{DType::kBf16, DType::kBf16, false}, {DType::kBf16, DType::kFp32, false},
                         {DType::kFp16, DType::kFp16, false}, {DType::kFp16, DType::kFp32, false},
                         {DType::kFp32, DType::kFp32, true},  {DType::kFp32, DType::kFp32, false}};
  for (const Types& t : types) {
    for (int trans = 0; trans < 4; ++trans) {
      for (int layouts = 0; layouts < 4; ++layouts) {
        ProblemSpec s;
        s.m = sizes[pick(rng)];
        s.n = sizes[pick(rng)];
        s.k = sizes[pick(rng)];
        s.input = t.in;
        s.output = t.out;
        s.allow_tf32 = t.tf32;
        s.transpose_a = trans & 1;
        s.transpose_b = trans & 2;
        s.layout_a = layouts & 1 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_b = layouts & 2 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_d = layouts == 3 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_c = layouts == 1 ? Layout::kColMajor : Layout::kRowMajor;
        if (layouts >= 2) {
          s.alpha = 0.5;
          s.beta = -1.25;
        }
        requests.push_back(Request(s, &rng, id++));
      }
    }
  }
  SendAllAndCheck(requests);
}

// bf16/fp16 problems whose leading dimensions leave rows off the 16-byte grid
// (m, n or k odd, in every layout), with --cuda_copy_unaligned_operands (the
// default) and no calibration, so nothing is priced: the operands are copied
// aligned on the lane's stream and the problems run on the Hopper kernel,
// counted under their own "_padded" label.
TEST_F(GpuServerTest, UnalignedSixteenBitOperandsRunOnTheTensorCoresWhenCopied) {
  ServerOptions o = DefaultOptions();
  o.cuda.copy_unaligned_operands = true;
  o.cuda.grouped_launches = false;  // single and strided launches, which copy
  StartServer(o);
  std::mt19937 rng(16);
  std::vector<v1::GemmRequest> requests;
  int id = 0;
  const uint64_t shapes[][3] = {{77, 130, 93}, {300, 501, 70}, {129, 64, 1001}, {1, 9, 3}};
  for (DType t : {DType::kBf16, DType::kFp16}) {
    for (const auto& shape : shapes) {
      for (int layouts = 0; layouts < 4; ++layouts) {
        ProblemSpec s;
        s.m = shape[0];
        s.n = shape[1];
        s.k = shape[2];
        s.input = t;
        s.output = layouts == 3 ? DType::kFp32 : t;
        s.layout_a = layouts & 1 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_b = layouts & 2 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_d = layouts == 2 ? Layout::kColMajor : Layout::kRowMajor;
        s.layout_c = s.layout_d;
        if (layouts == 1) {
          s.alpha = 0.5;
          s.beta = -1.25;
        }
        requests.push_back(Request(s, &rng, id++));
      }
    }
  }
  SendAllAndCheck(requests);
  const std::string metrics = server_->metrics()->Scrape();
  EXPECT_NE(metrics.find("sm90_wgmma_padded\""), std::string::npos) << metrics;
}

TEST_F(GpuServerTest, IdenticalRequestsShareStridedBatchedLaunches) {
  std::mt19937 rng(12);
  ProblemSpec s;
  s.m = s.n = s.k = 128;
  s.input = DType::kBf16;
  std::vector<v1::GemmRequest> requests;
  for (int i = 0; i < 512; ++i) requests.push_back(Request(s, &rng, i));
  SendAllAndCheck(requests);
  const std::string metrics = server_->metrics()->Scrape();
  EXPECT_NE(metrics.find("kernel_kind=\"strided_batched/"), std::string::npos) << metrics;
}

TEST_F(GpuServerTest, MixedShapesInOneRequest) {
  std::mt19937 rng(13);
  v1::GemmRequest r;
  r.set_request_id("mixed");
  for (uint64_t m : {1u, 33u, 256u, 300u}) {
    ProblemSpec s;
    s.m = m;
    s.n = 2 * m + 1;
    s.k = 96;
    s.input = DType::kFp16;
    s.output = DType::kFp32;
    *r.add_problems() = MakeProblem(s, &rng);
  }
  SendAllAndCheck({r});
}

// One request of many shapes of one type class: one grouped launch (the
// grouped kernel on sm_90, whose descriptors travel with the operands), with
// alpha, beta and C on some members.
TEST_F(GpuServerTest, OneRequestOfMixedShapesIsOneGroupedLaunch) {
  std::mt19937 rng(15);
  std::uniform_int_distribution<int> eighths(1, 48);
  v1::GemmRequest r;
  r.set_request_id("grouped");
  for (int i = 0; i < 24; ++i) {
    ProblemSpec s;
    // All M different, so none share a strided launch; multiples of 8, so
    // every operand suits TMA.
    s.m = 8 * (2 * i + 1);
    s.n = 8 * eighths(rng);
    s.k = 8 * eighths(rng);
    s.input = DType::kBf16;
    s.output = DType::kFp32;
    s.transpose_b = true;
    s.layout_b = Layout::kRowMajor;  // B^T row-major: K-major, like A
    if (i % 3 == 0) {
      s.alpha = 0.5;
      s.beta = 2.0;
    }
    *r.add_problems() = MakeProblem(s, &rng);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GemmResponse response;
  const grpc::Status st = stub_->Gemm(&ctx, r, &response);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(ResponseMatches(r, response));
  if (OnHopper()) {
    EXPECT_EQ(response.kernel().rfind("sm90_tma_wgmma_grouped_bf16", 0), 0u) << response.kernel();
    EXPECT_EQ(response.kernel().find(','), std::string::npos) << "one launch: " << response.kernel();
  }
}

// Many requests of mixed shapes, dtypes, layouts and transposes at once: the
// batcher forms strided, grouped and single launches from them (the grouped
// kernel where a group's layouts agree and every operand suits TMA, a loop
// of launches otherwise), and every result is right.
TEST_F(GpuServerTest, ConcurrentMixedShapesFormGroupedLaunches) {
  std::mt19937 rng(16);
  const uint64_t sizes[] = {8, 24, 64, 72, 128, 136, 200, 256, 7, 33};  // last two unaligned
  std::uniform_int_distribution<int> pick(0, 9), aligned(0, 7), coin(0, 1), type(0, 4);
  struct Types {
    DType in, out;
    bool tf32;
  };
  const Types types[] = {{DType::kBf16, DType::kBf16, false}, {DType::kBf16, DType::kFp32, false},
                         {DType::kFp16, DType::kFp16, false}, {DType::kFp32, DType::kFp32, true},
                         {DType::kFp32, DType::kFp32, false}};
  std::vector<v1::GemmRequest> requests;
  for (int i = 0; i < 400; ++i) {
    const Types& t = types[type(rng)];
    ProblemSpec s;
    const bool odd = i % 10 == 9;  // a few shapes the grouped kernel cannot take
    s.m = sizes[odd ? pick(rng) : aligned(rng)];
    s.n = sizes[odd ? pick(rng) : aligned(rng)];
    s.k = sizes[odd ? pick(rng) : aligned(rng)];
    s.input = t.in;
    s.output = t.out;
    s.allow_tf32 = t.tf32;
    // Mostly one layout combination, so that groups agree; some others.
    s.transpose_b = i % 7 != 0;
    s.layout_a = i % 11 == 0 ? Layout::kColMajor : Layout::kRowMajor;
    if (i % 5 == 0) {
      s.alpha = -1.5;
      s.beta = 0.25;
      s.layout_c = coin(rng) ? Layout::kColMajor : Layout::kRowMajor;
    }
    requests.push_back(Request(s, &rng, i));
  }
  SendAllAndCheck(requests);
  const std::string metrics = server_->metrics()->Scrape();
  if (OnHopper()) {
    EXPECT_NE(metrics.find("kernel_kind=\"grouped/sm90_wgmma"), std::string::npos) << metrics;
  }
}

// Large single problems that the kernel's heuristic runs as stream-K or
// split-K, several at once from concurrent requests: those launches spin on
// each other's partial tiles, so the executor runs them one after another on
// one stream. They must all finish (a deadlock would hang here until the
// calls' deadline) with right results, beside small requests on the lanes.
TEST_F(GpuServerTest, LargeProblemsRunReducingSchedulesOneAtATime) {
  std::mt19937 rng(17);
  ProblemSpec big;  // 32 tiles of 128x256 and 128 k-blocks: far under one wave
  big.m = 1024;
  big.n = 1024;
  big.k = 8192;
  big.input = DType::kBf16;
  big.transpose_b = true;
  ProblemSpec small;
  small.m = small.n = small.k = 96;
  small.input = DType::kFp16;
  std::vector<v1::GemmRequest> requests;
  for (int i = 0; i < 12; ++i) requests.push_back(Request(i % 3 == 2 ? small : big, &rng, i));

  std::vector<std::unique_ptr<Call>> calls = StartAll(requests);
  int reducing = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    calls[i]->done.WaitForNotification();
    ASSERT_TRUE(calls[i]->status.ok()) << i << ": " << calls[i]->status.error_message();
    const v1::GemmResponse& response = calls[i]->response;
    if (i % 3 == 2) {
      EXPECT_TRUE(ResponseMatches(requests[i], response)) << i;
      continue;
    }
    for (uint64_t first : {uint64_t{0}, uint64_t{509}, big.m - 8})
      EXPECT_TRUE(RowsMatch(requests[i].problems(0), response.results(0), first, 8)) << i;
    reducing += absl::StrContains(response.kernel(), "_streamk") ||
                absl::StrContains(response.kernel(), "_splitk");
  }
  if (OnHopper()) {
    EXPECT_EQ(reducing, 8) << "the heuristic should reduce these shapes";
  }
}

// With calibration, the server predicts run times and refuses at once a
// request that cannot finish before its deadline, instead of queueing it to
// expire; the same request with time to spare runs. Operands are resident so
// that the call itself is quick.
TEST_F(GpuServerTest, RequestsPredictedToMissTheirDeadlineAreRefusedAtOnce) {
  ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.backend = "cuda";
  o.cuda.calibrate = true;
  ASSERT_NO_FATAL_FAILURE(StartServer(o));
  std::mt19937 rng(18);
  // Strict fp32 runs the portable kernel: 8192^3 is over a TFLOP, tens of
  // milliseconds even at the calibrated peak, whose optimism (admission
  // predicts from peak rates) must not let it through. At 4096^3 the
  // prediction came to under 5 ms on the H200 and the request was admitted,
  // then expired (2026-11-29).
  ProblemSpec s;
  s.m = s.n = s.k = 8192;
  s.input = DType::kFp32;
  v1::GemmRequest inline_request = Request(s, &rng, 0);
  const v1::GemmProblem& p = inline_request.problems(0);
  const std::string a = Register(p.a(), s.m, s.k, v1::DATA_TYPE_FP32);
  const std::string b = Register(p.b(), s.k, s.n, v1::DATA_TYPE_FP32);
  v1::GemmRequest request = inline_request;
  request.mutable_problems(0)->mutable_a()->set_handle(a);
  request.mutable_problems(0)->mutable_b()->set_handle(b);

  {
    grpc::ClientContext ctx;
    // Well over a loopback call, well under the prediction (the kernel alone
    // at peak is ~20 ms, and copying the 256 MiB result out ~5 ms).
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(5));
    v1::GemmResponse response;
    const grpc::Status st = stub_->Gemm(&ctx, request, &response);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "predicted")) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::GemmResponse response;
    const grpc::Status st = stub_->Gemm(&ctx, request, &response);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_TRUE(RowsMatch(p, response.results(0), 1000, 4)) << "with resident operands";
  }
  for (const std::string& h : {a, b}) EXPECT_TRUE(Release(h).ok());
}

// Resident operands in device memory: one registered B shared by many
// requests (strided-batched launches broadcast it), a resident A (transposed,
// column-major) and C, mixed with requests that carry every operand. Each
// result is checked against the same problem with the resident bytes inline.
TEST_F(GpuServerTest, ResidentOperandsAreReadInPlace) {
  std::mt19937 rng(14);
  ProblemSpec s;
  s.m = 128;
  s.n = 256;
  s.k = 192;
  s.input = DType::kBf16;
  s.transpose_b = true;
  s.layout_b = Layout::kColMajor;
  const v1::GemmProblem weights = MakeProblem(s, &rng);
  const std::string b = Register(weights.b(), s.n, s.k, v1::DATA_TYPE_BF16);
  ASSERT_FALSE(b.empty());

  ProblemSpec t;  // fp16, A^T col-major resident, C resident in D's layout
  t.m = 96;
  t.n = 80;
  t.k = 64;
  t.input = DType::kFp16;
  t.output = DType::kFp32;
  t.transpose_a = true;
  t.layout_a = Layout::kColMajor;
  t.layout_c = t.layout_d = Layout::kColMajor;
  t.beta = 0.75;
  const v1::GemmProblem fixed = MakeProblem(t, &rng);
  const std::string a = Register(fixed.a(), t.k, t.m, v1::DATA_TYPE_FP16);
  const std::string c = Register(fixed.c(), t.m, t.n, v1::DATA_TYPE_FP32);

  std::vector<v1::GemmRequest> sent, checked;
  for (int i = 0; i < 300; ++i) {
    v1::GemmRequest r;
    r.set_request_id(std::to_string(i));
    v1::GemmProblem p;
    if (i % 10 == 9) {  // resident A and C
      p = MakeProblem(t, &rng);
      *p.mutable_a() = fixed.a();
      *p.mutable_c() = fixed.c();
    } else {  // resident B; every 7th of another M, so a launch of its own
      ProblemSpec si = s;
      if (i % 7 == 0) si.m = 1 + i;
      p = MakeProblem(si, &rng);
      *p.mutable_b() = weights.b();
    }
    *r.add_problems() = p;
    if (i % 25 == 24) *r.add_problems() = MakeProblem(s, &rng);  // all inline
    checked.push_back(r);
    v1::GemmProblem* q = r.mutable_problems(0);
    if (i % 10 == 9) {
      q->mutable_a()->set_handle(a);
      q->mutable_c()->set_handle(c);
    } else {
      q->mutable_b()->set_handle(b);
    }
    sent.push_back(std::move(r));
  }
  SendAllAndCheck(sent, checked);
  std::string metrics = server_->metrics()->Scrape();
  EXPECT_NE(metrics.find("kernel_kind=\"strided_batched/"), std::string::npos) << metrics;
  EXPECT_GT(test::MetricValue(metrics, "gemm_resident_bytes"), 0.0);

  for (const std::string& h : {a, b, c}) EXPECT_TRUE(Release(h).ok());
  metrics = server_->metrics()->Scrape();
  EXPECT_EQ(test::MetricValue(metrics, "gemm_resident_bytes"), 0.0);
  grpc::ClientContext ctx;
  v1::GemmResponse response;
  EXPECT_EQ(stub_->Gemm(&ctx, sent[0], &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

// Chunked transfers on the CUDA backend: a request's operands uploaded in
// chunks (transient: host memory, staged once) and its results kept and
// downloaded, for every dtype with a transposed and column-major mix, checked
// against the reference; a kept upload lands in device memory
// (CudaExecutor::AllocateResident, written chunk by chunk) and reads back
// byte for byte.
TEST_F(GpuServerTest, ChunkedOperandsAndResultsOnTheCudaBackend) {
  ClientOptions o;
  o.target = "127.0.0.1:" + std::to_string(server_->port());
  o.chunked_threshold_bytes = 1;  // everything in chunks
  o.chunk_bytes = 4096 + 7;       // chunks that do not divide the matrices
  o.transfer_channels = 3;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status();
  std::mt19937 rng(29);
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    ProblemSpec s;
    s.m = 200;
    s.n = 136;
    s.k = 96;
    s.input = t;
    s.transpose_a = true;
    s.layout_b = Layout::kColMajor;
    s.allow_tf32 = t == DType::kFp32;
    v1::GemmRequest request = Request(s, &rng, 0);
    auto response = (*client)->Gemm(request);
    ASSERT_TRUE(response.ok()) << DTypeName(t) << ": " << response.status();
    EXPECT_TRUE(test::ResponseMatches(request, *response)) << DTypeName(t);
  }
  // A matrix uploaded to the device reads back byte for byte.
  std::vector<float> m(333 * 77);
  for (float& v : m) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  auto handle = (*client)->UploadMatrix(MatrixView(m.data(), 333, 77));
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::vector<float> back(m.size(), -7.0f);
  ASSERT_TRUE((*client)->DownloadMatrix(handle->handle, back.data(), back.size() * 4).ok());
  EXPECT_EQ(back, m);
  EXPECT_TRUE((*client)->ReleaseMatrix(*handle).ok());
}

// Mixed good, bad and cancelled requests for --soak_seconds; every good
// result right, and device memory back to where it started once the pool's
// cache is released (`before`: bytes in use before the server started).
void GpuServerTest::SoakLeavesNothingBehind(uint64_t before) {
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_soak_seconds));
  std::atomic<int> good{0}, bad{0}, cancelled{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::uniform_int_distribution<int> kind(0, 9), size(1, 300);
      int id = 0;
      while (absl::Now() < end) {
        ProblemSpec s;
        s.m = size(rng);
        s.n = size(rng);
        s.k = size(rng);
        s.input = kind(rng) % 2 ? DType::kBf16 : DType::kFp16;
        v1::GemmRequest r = Request(s, &rng, id++);
        const int k = kind(rng);
        if (k == 0) r.mutable_problems(0)->mutable_a()->mutable_data()->pop_back();  // bad
        grpc::ClientContext ctx;
        if (k == 1) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(50));
        v1::GemmResponse response;
        grpc::Status st = stub_->Gemm(&ctx, r, &response);
        if (k == 0) {
          bad += st.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
        } else if (st.ok()) {
          ++good;
          if (!ResponseMatches(r, response)) ++wrong;
        } else {
          cancelled += st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(good.load(), 0);
  EXPECT_GT(bad.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  std::printf("soak: %d good, %d bad, %d expired\n", good.load(), bad.load(), cancelled.load());
  server_->Shutdown(absl::Seconds(10));
  server_.reset();
  auto after = CudaExecutor::DeviceBytesInUse(0);
  ASSERT_TRUE(after.ok());
  // The executor's own state (streams, pinned host memory) is gone with it;
  // allow 64 MiB for the driver's context bookkeeping.
  EXPECT_LE(*after, before + (64u << 20)) << "before " << before << " after " << *after;
}

TEST_F(GpuServerTest, SoakLeavesNothingBehind) {
  auto before = CudaExecutor::DeviceBytesInUse(0);
  ASSERT_TRUE(before.ok()) << before.status();
  SoakLeavesNothingBehind(*before);
}

// ---- The kernel portfolio through the server ----

namespace gk = gemm_kernels;
namespace gt = gemm_kernels::tuning;

// This process's tuning-table key, as the executor computes it.
gt::TableKey ProcessKey(const std::string& gpu_name, gk::cublas::CublasContext& ctx) {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return {gpu_name, std::to_string(driver), std::to_string(runtime), std::to_string(ctx.version()),
          kVersion};
}

// The kernel's view of `s` with placeholder device pointers (aligned like
// the executor's buffers), for computing a class or asking cuBLASLt for
// algorithms: neither reads the memory.
gk::GemmArguments ArgsOf(const ProblemSpec& s) {
  auto* base = reinterpret_cast<const unsigned char*>(uintptr_t{1} << 20);
  auto kernel_layout = [](Layout stored, bool transposed) {
    return (stored == Layout::kRowMajor) != transposed ? gk::Layout::kRowMajor
                                                       : gk::Layout::kColMajor;
  };
  gk::GemmArguments a;
  a.m = static_cast<int64_t>(s.m);
  a.n = static_cast<int64_t>(s.n);
  a.k = static_cast<int64_t>(s.k);
  const DType out = s.output.value_or(s.input);
  const bool a_row = kernel_layout(s.layout_a, s.transpose_a) == gk::Layout::kRowMajor;
  const bool b_row = kernel_layout(s.layout_b, s.transpose_b) == gk::Layout::kRowMajor;
  a.a = {base, s.input, kernel_layout(s.layout_a, s.transpose_a), a_row ? a.k : a.m, 0};
  a.b = {base + (uintptr_t{1} << 28), s.input, kernel_layout(s.layout_b, s.transpose_b),
         b_row ? a.n : a.k, 0};
  a.d = {base + (uintptr_t{2} << 28), out, s.layout_d,
         s.layout_d == Layout::kRowMajor ? a.n : a.m, 0};
  a.c = a.d;
  a.allow_tf32 = s.allow_tf32;
  return a;
}

ProblemSpec Bf16Nt(uint64_t m, uint64_t n, uint64_t k) {
  ProblemSpec s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.input = DType::kBf16;
  s.output = DType::kBf16;
  s.transpose_b = true;
  return s;
}

gt::CandidateId Member(const std::string& text) {
  absl::StatusOr<gt::CandidateId> c = gt::ParseCandidate(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : gt::CandidateId::Heuristic();
}

// Puts `choice` for the class of `args` both with its rows on the L2's
// sectors and off them (where the executor's buffers put the operands is
// its own business).
void PutBothAlignments(gt::TuningTable* table, gt::ShapeClass c, const gt::CandidateId& choice) {
  for (bool aligned : {true, false}) {
    c.sector_aligned = aligned;
    ASSERT_TRUE(table->Put({c, choice, 1, 1, 1}).ok());
  }
}

std::string TempFile(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

class GpuPortfolioTest : public GpuServerTest {
 protected:
  struct Case {
    std::string name;
    ProblemSpec spec;
    gt::CandidateId member;
    // What the response's kernel must contain.
    std::string kernel;
    // Check only these rows against the reference (0: all).
    uint64_t check_rows = 0;
  };

  void SetUp() override {
    GpuServerTest::SetUp();
    if (IsSkipped()) return;
    if (!OnHopper()) GTEST_SKIP() << "the portfolio's own members are sm_90a kernels";
    auto ctx = gk::cublas::CublasContext::Create(nullptr, {});
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = *std::move(ctx);
    key_ = ProcessKey(server_->backend().devices.front().name, *ctx_);
  }
  void TearDown() override {
    GpuServerTest::TearDown();
    ctx_.reset();
  }

  // One single-launch case per member a table can name, each its own class.
  std::vector<Case> SingleCases() {
    std::vector<Case> cases;
    cases.push_back({"ours forced 128x128 data-parallel", Bf16Nt(512, 512, 512),
                     Member("ours/tile=128x128/schedule=data_parallel"), "128x128"});
    // Big enough for the reducing stream (the executor's reducing_min_flops).
    cases.push_back({"ours forced stream-K", Bf16Nt(2048, 2048, 4096),
                     Member("ours/tile=128x256/schedule=stream_k"), "_streamk", 64});
    cases.push_back({"cublas_gemm_ex", Bf16Nt(384, 384, 384), Member("cublas_gemm_ex"),
                     "cublas_gemm_ex"});
    ProblemSpec f16 = Bf16Nt(256, 512, 128);
    f16.input = DType::kFp16;
    f16.output = DType::kFp32;
    cases.push_back({"cublas_gemm_ex fp16->fp32", f16, Member("cublas_gemm_ex"), "cublas_gemm_ex"});
    ProblemSpec strict = Bf16Nt(200, 136, 64);
    strict.input = DType::kFp32;
    strict.output = DType::kFp32;
    cases.push_back({"cublas_gemm_ex strict fp32", strict, Member("cublas_gemm_ex"),
                     "cublas_gemm_ex"});
    ProblemSpec lt = Bf16Nt(640, 384, 256);
    auto algos = gk::cublas::CublasGemm::LtAlgorithms(*ctx_, ArgsOf(lt), 1);
    EXPECT_TRUE(algos.ok() && !algos->empty()) << "cuBLASLt offers no algorithm";
    if (algos.ok() && !algos->empty()) {
      gt::CandidateId c;
      c.family = gt::CandidateFamily::kCublasLt;
      c.lt = algos->front();
      cases.push_back({"cublaslt", lt, c, "cublaslt/algo="});
    }
    ProblemSpec tf32 = Bf16Nt(256, 256, 256);
    tf32.input = DType::kFp32;
    tf32.output = DType::kFp32;
    tf32.allow_tf32 = true;
    cases.push_back({"cublas_gemm_ex tf32", tf32, Member("cublas_gemm_ex"), "cublas_gemm_ex"});
    return cases;
  }

  void StartWithTable(const gt::TuningTable& table, gpu::KernelPolicy policy) {
    const std::string path = TempFile("portfolio.table");
    ASSERT_TRUE(gt::SaveTuningTable(table, path).ok());
    auto parsed = gt::ReadTuningTable(path);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ServerOptions o = DefaultOptions();
    o.cuda.portfolio.policy = policy;
    o.cuda.portfolio.table = std::make_shared<const gt::TuningTable>(*std::move(parsed));
    o.cuda.portfolio.table_path = path;
    StartServer(o);
  }

  // Sends `request`, checks its result (all rows, or `rows` at each end) and
  // that its kernel contains `kernel` (and, where given, not `not_kernel`).
  void CheckOne(const v1::GemmRequest& request, const std::string& kernel, uint64_t rows,
                const std::string& what, const std::string& not_kernel = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::GemmResponse response;
    grpc::Status st = stub_->Gemm(&ctx, request, &response);
    ASSERT_TRUE(st.ok()) << what << ": " << st.error_message();
    EXPECT_TRUE(absl::StrContains(response.kernel(), kernel))
        << what << ": kernel " << response.kernel() << ", want " << kernel;
    if (!not_kernel.empty()) {
      EXPECT_FALSE(absl::StrContains(response.kernel(), not_kernel))
          << what << ": kernel " << response.kernel() << " should not be " << not_kernel;
    }
    if (rows == 0) {
      EXPECT_TRUE(ResponseMatches(request, response)) << what;
    } else {
      const uint64_t m = request.problems(0).m();
      EXPECT_TRUE(RowsMatch(request.problems(0), response.results(0), 0, rows)) << what;
      EXPECT_TRUE(RowsMatch(request.problems(0), response.results(0), m - rows, rows)) << what;
    }
  }

  std::unique_ptr<gk::cublas::CublasContext> ctx_;
  gt::TableKey key_;
};

// A table under this process's key that names every member a table can
// name, each for its own class: every response right and naming its member;
// the launches metric carries each family.
TEST_F(GpuPortfolioTest, EveryMemberATableNamesIsRightThroughTheServer) {
  gt::TuningTable table(key_, 4);
  const std::vector<Case> cases = SingleCases();
  for (const Case& c : cases) PutBothAlignments(&table, gt::ClassOf(ArgsOf(c.spec), 4), c.member);
  // Identical small problems batch into strided launches of any count: every
  // batch bucket of their class goes to cuBLAS's strided-batched form.
  const ProblemSpec small = Bf16Nt(96, 96, 96);
  for (int b = 0; gt::BucketUpperEdge(b, 4) <= 1024; ++b) {
    gt::ShapeClass c = gt::ClassOf(ArgsOf(small), 4);
    c.batch = gt::BucketUpperEdge(b, 4);
    PutBothAlignments(&table, c, Member(c.batch > 1 ? "cublas_strided_batched" : "cublas_gemm_ex"));
  }
  // One request of mixed shapes is one grouped launch.
  std::vector<ProblemSpec> members;
  std::vector<gk::GemmArguments> member_args;
  for (int i = 0; i < 12; ++i) {
    members.push_back(Bf16Nt(8 * (2 * i + 1), 16 * (i % 5 + 1), 32 * (i % 3 + 1)));
    member_args.push_back(ArgsOf(members.back()));
  }
  auto grouped = gt::GroupedClassOf(member_args, 4);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  PutBothAlignments(&table, *grouped, Member("cublas_grouped"));
  StartWithTable(table, gpu::KernelPolicy::kTable);
  bool described = false;
  for (const std::string& line : server_->backend().kernels)
    described |= absl::StrContains(line, "kernel policy table; tuning table ");
  EXPECT_TRUE(described) << "GetServerInfo's kernels do not name the table";

  std::mt19937 rng(31);
  int id = 0;
  for (const Case& c : cases) CheckOne(Request(c.spec, &rng, id++), c.kernel, c.check_rows, c.name);
  std::vector<v1::GemmRequest> batch;
  for (int i = 0; i < 256; ++i) batch.push_back(Request(small, &rng, id++));
  SendAllAndCheck(batch);
  v1::GemmRequest group;
  group.set_request_id("grouped");
  for (const ProblemSpec& m : members) *group.add_problems() = MakeProblem(m, &rng);
  CheckOne(group, "cublas_grouped", 0, "cublas_grouped");

  const std::string metrics = server_->metrics()->Scrape();
  for (const char* label : {"single/sm90_wgmma", "single/cublas_gemm_ex", "single/cublaslt",
                            "strided_batched/cublas_strided_batched", "grouped/cublas_grouped"}) {
    EXPECT_NE(metrics.find(absl::StrCat("kernel_kind=\"", label, "\"")), std::string::npos)
        << label;
  }
}

// Members that cannot run the concrete problem fall back to the heuristic
// (right results, our kernel named); deterministic requests never take the
// table's choice.
TEST_F(GpuPortfolioTest, FallbacksAndDeterministicRequestsRunOurKernels) {
  gt::TuningTable table(key_, 4);
  // cublas_grouped needs D's type to equal the inputs': bf16 -> fp32 falls back.
  std::vector<ProblemSpec> members;
  std::vector<gk::GemmArguments> member_args;
  for (int i = 0; i < 6; ++i) {
    members.push_back(Bf16Nt(8 * (2 * i + 1), 64, 64));
    members.back().output = DType::kFp32;
    member_args.push_back(ArgsOf(members.back()));
  }
  auto grouped = gt::GroupedClassOf(member_args, 4);
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  PutBothAlignments(&table, *grouped, Member("cublas_grouped"));
  const ProblemSpec dense = Bf16Nt(384, 384, 384);
  PutBothAlignments(&table, gt::ClassOf(ArgsOf(dense), 4), Member("cublas_gemm_ex"));
  StartWithTable(table, gpu::KernelPolicy::kTable);

  std::mt19937 rng(32);
  v1::GemmRequest group;
  group.set_request_id("grouped fallback");
  for (const ProblemSpec& m : members) *group.add_problems() = MakeProblem(m, &rng);
  // Our grouped launch (the grouped kernel, or its loop of single launches).
  CheckOne(group, "", 0, "cublas_grouped with fp32 D", "cublas");

  v1::GemmRequest det = Request(dense, &rng, 1);
  det.set_deterministic(true);
  CheckOne(det, "sm90_tma_wgmma", 0, "deterministic request under a cuBLAS entry", "cublas");
  CheckOne(Request(dense, &rng, 2), "cublas_gemm_ex", 0, "the same class, not deterministic");
}

// --kernel_policy=cublas: single, strided and grouped launches through cuBLAS.
TEST_F(GpuPortfolioTest, CublasPolicyRunsEveryLaunchThroughCublas) {
  ServerOptions o = DefaultOptions();
  o.cuda.portfolio.policy = gpu::KernelPolicy::kCublas;
  StartServer(o);
  std::mt19937 rng(33);
  CheckOne(Request(Bf16Nt(300, 200, 100), &rng, 0), "cublas_gemm_ex", 0, "single");
  std::vector<v1::GemmRequest> batch;
  for (int i = 0; i < 128; ++i) batch.push_back(Request(Bf16Nt(64, 64, 64), &rng, i + 1));
  SendAllAndCheck(batch);
  v1::GemmRequest group;
  for (int i = 0; i < 8; ++i) *group.add_problems() = MakeProblem(Bf16Nt(8 * (i + 1), 72, 40), &rng);
  CheckOne(group, "cublas_grouped", 0, "grouped");
  const std::string metrics = server_->metrics()->Scrape();
  EXPECT_NE(metrics.find("kernel_kind=\"strided_batched/cublas_strided_batched\""),
            std::string::npos);
}

// The committed table for this GPU model: used where its key matches this
// process's (then its dense bf16 4096 class runs the table's member), else
// ignored with the field named, and the heuristic runs.
TEST_F(GpuPortfolioTest, CommittedTableIsUsedOrIgnoredByKey) {
  auto parsed = gt::ReadTuningTable(absl::GetFlag(FLAGS_tuning_table));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string mismatch = gt::KeyMismatch(parsed->key(), key_);
  ServerOptions o = DefaultOptions();
  o.cuda.portfolio.table = std::make_shared<const gt::TuningTable>(*parsed);
  o.cuda.portfolio.table_path = absl::GetFlag(FLAGS_tuning_table);
  StartServer(o);
  std::string line;
  for (const std::string& l : server_->backend().kernels)
    if (absl::StrContains(l, "kernel policy")) line = l;
  std::printf("committed table: %s\n", line.c_str());
  const ProblemSpec dense = Bf16Nt(4096, 4096, 4096);
  const gt::CandidateId expected =
      parsed->Choose(gt::ClassOf(ArgsOf(dense), parsed->buckets_per_octave()));
  std::mt19937 rng(34);
  if (!mismatch.empty()) {
    EXPECT_TRUE(absl::StrContains(line, "ignored: made for " + mismatch)) << line;
    CheckOne(Request(dense, &rng, 0), "sm90_tma_wgmma", 16, "table ignored");
    return;
  }
  EXPECT_TRUE(absl::StrContains(line, "entries)")) << line;
  std::string kernel = "sm90_tma_wgmma";
  if (expected.family == gt::CandidateFamily::kCublasLt) kernel = "cublaslt/";
  if (expected.family == gt::CandidateFamily::kCublasGemmEx) kernel = "cublas_gemm_ex";
  CheckOne(Request(dense, &rng, 0), kernel, 16, "dense bf16 4096 under the committed table");
}

// The soak under the cublas policy and under the committed table: cuBLAS's
// handles and workspaces go with the server. A first server loads cuBLAS's
// modules into the context, which stay loaded, before the measurement.
TEST_F(GpuPortfolioTest, SoakUnderCublasPolicyLeavesNothingBehind) {
  ServerOptions o = DefaultOptions();
  o.cuda.portfolio.policy = gpu::KernelPolicy::kCublas;
  StartServer(o);
  std::mt19937 rng(35);
  for (DType t : {DType::kBf16, DType::kFp16}) {
    ProblemSpec s = Bf16Nt(100, 120, 140);
    s.input = t;
    s.output.reset();
    SendAllAndCheck({Request(s, &rng, 0), Request(s, &rng, 1)});
  }
  server_->Shutdown(absl::Seconds(10));
  server_.reset();
  auto before = CudaExecutor::DeviceBytesInUse(0);
  ASSERT_TRUE(before.ok()) << before.status();
  StartServer(o);
  SoakLeavesNothingBehind(*before);
}
}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  return RUN_ALL_TESTS();
}
