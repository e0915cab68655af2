// FP8 on the CUDA backend, end to end through the real server and the C++
// client: every format pair, scale mode, transpose, stored layout and output
// type, alpha/beta with C, odd shapes and K tails (operands off the 16-byte
// grid run from K-major copies), same-shape requests in strided-batched
// launches, FP8 members beside a grouped launch, deterministic FP8, the
// refusals by field, and a short soak of FP8 mixed with bf16. Each result is
// checked against the float64 product of the dequantized operands. Skips
// where no CUDA device is visible (CI); on a GPU without sm_90a it checks
// that FP8 is refused by field.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/gemm_client.h"
#include "client/matrix_view.h"
#include "common/fp8.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/shape_class.h"
#include "kernels/tuning/tuning_table.h"
#include "service/exec/cuda_executor.h"
#include "service/observe/metrics.h"
#include "service/server.h"
#include "service/version.h"
#include "tests/fp8_test_util.h"
#include "tests/test_util.h"

ABSL_FLAG(double, fp8_soak_seconds, 5.0, "how long the FP8 soak runs");

namespace gemm {
namespace {

using ::testing::HasSubstr;
using test::ErrorAgainst;
using test::Quantize;
using test::RandomFloats;

double Tolerance(DType out) {
  return out == DType::kBf16 ? 1e-2 : out == DType::kFp16 ? 2e-3 : 5e-4;
}

// One FP8 problem built from random data: the quantized operands it holds,
// and its request.
struct Fp8Case {
  uint64_t m = 64, n = 64, k = 128;
  DType fa = DType::kFp8E4m3, fb = DType::kFp8E4m3;
  ScaleMode sa = ScaleMode::kTensor, sb = ScaleMode::kTensor;
  bool transpose_a = false, transpose_b = false;
  Layout layout_a = Layout::kRowMajor, layout_b = Layout::kRowMajor;
  Layout layout_d = Layout::kRowMajor;
  DType out = DType::kFp32;
  double alpha = 1.0, beta = 0.0;

  std::string Describe() const {
    return absl::StrCat(m, "x", n, "x", k, " ", DTypeName(fa), "x", DTypeName(fb), " ",
                        ScaleModeName(sa), "/", ScaleModeName(sb), transpose_a ? " tA" : "",
                        transpose_b ? " tB" : "", layout_a == Layout::kColMajor ? " colA" : "",
                        layout_b == Layout::kColMajor ? " colB" : "",
                        layout_d == Layout::kColMajor ? " colD" : "", " out ", DTypeName(out),
                        beta != 0.0 ? " beta" : "");
  }
};

struct BuiltProblem {
  QuantizedMatrix a, b;
  std::vector<float> c32;
  std::vector<uint16_t> c16;
  v1::GemmProblem problem;
};

std::unique_ptr<BuiltProblem> Build(const Fp8Case& c, std::mt19937* rng) {
  auto built = std::make_unique<BuiltProblem>();
  const uint64_t ar = c.transpose_a ? c.k : c.m, ac = c.transpose_a ? c.m : c.k;
  const uint64_t br = c.transpose_b ? c.n : c.k, bc = c.transpose_b ? c.k : c.n;
  const std::vector<float> a = RandomFloats(ar * ac, rng), b = RandomFloats(br * bc, rng);
  built->a = Quantize(MatrixView(a.data(), ar, ac, c.layout_a), c.fa, c.sa, OperandRole::kA,
                      c.transpose_a);
  built->b = Quantize(MatrixView(b.data(), br, bc, c.layout_b), c.fb, c.sb, OperandRole::kB,
                      c.transpose_b);
  ProblemOptions o;
  o.transpose_a = c.transpose_a;
  o.transpose_b = c.transpose_b;
  o.output_dtype = c.out;
  o.output_layout = c.layout_d;
  o.alpha = c.alpha;
  o.beta = c.beta;
  if (c.beta != 0.0) {
    built->c32 = RandomFloats(c.m * c.n, rng);
    if (c.out == DType::kFp32) {
      o.c = MatrixView(built->c32.data(), c.m, c.n, c.layout_d);
    } else {
      built->c16.resize(built->c32.size());
      FromFloat(c.out, built->c32.data(), built->c16.data(), built->c32.size());
      o.c = MatrixView(built->c16.data(), c.m, c.n, c.out, c.layout_d);
    }
  }
  auto p = MakeProblem(built->a.view(), built->b.view(), o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) built->problem = *std::move(p);
  return built;
}

class GpuFp8ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaExecutor::DeviceCount() == 0)
      GTEST_SKIP() << "no CUDA device visible: the CUDA executor is tested on the GPU box";
    Start(gpu::PortfolioSettings());
    if (HasFatalFailure()) return;
    hopper_ = server_->backend().devices.front().compute_capability == "9.0";
  }

  void TearDown() override { Stop(); }

  // (Re)starts server_ and client_ with `portfolio` as the kernel policy
  // and tuning table.
  void Start(const gpu::PortfolioSettings& portfolio) {
    Stop();
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.backend = "cuda";
    o.cuda.calibrate = false;
    o.cuda.portfolio = portfolio;
    o.cuda.quantize_fp8 = true;
    o.limits.max_resident_bytes = 64 << 20;
    auto server = GemmServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ClientOptions co;
    co.target = absl::StrCat("127.0.0.1:", server_->port());
    co.default_timeout = absl::Seconds(120);
    auto client = Client::Create(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void Stop() {
    client_.reset();
    if (server_) server_->Shutdown(absl::Seconds(10));
    server_.reset();
  }

  void SkipUnlessHopper() {
    if (!hopper_) GTEST_SKIP() << "FP8 runs on sm_90 only; ServerInfo checks the refusal";
  }

  // Sends `c` alone and checks its result; returns the response.
  v1::GemmResponse RunAndCheck(const Fp8Case& c, std::mt19937* rng) {
    SCOPED_TRACE(c.Describe());
    std::unique_ptr<BuiltProblem> built = Build(c, rng);
    v1::GemmRequest request;
    *request.add_problems() = built->problem;
    GemmResult r = client_->Gemm(request);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(r->backend(), "cuda");
    // E.g. sm90_tma_wgmma_coop_e4m3xe5m2_128x128x128_s4_kk_promote1_tensorxblock.
    EXPECT_THAT(r->kernel(), HasSubstr("sm90_tma_wgmma"));
    EXPECT_THAT(r->kernel(), ::testing::AnyOf(HasSubstr("e4m3x"), HasSubstr("e5m2x")));
    EXPECT_LE(ErrorAgainst(built->problem, r->results(0)), Tolerance(c.out)) << r->kernel();
    const v1::GemmResult& res = r->results(0);
    EXPECT_EQ(res.a_precision().dtype(), ToProto(c.fa));
    EXPECT_EQ(res.b_precision().dtype(), ToProto(c.fb));
    EXPECT_EQ(res.a_precision().scale_mode(), ToProto(c.sa));
    EXPECT_EQ(res.b_precision().scale_mode(), ToProto(c.sb));
    return *r;
  }

  std::unique_ptr<GemmServer> server_;
  std::unique_ptr<Client> client_;
  bool hopper_ = false;
};

TEST_F(GpuFp8ServerTest, ServerInfoListsFp8OnHopperAndTheRefusalElsewhere) {
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const bool listed =
      std::find(info->input_dtypes().begin(), info->input_dtypes().end(),
                v1::DATA_TYPE_FP8_E4M3) != info->input_dtypes().end();
  EXPECT_EQ(listed, hopper_);
  if (hopper_) return;
  std::mt19937 rng(1);
  std::unique_ptr<BuiltProblem> built = Build(Fp8Case(), &rng);
  v1::GemmRequest request;
  *request.add_problems() = built->problem;
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].input_dtype"));
}

TEST_F(GpuFp8ServerTest, EveryFormatPairAndScaleModePair) {
  SkipUnlessHopper();
  std::mt19937 rng(2);
  const DType formats[] = {DType::kFp8E4m3, DType::kFp8E5m2};
  const ScaleMode modes[] = {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock};
  int i = 0;
  for (DType fa : formats)
    for (DType fb : formats)
      for (ScaleMode sa : modes)
        for (ScaleMode sb : modes) {
          Fp8Case c;
          c.m = 130;
          c.n = 200;
          c.k = 384;
          c.fa = fa;
          c.fb = fb;
          c.sa = sa;
          c.sb = sb;
          c.out = i % 3 == 0 ? DType::kBf16 : i % 3 == 1 ? DType::kFp16 : DType::kFp32;
          RunAndCheck(c, &rng);
          ++i;
        }
}

// Under --kernel_policy=cublas, FP8 problems cuBLASLt takes (K-major
// operands, tensor or channel scales on both, not e5m2 x e5m2, rows on 16
// bytes, one problem a launch) run through cuBLASLt; the others run our FP8 kernel. Each result
// against float64 of the dequantized operands.
TEST_F(GpuFp8ServerTest, CublasPolicyRunsFp8ThroughCublasLtWhereItTakesTheProblem) {
  SkipUnlessHopper();
  gpu::PortfolioSettings cublas;
  cublas.policy = gpu::KernelPolicy::kCublas;
  Start(cublas);
  std::mt19937 rng(11);
  struct Expect {
    Fp8Case c;
    const char* kernel;
  };
  auto make = [](DType fa, DType fb, ScaleMode mode, bool k_major_b, Layout d, DType out,
                 double beta) {
    Fp8Case c;
    c.m = 192;
    c.n = 256;
    c.k = 512;
    c.fa = fa;
    c.fb = fb;
    c.sa = c.sb = mode;
    c.transpose_b = k_major_b;  // B stored n x k row-major: K-major
    c.layout_d = d;
    c.out = out;
    c.beta = beta;
    return c;
  };
  const DType e4 = DType::kFp8E4m3, e5 = DType::kFp8E5m2;
  const Layout row = Layout::kRowMajor, col = Layout::kColMajor;
  const Expect cases[] = {
      {make(e4, e4, ScaleMode::kTensor, true, row, DType::kBf16, 0), "cublaslt"},
      {make(e4, e5, ScaleMode::kTensor, true, col, DType::kFp32, 0.5), "cublaslt"},
      {make(e5, e4, ScaleMode::kChannel, true, row, DType::kFp16, 0), "cublaslt"},
      {make(e4, e4, ScaleMode::kChannel, true, col, DType::kBf16, 1), "cublaslt"},
      {make(e4, e4, ScaleMode::kBlock, true, row, DType::kBf16, 0), "sm90_tma_wgmma"},
      {make(e5, e5, ScaleMode::kTensor, true, row, DType::kBf16, 0), "sm90_tma_wgmma"},
      {make(e4, e4, ScaleMode::kTensor, false, row, DType::kBf16, 0), "sm90_tma_wgmma"},
      // A column-major bf16 D of 190 rows: its columns start off 16 bytes.
      {[&] {
         Fp8Case c = make(e4, e4, ScaleMode::kTensor, true, col, DType::kBf16, 0);
         c.m = 190;
         return c;
       }(),
       "sm90_tma_wgmma"},
  };
  for (const Expect& e : cases) {
    SCOPED_TRACE(e.c.Describe());
    std::unique_ptr<BuiltProblem> built = Build(e.c, &rng);
    v1::GemmRequest request;
    *request.add_problems() = built->problem;
    GemmResult r = client_->Gemm(request);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->kernel(), HasSubstr(e.kernel));
    EXPECT_LE(ErrorAgainst(built->problem, r->results(0)), Tolerance(e.c.out)) << r->kernel();
    EXPECT_EQ(r->results(0).a_precision().scale_mode(), ToProto(e.c.sa));
  }
}

namespace gk = gemm_kernels;
namespace gt = gemm_kernels::tuning;

// The kernel's view of a K-major `c` (A row-major, B stored n x k) with
// placeholder device pointers aligned like the executor's buffers, for
// computing its class and asking cuBLASLt for algorithms (neither reads it).
gk::GemmArguments KMajorArgs(const Fp8Case& c) {
  auto* base = reinterpret_cast<const unsigned char*>(uintptr_t{1} << 20);
  gk::GemmArguments a;
  a.m = static_cast<int64_t>(c.m);
  a.n = static_cast<int64_t>(c.n);
  a.k = static_cast<int64_t>(c.k);
  a.a = {base, c.fa, gk::Layout::kRowMajor, a.k, 0};
  a.b = {base, c.fb, gk::Layout::kColMajor, a.k, 0};
  a.d = {base, c.out, c.layout_d, c.layout_d == Layout::kRowMajor ? a.n : a.m, 0};
  a.c = a.d;
  a.a_scale = {c.sa, reinterpret_cast<const float*>(base)};
  a.b_scale = {c.sb, reinterpret_cast<const float*>(base)};
  return a;
}

// Under the table policy an FP8 class the table sends to cuBLASLt runs the
// algorithm the table names; an FP8 class it gives to our kernel, and one
// it does not list, run our FP8 kernel.
TEST_F(GpuFp8ServerTest, TablePolicyRunsTheTableChoiceForFp8Classes) {
  SkipUnlessHopper();
  auto ctx = gk::cublas::CublasContext::Create(nullptr, {});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const gt::TableKey key{server_->backend().devices.front().name, std::to_string(driver),
                         std::to_string(runtime), std::to_string((*ctx)->version()), kVersion};
  auto make = [](uint64_t m, DType fb, ScaleMode mode) {
    Fp8Case c;
    c.m = m;
    c.n = 256;
    c.k = 512;
    c.fa = DType::kFp8E4m3;
    c.fb = fb;
    c.sa = c.sb = mode;
    c.transpose_b = true;  // B stored n x k row-major: K-major
    c.out = DType::kBf16;
    return c;
  };
  const Fp8Case to_lt = make(384, DType::kFp8E4m3, ScaleMode::kTensor);
  const Fp8Case to_ours = make(1024, DType::kFp8E5m2, ScaleMode::kChannel);
  const Fp8Case unlisted = make(2048, DType::kFp8E4m3, ScaleMode::kChannel);
  auto algos = gk::cublas::CublasGemm::LtAlgorithms(**ctx, KMajorArgs(to_lt), 1);
  ASSERT_TRUE(algos.ok() && !algos->empty()) << "cuBLASLt offers no FP8 algorithm";
  gt::TuningTable table(key, 4);
  gt::TableEntry lt;
  lt.shape = gt::ClassOf(KMajorArgs(to_lt), 4);
  lt.choice.family = gt::CandidateFamily::kCublasLt;
  lt.choice.lt = algos->front();
  lt.sustained_us = lt.interleaved_us = 1;
  ASSERT_TRUE(table.Put(lt).ok());
  gt::TableEntry ours = lt;
  ours.shape = gt::ClassOf(KMajorArgs(to_ours), 4);
  ours.choice = gt::CandidateId::Heuristic();
  ASSERT_TRUE(table.Put(ours).ok());
  ASSERT_NE(gt::ClassOf(KMajorArgs(unlisted), 4), lt.shape);

  gpu::PortfolioSettings tabled;
  tabled.policy = gpu::KernelPolicy::kTable;
  tabled.table = std::make_shared<const gt::TuningTable>(table);
  tabled.table_path = "fp8 test table";
  Start(tabled);
  std::mt19937 rng(23);
  const std::pair<const Fp8Case*, std::string> cases[] = {
      {&to_lt, gt::CandidateToString(lt.choice)},
      {&to_ours, "sm90_tma_wgmma"},
      {&unlisted, "sm90_tma_wgmma"},
  };
  for (const auto& [c, kernel] : cases) {
    SCOPED_TRACE(c->Describe());
    std::unique_ptr<BuiltProblem> built = Build(*c, &rng);
    v1::GemmRequest request;
    *request.add_problems() = built->problem;
    GemmResult r = client_->Gemm(request);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_THAT(r->kernel(), HasSubstr(kernel));
    EXPECT_LE(ErrorAgainst(built->problem, r->results(0)), Tolerance(c->out)) << r->kernel();
  }
  const std::string metrics = server_->metrics()->Scrape();
  EXPECT_THAT(metrics, HasSubstr("kernel_kind=\"single/cublaslt_fp8\""));
}

TEST_F(GpuFp8ServerTest, BlockScalesWithRaggedK) {
  // ceil(K/128) blocks along K, the last one partial; K off the 16-byte
  // grid runs from re-pitched copies.
  SkipUnlessHopper();
  std::mt19937 rng(10);
  for (uint64_t k : {1000u, 129u, 1u, 4000u})
    for (int modes = 0; modes < 3; ++modes) {
      Fp8Case c;
      c.m = 70;
      c.n = 150;
      c.k = k;
      c.sa = modes == 2 ? ScaleMode::kChannel : ScaleMode::kBlock;
      c.sb = modes == 1 ? ScaleMode::kTensor : ScaleMode::kBlock;
      c.transpose_b = modes == 0;
      c.out = DType::kFp32;
      RunAndCheck(c, &rng);
    }
}

TEST_F(GpuFp8ServerTest, TransposesLayoutsOddShapesKTailsAndBeta) {
  SkipUnlessHopper();
  std::mt19937 rng(3);
  const uint64_t shapes[][3] = {{1, 1, 16}, {33, 140, 1000}, {257, 3, 200}, {64, 64, 33}};
  int i = 0;
  for (const auto& s : shapes)
    for (int trans = 0; trans < 4; ++trans)
      for (int layouts = 0; layouts < 4; ++layouts) {
        Fp8Case c;
        c.m = s[0];
        c.n = s[1];
        c.k = s[2];
        c.transpose_a = trans & 1;
        c.transpose_b = trans & 2;
        c.layout_a = layouts & 1 ? Layout::kColMajor : Layout::kRowMajor;
        c.layout_b = layouts & 2 ? Layout::kColMajor : Layout::kRowMajor;
        c.layout_d = i % 3 == 0 ? Layout::kColMajor : Layout::kRowMajor;
        c.sa = i % 2 == 0 ? ScaleMode::kChannel : ScaleMode::kTensor;
        c.sb = i % 4 < 2 ? ScaleMode::kChannel : ScaleMode::kTensor;
        c.fb = i % 5 == 0 ? DType::kFp8E5m2 : DType::kFp8E4m3;
        c.out = i % 2 == 0 ? DType::kBf16 : DType::kFp32;
        if (i % 4 == 3) {
          c.alpha = 0.5;
          c.beta = -1.25;
        }
        RunAndCheck(c, &rng);
        ++i;
      }
}

TEST_F(GpuFp8ServerTest, BlockScalesWithAColumnMajorOutputAreRefusedByField) {
  SkipUnlessHopper();
  std::mt19937 rng(4);
  Fp8Case c;
  c.k = 256;
  c.sa = ScaleMode::kBlock;
  c.layout_d = Layout::kColMajor;
  std::unique_ptr<BuiltProblem> built = Build(c, &rng);
  v1::GemmRequest request;
  *request.add_problems() = built->problem;
  GemmResult r = client_->Gemm(request);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].output_layout"));
}

TEST_F(GpuFp8ServerTest, SameShapeRequestsShareStridedBatchedLaunches) {
  SkipUnlessHopper();
  std::mt19937 rng(5);
  Fp8Case c;
  c.m = 96;
  c.n = 160;
  c.k = 512;
  c.fb = DType::kFp8E5m2;
  c.sa = ScaleMode::kChannel;
  c.sb = ScaleMode::kBlock;
  c.out = DType::kBf16;
  std::vector<std::unique_ptr<BuiltProblem>> built;
  std::vector<std::future<GemmResult>> calls;
  for (int i = 0; i < 64; ++i) {
    built.push_back(Build(c, &rng));
    v1::GemmRequest request;
    *request.add_problems() = built.back()->problem;
    calls.push_back(client_->GemmFuture(std::move(request)));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    GemmResult r = calls[i].get();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_LE(ErrorAgainst(built[i]->problem, r->results(0)), Tolerance(c.out)) << i;
  }
  // Whether concurrent requests meet in one batch depends on timing; the
  // problems of one request always do.
  v1::GemmRequest together;
  for (int i = 0; i < 8; ++i) *together.add_problems() = built[i]->problem;
  GemmResult r = client_->Gemm(together);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int i = 0; i < 8; ++i)
    EXPECT_LE(ErrorAgainst(together.problems(i), r->results(i)), Tolerance(c.out)) << i;
  const std::string metrics = server_->metrics()->Scrape();
  EXPECT_THAT(metrics, HasSubstr("kernel_kind=\"strided_batched/sm90_wgmma_fp8\""));
  EXPECT_THAT(metrics, HasSubstr("dtype=\"fp8\""));
}

TEST_F(GpuFp8ServerTest, Fp8MembersOfAMixedListRunBesideTheGroupedLaunch) {
  SkipUnlessHopper();
  std::mt19937 rng(6);
  v1::GemmRequest request;
  std::vector<std::unique_ptr<BuiltProblem>> built;
  std::vector<v1::GemmProblem> bf16;
  for (uint64_t m : {17u, 64u, 200u}) {
    Fp8Case c;
    c.m = m;
    c.n = 2 * m + 1;
    c.k = 256;
    c.sa = ScaleMode::kBlock;
    c.sb = ScaleMode::kChannel;
    built.push_back(Build(c, &rng));
    *request.add_problems() = built.back()->problem;
    test::ProblemSpec s;
    s.m = m;
    s.n = m + 3;
    s.k = 96;
    s.input = DType::kBf16;
    s.output = DType::kFp32;
    *request.add_problems() = test::MakeProblem(s, &rng);
  }
  GemmResult r = client_->Gemm(request);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->results_size(), request.problems_size());
  for (int i = 0; i < request.problems_size(); ++i) {
    if (i % 2 == 0) {
      EXPECT_LE(ErrorAgainst(request.problems(i), r->results(i)), Tolerance(DType::kFp32)) << i;
    } else {
      EXPECT_TRUE(test::ResultMatches(request.problems(i), r->results(i))) << i;
    }
  }
  EXPECT_THAT(server_->metrics()->Scrape(), HasSubstr("kernel_kind=\"single/sm90_wgmma_fp8\""));
}

TEST_F(GpuFp8ServerTest, DeterministicFp8IsBatchInvariant) {
  SkipUnlessHopper();
  std::mt19937 rng(7);
  Fp8Case c;
  c.m = 300;
  c.n = 280;
  c.k = 1024;
  c.sa = ScaleMode::kChannel;
  c.out = DType::kFp32;
  std::unique_ptr<BuiltProblem> alone = Build(c, &rng);
  v1::GemmRequest request;
  request.set_deterministic(true);
  *request.add_problems() = alone->problem;
  GemmResult first = client_->Gemm(request);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_reproducibility());
  EXPECT_EQ(first->reproducibility().problems(0).tile(), "128x128");
  // The same problem among 15 others of its shape (one strided batch).
  std::vector<std::unique_ptr<BuiltProblem>> others;
  std::vector<std::future<GemmResult>> calls;
  for (int i = 0; i < 16; ++i) {
    v1::GemmRequest r;
    r.set_deterministic(true);
    if (i == 7) {
      *r.add_problems() = alone->problem;
    } else {
      others.push_back(Build(c, &rng));
      *r.add_problems() = others.back()->problem;
    }
    calls.push_back(client_->GemmFuture(std::move(r)));
  }
  for (int i = 0; i < 16; ++i) {
    GemmResult r = calls[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    if (i == 7) {
      EXPECT_EQ(r->results(0).data(), first->results(0).data()) << "bits differ";
    }
  }
}

// RegisterMatrix / BeginUpload with `quantize` on the GPU: the codes the
// server keeps are the host rule's bit for bit (downloaded and compared with
// the client helper's), and the matrix serves as an FP8 operand of either
// role; a NaN is refused naming "data" and leaves nothing held.
TEST_F(GpuFp8ServerTest, QuantizingOnRegistrationRunsOnTheGpuWithTheHostRulesCodes) {
  SkipUnlessHopper();
  std::mt19937 rng(8);
  for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
    for (uint64_t threshold : {uint64_t{0}, uint64_t{4096}}) {  // whole, then in chunks
      for (OperandRole role : {OperandRole::kA, OperandRole::kB}) {
        SCOPED_TRACE(absl::StrCat(ScaleModeName(mode), threshold == 0 ? " whole" : " chunked",
                                  role == OperandRole::kA ? " as A" : " as B"));
        ClientOptions co;
        co.target = absl::StrCat("127.0.0.1:", server_->port());
        co.default_timeout = absl::Seconds(60);
        co.chunked_threshold_bytes = threshold;
        auto client = Client::Create(co);
        ASSERT_TRUE(client.ok()) << client.status();
        // K = 1000: a partial last block along K. The registered matrix is
        // A (m x k) or B (k x n); fp32 for A, bf16 for B.
        const uint64_t k = 1000, other = role == OperandRole::kA ? 72 : 200;
        const uint64_t rows = role == OperandRole::kA ? other : k;
        const uint64_t cols = role == OperandRole::kA ? k : other;
        const std::vector<float> values = RandomFloats(rows * cols, &rng);
        const std::vector<uint16_t> values16 = test::ToBf16(values);
        const MatrixView source = role == OperandRole::kA
                                      ? MatrixView(values.data(), rows, cols)
                                      : MatrixView(values16.data(), rows, cols, DType::kBf16);
        const Fp8Quantization how{DType::kFp8E4m3, mode, role, false};
        const QuantizedMatrix local = Quantize(source, how.format, mode, role, false);
        auto handle = (*client)->RegisterQuantized(source, how, "fp8 on the gpu");
        ASSERT_TRUE(handle.ok()) << handle.status();
        EXPECT_EQ(handle->dtype, DType::kFp8E4m3);
        std::vector<uint8_t> codes(local.codes.size());
        ASSERT_TRUE((*client)->DownloadMatrix(handle->handle, codes.data(), codes.size()).ok());
        EXPECT_EQ(codes, local.codes);

        // The partner: FP8 e5m2 quantized here with the same mode.
        const uint64_t prow = role == OperandRole::kA ? k : 64;
        const uint64_t pcol = role == OperandRole::kA ? 64 : k;
        const std::vector<float> p = RandomFloats(prow * pcol, &rng);
        const QuantizedMatrix partner =
            Quantize(MatrixView(p.data(), prow, pcol), DType::kFp8E5m2, mode,
                     role == OperandRole::kA ? OperandRole::kB : OperandRole::kA, false);
        ProblemOptions o;
        o.output_dtype = DType::kFp32;
        v1::GemmRequest sent, checked;
        if (role == OperandRole::kA) {
          ASSERT_TRUE(AddProblem(&sent, *handle, partner.view(), o).ok());
          ASSERT_TRUE(AddProblem(&checked, local.view(), partner.view(), o).ok());
        } else {
          ASSERT_TRUE(AddProblem(&sent, partner.view(), *handle, o).ok());
          ASSERT_TRUE(AddProblem(&checked, partner.view(), local.view(), o).ok());
        }
        GemmResult r = (*client)->Gemm(sent);
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_LE(ErrorAgainst(checked.problems(0), r->results(0)), Tolerance(DType::kFp32))
            << r->kernel();
        const v1::OperandPrecision& precision = role == OperandRole::kA
                                                    ? r->results(0).a_precision()
                                                    : r->results(0).b_precision();
        EXPECT_TRUE(precision.quantized_by_server());
        EXPECT_EQ(precision.scale_mode(), ToProto(mode));
        ASSERT_TRUE((*client)->ReleaseMatrix(*handle).ok());

        std::vector<float> nan = values;
        nan[rows * cols / 2] = std::numeric_limits<float>::quiet_NaN();
        auto refused = (*client)->RegisterQuantized(MatrixView(nan.data(), rows, cols), how);
        EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(refused.status().message()), HasSubstr("data"));
      }
    }
  }
  EXPECT_EQ(test::MetricValue(server_->metrics()->Scrape(), "gemm_resident_bytes"), 0.0)
      << "nothing stays held";
}

// quantize_partner on the GPU: a bf16 A (or an fp32 B) beside an FP8
// partner, quantized by the server per problem with the partner's format and
// mode. Three same-shape problems in one request share a strided-batched
// launch, each member with its own scales; the results match the product of
// the operands quantized here by the same rule (the same codes), and a NaN
// fails its request naming the field while the server serves on.
TEST_F(GpuFp8ServerTest, APartnerIsQuantizedPerProblemOnTheGpu) {
  SkipUnlessHopper();
  std::mt19937 rng(18);
  for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
    for (OperandRole quantized : {OperandRole::kA, OperandRole::kB}) {
      SCOPED_TRACE(absl::StrCat(ScaleModeName(mode),
                                quantized == OperandRole::kA ? " bf16 A" : " fp32 B"));
      const uint64_t m = 96, n = 80, k = 300;  // a partial last block along K
      v1::GemmRequest sent, checked;
      std::vector<std::vector<float>> keep;
      std::vector<std::vector<uint16_t>> keep16;
      std::vector<QuantizedMatrix> keep_q;
      keep.reserve(6);
      keep16.reserve(3);
      keep_q.reserve(6);
      for (int member = 0; member < 3; ++member) {
        keep.push_back(RandomFloats(m * k, &rng));  // A, m x k
        keep.push_back(RandomFloats(k * n, &rng));  // B, k x n
        const std::vector<float>& a = keep[keep.size() - 2];
        const std::vector<float>& b = keep.back();
        ProblemOptions o;
        o.output_dtype = DType::kFp32;
        if (quantized == OperandRole::kA) {
          keep16.push_back(test::ToBf16(a));
          const MatrixView va(keep16.back().data(), m, k, DType::kBf16);
          keep_q.push_back(Quantize(MatrixView(b.data(), k, n), DType::kFp8E5m2, mode,
                                    OperandRole::kB, false));
          keep_q.push_back(Quantize(va, DType::kFp8E5m2, mode, OperandRole::kA, false));
          ProblemOptions q = o;
          q.quantize_partner = true;
          ASSERT_TRUE(AddProblem(&sent, va, keep_q[keep_q.size() - 2].view(), q).ok());
          ASSERT_TRUE(AddProblem(&checked, keep_q.back().view(), keep_q[keep_q.size() - 2].view(),
                                 o)
                          .ok());
        } else {
          keep_q.push_back(Quantize(MatrixView(a.data(), m, k), DType::kFp8E4m3, mode,
                                    OperandRole::kA, false));
          keep_q.push_back(Quantize(MatrixView(b.data(), k, n), DType::kFp8E4m3, mode,
                                    OperandRole::kB, false));
          ProblemOptions q = o;
          q.quantize_partner = true;
          ASSERT_TRUE(AddProblem(&sent, keep_q[keep_q.size() - 2].view(),
                                 MatrixView(b.data(), k, n), q)
                          .ok());
          ASSERT_TRUE(AddProblem(&checked, keep_q[keep_q.size() - 2].view(), keep_q.back().view(),
                                 o)
                          .ok());
        }
      }
      GemmResult r = client_->Gemm(sent);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_THAT(r->kernel(), HasSubstr(quantized == OperandRole::kA ? "+quantize_a"
                                                                       : "+quantize_b"));
      for (int member = 0; member < 3; ++member) {
        // The server's codes are the host rule's (checked bit for bit in
        // QuantizingOnRegistration*); what is left is the FP8 kernel's own
        // accumulation, about 1e-4 for e4m3 x e4m3 on Hopper (1.00e-4 to
        // 1.05e-4 for these shapes on an H100), under Tolerance's 5e-4. A
        // wrong code or scale costs far more: one e4m3 step is 6-12%.
        EXPECT_LE(ErrorAgainst(checked.problems(member), r->results(member)),
                  Tolerance(DType::kFp32))
            << member << " " << r->kernel();
        const v1::OperandPrecision& pq = quantized == OperandRole::kA
                                             ? r->results(member).a_precision()
                                             : r->results(member).b_precision();
        EXPECT_TRUE(pq.quantized_by_server());
        EXPECT_EQ(pq.scale_mode(), ToProto(mode));
      }

      // A NaN in the second problem's partner fails the request by field.
      v1::GemmRequest bad = sent;
      v1::Matrix* partner = quantized == OperandRole::kA ? bad.mutable_problems(1)->mutable_a()
                                                         : bad.mutable_problems(1)->mutable_b();
      std::string data = partner->data();
      if (quantized == OperandRole::kA) {
        const uint16_t nan16 = 0x7fc0;
        std::memcpy(&data[2 * 37], &nan16, sizeof nan16);
      } else {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(&data[4 * 37], &nan, sizeof nan);
      }
      partner->set_data(data);
      GemmResult refused = client_->Gemm(bad);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(refused.status().message()),
                  HasSubstr(quantized == OperandRole::kA ? "problems[1].a.data"
                                                         : "problems[1].b.data"));
      EXPECT_TRUE(client_->Gemm(sent).ok()) << "the server serves on";
    }
  }
}

TEST_F(GpuFp8ServerTest, MalformedFp8IsInvalidNamingTheField) {
  SkipUnlessHopper();
  std::mt19937 rng(9);
  Fp8Case c;
  c.sa = ScaleMode::kChannel;
  std::unique_ptr<BuiltProblem> built = Build(c, &rng);
  v1::GemmRequest request;
  *request.add_problems() = built->problem;
  v1::GemmRequest bad = request;
  bad.mutable_problems(0)->mutable_a()->mutable_scales()->mutable_data()->resize(12);
  GemmResult r = client_->Gemm(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].a.scales.data"));
  bad = request;
  const float zero = 0.0f;
  bad.mutable_problems(0)->mutable_b()->mutable_scales()->set_data(
      reinterpret_cast<const char*>(&zero), sizeof zero);
  r = client_->Gemm(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].b.scales.data"));
  bad = request;
  bad.mutable_problems(0)->set_output_dtype(v1::DATA_TYPE_FP8_E4M3);
  r = client_->Gemm(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("problems[0].output_dtype"));
  EXPECT_TRUE(client_->Gemm(request).ok()) << "the server serves on";
}

TEST_F(GpuFp8ServerTest, SoakOfFp8MixedWithBf16) {
  SkipUnlessHopper();
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_fp8_soak_seconds));
  std::atomic<int> served{0}, wrong{0};
  absl::Mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      // At least 16 x 16 outputs: the relative error of a handful of
      // elements is at the mercy of cancellation in their sums.
      std::uniform_int_distribution<int> size(16, 300);
      int i = 0;
      while (absl::Now() < end) {
        v1::GemmRequest request;
        std::unique_ptr<BuiltProblem> built;
        if (i++ % 2 == 0) {
          Fp8Case c;
          c.m = size(rng);
          c.n = size(rng);
          c.k = 128 * (1 + size(rng) % 4);
          c.sa = static_cast<ScaleMode>(1 + size(rng) % 3);
          c.sb = static_cast<ScaleMode>(1 + size(rng) % 3);
          c.transpose_b = size(rng) % 2 == 0;
          built = Build(c, &rng);
          *request.add_problems() = built->problem;
        } else {
          test::ProblemSpec s;
          s.m = size(rng);
          s.n = size(rng);
          s.k = size(rng);
          s.input = DType::kBf16;
          *request.add_problems() = test::MakeProblem(s, &rng);
        }
        GemmResult r = client_->Gemm(request);
        std::string why;
        if (!r.ok()) {
          why = std::string(r.status().message());
        } else if (built) {
          const double err = ErrorAgainst(request.problems(0), r->results(0));
          if (!(err <= Tolerance(DType::kFp32))) why = absl::StrCat("error ", err, " ", r->kernel());
        } else if (auto m = test::ResponseMatches(request, *r); !m) {
          why = m.message();
        }
        if (why.empty()) {
          served++;
        } else {
          wrong++;
          const GemmShape s = ViewProblem(request.problems(0)).value().shape;
          absl::MutexLock lock(&mu);
          failures.push_back(absl::StrCat(s.m, "x", s.n, "x", s.k, " ", DTypeName(s.input_dtype),
                                          ": ", why));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  for (size_t i = 0; i < failures.size() && i < 5; ++i) ADD_FAILURE() << failures[i];
  EXPECT_GT(served.load(), 0);
  RecordProperty("served", served.load());
}

}  // namespace
}  // namespace gemm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  return RUN_ALL_TESTS();
}
