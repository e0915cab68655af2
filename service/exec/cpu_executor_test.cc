#include "service/exec/cpu_executor.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "common/dtype.h"
#include "common/reference_gemm.h"

namespace gemm {
namespace {

constexpr DType kDTypes[] = {DType::kFp32, DType::kFp16, DType::kBf16};
constexpr Layout kLayouts[] = {Layout::kRowMajor, Layout::kColMajor};

// One problem with its own storage: random operands, C when beta != 0, and a
// D poisoned with NaN bytes (0xff.. is NaN in fp32, fp16 and bf16) so that a
// result the backend never wrote cannot pass.
struct OwnedProblem {
  std::string a, b, c, d;
  GemmProblemRef ref;

  OwnedProblem(const GemmShape& shape, double alpha, double beta, std::mt19937* rng) {
    ref.shape = shape;
    ref.alpha = alpha;
    ref.beta = beta;
    a = RandomBytes(shape.input_dtype, shape.m * shape.k, rng);
    b = RandomBytes(shape.input_dtype, shape.k * shape.n, rng);
    ref.a = MatrixA(shape, a.data());
    ref.b = MatrixB(shape, b.data());
    if (beta != 0.0) {
      c = RandomBytes(shape.output_dtype, shape.m * shape.n, rng);
      ref.c = MatrixC(shape, c.data());
    }
    d.assign(shape.m * shape.n * SizeOf(shape.output_dtype), '\xff');
    ref.d = d.data();
  }

  std::vector<double> Output() const {
    const GemmShape& s = ref.shape;
    return ReadMatrix(MatrixRef{d.data(), s.m, s.n, s.layout_d, s.output_dtype});
  }

  static std::string RandomBytes(DType t, uint64_t n, std::mt19937* rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) v = dist(*rng);
    std::string out(n * SizeOf(t), '\0');
    FromFloat(t, values.data(), out.data(), n);
    return out;
  }
};

std::string Describe(const GemmShape& s, double alpha, double beta) {
  const auto l = [](Layout x) { return x == Layout::kRowMajor ? "R" : "C"; };
  return std::string("m=") + std::to_string(s.m) + " n=" + std::to_string(s.n) +
         " k=" + std::to_string(s.k) + " ta=" + std::to_string(s.transpose_a) +
         " tb=" + std::to_string(s.transpose_b) + " layouts(a,b,c,d)=" + l(s.layout_a) +
         l(s.layout_b) + l(s.layout_c) + l(s.layout_d) + " " + DTypeName(s.input_dtype) +
         "->" + DTypeName(s.output_dtype) + " alpha=" + std::to_string(alpha) +
         " beta=" + std::to_string(beta);
}

// Runs the problem on the CPU backend and checks it against the float64
// reference within the dtype's tolerance.
void CheckAgainstReference(const GemmShape& shape, double alpha, double beta,
                           std::mt19937* rng) {
  OwnedProblem p(shape, alpha, beta, rng);
  ASSERT_TRUE(RunCpuGemm(p.ref).ok());
  const double err = RelativeError(p.Output(), ReferenceGemm(p.ref));
  EXPECT_LE(err, Tolerance(shape.input_dtype, shape.output_dtype, false))
      << Describe(shape, alpha, beta);
}

GemmShape Shape(uint64_t m, uint64_t n, uint64_t k, DType in = DType::kFp32,
                DType out = DType::kFp32) {
  GemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.input_dtype = in;
  s.output_dtype = out;
  return s;
}

TEST(RunCpuGemmTest, KnownSmallProduct) {
  // [1 2 3; 4 5 6] * [7 8; 9 10; 11 12] = [58 64; 139 154]
  const float a[] = {1, 2, 3, 4, 5, 6};
  const float b[] = {7, 8, 9, 10, 11, 12};
  float d[4];
  std::memset(d, 0xff, sizeof(d));
  GemmProblemRef p;
  p.shape = Shape(2, 2, 3);
  p.a = MatrixA(p.shape, a);
  p.b = MatrixB(p.shape, b);
  p.d = d;
  ASSERT_TRUE(RunCpuGemm(p).ok());
  EXPECT_EQ(d[0], 58);
  EXPECT_EQ(d[1], 64);
  EXPECT_EQ(d[2], 139);
  EXPECT_EQ(d[3], 154);
}

TEST(RunCpuGemmTest, OneByOneByOne) {
  std::mt19937 rng(1);
  for (DType in : kDTypes)
    for (DType out : kDTypes) {
      CheckAgainstReference(Shape(1, 1, 1, in, out), 1.0, 0.0, &rng);
      CheckAgainstReference(Shape(1, 1, 1, in, out), -2.0, 0.5, &rng);
    }
}

TEST(RunCpuGemmTest, EveryTransposeAndLayoutCombination) {
  // 4 transpose pairs x 16 layouts of A, B, C and D, with C read (beta != 0).
  std::mt19937 rng(2);
  const uint64_t shapes[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 7, 64}, {1, 17, 9}, {13, 1, 2}};
  for (const auto& mnk : shapes)
    for (int t = 0; t < 4; ++t)
      for (int l = 0; l < 16; ++l) {
        GemmShape s = Shape(mnk[0], mnk[1], mnk[2]);
        s.transpose_a = t & 1;
        s.transpose_b = t & 2;
        s.layout_a = kLayouts[l & 1];
        s.layout_b = kLayouts[(l >> 1) & 1];
        s.layout_c = kLayouts[(l >> 2) & 1];
        s.layout_d = kLayouts[(l >> 3) & 1];
        CheckAgainstReference(s, 1.25, -0.75, &rng);
      }
}

TEST(RunCpuGemmTest, OddAndNonSquareShapes) {
  std::mt19937 rng(3);
  const uint64_t dims[] = {1, 7, 33, 64, 127, 129};
  int i = 0;
  // Every (m, n) pair, with k cycling through the sizes, and transposes and
  // layouts cycling so that each shape meets a different combination.
  for (uint64_t m : dims)
    for (uint64_t n : dims) {
      const uint64_t k = dims[(i * 5 + 1) % 6];
      GemmShape s = Shape(m, n, k);
      s.transpose_a = i & 1;
      s.transpose_b = (i >> 1) & 1;
      s.layout_a = kLayouts[(i >> 2) & 1];
      s.layout_b = kLayouts[(i >> 3) & 1];
      s.layout_d = kLayouts[(i >> 4) & 1];
      CheckAgainstReference(s, 1.0, 0.0, &rng);
      ++i;
    }
}

TEST(RunCpuGemmTest, EveryInputAndOutputDtype) {
  std::mt19937 rng(4);
  int i = 0;
  for (DType in : kDTypes)
    for (DType out : kDTypes)
      for (int t = 0; t < 4; ++t) {
        for (const auto& [m, n, k] : {std::array<uint64_t, 3>{33, 7, 129},
                                      std::array<uint64_t, 3>{64, 127, 1}}) {
          GemmShape s = Shape(m, n, k, in, out);
          s.transpose_a = t & 1;
          s.transpose_b = t & 2;
          s.layout_a = kLayouts[i & 1];
          s.layout_b = kLayouts[(i >> 1) & 1];
          s.layout_c = kLayouts[(i >> 2) & 1];
          s.layout_d = kLayouts[(i >> 3) & 1];
          CheckAgainstReference(s, 1.0, 0.0, &rng);
          CheckAgainstReference(s, 0.5, 2.0, &rng);
          ++i;
        }
      }
}

TEST(RunCpuGemmTest, Bf16InFp32Out) {
  // The common mixed-precision case, larger K: fp32 output must be held to
  // the bf16-input tolerance and no looser.
  std::mt19937 rng(5);
  GemmShape s = Shape(65, 31, 255, DType::kBf16, DType::kFp32);
  OwnedProblem p(s, 1.0, 0.0, &rng);
  ASSERT_TRUE(RunCpuGemm(p.ref).ok());
  // Inputs are read exactly as stored, so the only error is fp32
  // accumulation: far tighter than the dtype tolerance.
  EXPECT_LE(RelativeError(p.Output(), ReferenceGemm(p.ref)), 1e-5);
}

TEST(RunCpuGemmTest, AlphaAndBetaCombinations) {
  std::mt19937 rng(6);
  const double pairs[][2] = {{1, 0}, {2.5, 0}, {1, 1}, {0.5, -1}, {-1, 2.5}, {0, 1}, {0, 0}};
  for (DType t : kDTypes)
    for (const auto& ab : pairs)
      for (int l = 0; l < 4; ++l) {
        GemmShape s = Shape(17, 9, 23, t, t);
        s.layout_c = kLayouts[l & 1];
        s.layout_d = kLayouts[(l >> 1) & 1];
        CheckAgainstReference(s, ab[0], ab[1], &rng);
      }
}

TEST(RunCpuGemmTest, ZeroAlphaAndBetaGiveZerosNotNaN) {
  // D is poisoned with NaN; with alpha = beta = 0 BLAS must still write it.
  std::mt19937 rng(7);
  OwnedProblem p(Shape(5, 6, 7), 0.0, 0.0, &rng);
  ASSERT_TRUE(RunCpuGemm(p.ref).ok());
  for (double v : p.Output()) EXPECT_EQ(v, 0.0);
}

// Executor

CpuExecutor::Options FastOptions() {
  CpuExecutor::Options o;
  o.concurrent_requests = 1;
  o.blas_threads = 1;
  o.calibrate = false;
  return o;
}

TEST(CpuExecutorTest, CreateRejectsBadOptions) {
  CpuExecutor::Options o = FastOptions();
  o.concurrent_requests = 0;
  EXPECT_EQ(CpuExecutor::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = FastOptions();
  o.blas_threads = -1;
  EXPECT_EQ(CpuExecutor::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuExecutorTest, DescribesItself) {
  CpuExecutor::Options o = FastOptions();
  o.concurrent_requests = 3;
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const BackendInfo& info = (*ex)->info();
  EXPECT_EQ(info.backend, "cpu");
  ASSERT_EQ(info.devices.size(), 1u);
  EXPECT_EQ(info.devices[0].threads, 1u);
  EXPECT_FALSE(info.devices[0].name.empty());
  EXPECT_FALSE(info.kernels.empty());
  EXPECT_TRUE((*ex)->peak_rates().empty());  // not calibrated
  EXPECT_EQ((*ex)->max_concurrent_batches(), 3);
}

TEST(CpuExecutorTest, CalibrationMeasuresPositiveRates) {
  CpuExecutor::Options o = FastOptions();
  o.calibrate = true;
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<std::string> kinds;
  for (const PeakRate& r : (*ex)->peak_rates()) {
    kinds.push_back(r.kind);
    EXPECT_GT(r.per_second, 0) << r.kind;
    EXPECT_FALSE(r.method.empty()) << r.kind;
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"fp32", "fp16", "bf16", "memory"}));
}

TEST(CpuExecutorTest, CalibrationSaysMeasuredAndKeepsToItsBudget) {
  CpuExecutor::Options o = FastOptions();
  o.calibrate = true;
  o.calibration_budget = absl::Milliseconds(500);
  const absl::Time t0 = absl::Now();
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  // The budget bounds the sgemm sizes tried; the 64 MiB copy and one
  // product past the budget come on top.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  for (const PeakRate& r : (*ex)->peak_rates()) EXPECT_EQ(r.method, "measured") << r.kind;
}

TEST(CpuExecutorTest, PeaksSetByFlagReplaceTheMeasuredOnes) {
  CpuExecutor::Options o = FastOptions();
  o.calibrate = true;
  o.calibration_budget = absl::Milliseconds(100);
  o.peak_overrides = {{"fp32", 3e10, "flag"}, {"memory", 5e10, "flag"}};
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const std::vector<PeakRate> rates = (*ex)->peak_rates();
  EXPECT_EQ(RateOf(rates, "fp32"), 3e10);
  EXPECT_EQ(RateOf(rates, "memory"), 5e10);
  EXPECT_GT(RateOf(rates, "fp16"), 0);
  for (const PeakRate& r : rates)
    EXPECT_EQ(r.method, r.kind == "fp32" || r.kind == "memory" ? "flag" : "measured") << r.kind;
}

TEST(CpuExecutorTest, RemeasuringKeepsFlagRatesAndLosesNoBatch) {
  CpuExecutor::Options o = FastOptions();
  o.concurrent_requests = 2;
  o.calibration_budget = absl::Milliseconds(100);
  o.peak_overrides = {{"fp16", 5e9, "flag"}};
  auto ex = CpuExecutor::Create(o);  // not calibrated: only the flag's rate
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ((*ex)->peak_rates().size(), 1u);

  // Batches before, during and after the re-measurement all run, correctly.
  std::mt19937 rng(3);
  constexpr int kBatches = 12;
  std::vector<std::unique_ptr<OwnedProblem>> owned;
  absl::BlockingCounter answered(kBatches);
  std::vector<absl::Status> statuses(kBatches);
  auto submit = [&](int i) {
    auto item = std::make_shared<WorkItem>();
    item->problems.push_back(owned[i]->ref);
    item->done = [&statuses, &answered, i](const absl::Status& s, const ExecutionReport&) {
      statuses[i] = s;
      answered.DecrementCount();
    };
    (*ex)->Execute(SingleLaunchBatch({item}));
  };
  for (int i = 0; i < kBatches; ++i)
    owned.push_back(std::make_unique<OwnedProblem>(Shape(192, 160, 224), 1.0, 0.0, &rng));
  for (int i = 0; i < kBatches / 2; ++i) submit(i);
  std::thread remeasure([&] { EXPECT_TRUE((*ex)->RemeasurePeaks().ok()); });
  for (int i = kBatches / 2; i < kBatches; ++i) submit(i);
  remeasure.join();
  answered.Wait();
  for (int i = 0; i < kBatches; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
    EXPECT_LE(RelativeError(owned[i]->Output(), ReferenceGemm(owned[i]->ref)),
              Tolerance(DType::kFp32, DType::kFp32, false))
        << i;
  }

  const std::vector<PeakRate> rates = (*ex)->peak_rates();
  for (const char* kind : {"fp32", "bf16", "memory"}) EXPECT_GT(RateOf(rates, kind), 0) << kind;
  EXPECT_EQ(RateOf(rates, "fp16"), 5e9);
  for (const PeakRate& r : rates)
    EXPECT_EQ(r.method, r.kind == "fp16" ? "flag" : "measured") << r.kind;
  // Admission now predicts from the measured rates (nothing was measured
  // before, so nothing was predicted).
  WorkItem one;
  one.problems = {owned[0]->ref};
  EXPECT_GT((*ex)->PredictRunTime(one), absl::ZeroDuration());
}

TEST(CpuExecutorTest, PredictsFromItsCalibration) {
  GemmProblemRef p;
  p.shape.m = p.shape.n = p.shape.k = 256;
  p.shape.input_dtype = p.shape.output_dtype = DType::kBf16;
  p.a = MatrixA(p.shape, &p);  // never read: prediction looks at shapes only
  p.b = MatrixB(p.shape, &p);
  WorkItem one, eight;
  one.problems = {p};
  eight.problems.assign(8, p);

  auto uncalibrated = CpuExecutor::Create(FastOptions());
  ASSERT_TRUE(uncalibrated.ok());
  EXPECT_EQ((*uncalibrated)->PredictRunTime(one), absl::ZeroDuration()) << "nothing measured";

  CpuExecutor::Options o = FastOptions();
  o.calibrate = true;
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const absl::Duration t1 = (*ex)->PredictRunTime(one);
  EXPECT_GT(t1, absl::ZeroDuration());
  // Each Duration is rounded to absl's quarter-nanosecond tick: t1's rounding
  // is multiplied by 8, and the eight's prediction adds its own (a 1 ns
  // difference failed a 1e-9 bound in CI).
  constexpr double kTick = 0.25e-9;
  EXPECT_NEAR(absl::ToDoubleSeconds((*ex)->PredictRunTime(eight)), 8 * absl::ToDoubleSeconds(t1),
              9 * kTick);
  // bf16 is widened and narrowed on the way: more than the bare sgemm.
  const double sgemm = RateOf((*ex)->peak_rates(), "fp32");
  EXPECT_GT(absl::ToDoubleSeconds(t1), p.shape.flops() / sgemm);
}

TEST(CpuExecutorTest, ParallelUnitsAreWorkersWithCoresOfTheirOwn) {
  CpuExecutor::Options o = FastOptions();  // one BLAS thread per request
  o.concurrent_requests = 64;
  auto ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ((*ex)->parallel_units(), std::min(64, cores));
  o.blas_threads = 0;  // every core for each request
  ex = CpuExecutor::Create(o);
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->parallel_units(), 1);
}

struct Completion {
  int calls = 0;
  absl::Status status;
  ExecutionReport report;
};

TEST(CpuExecutorTest, ExecuteCompletesEachItemWithAReport) {
  auto ex = CpuExecutor::Create(FastOptions());
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::mt19937 rng(9);
  // Three items: one problem, two problems of different shapes and dtypes,
  // and one cancelled before it runs.
  std::vector<std::unique_ptr<OwnedProblem>> owned;
  owned.push_back(std::make_unique<OwnedProblem>(Shape(9, 4, 33), 1.0, 0.0, &rng));
  owned.push_back(std::make_unique<OwnedProblem>(
      Shape(1, 127, 7, DType::kFp16, DType::kFp32), 2.0, 0.0, &rng));
  owned.push_back(std::make_unique<OwnedProblem>(
      Shape(64, 3, 5, DType::kBf16, DType::kBf16), 1.0, -1.0, &rng));
  owned.push_back(std::make_unique<OwnedProblem>(Shape(8, 8, 8), 1.0, 0.0, &rng));

  std::vector<Completion> completions(3);
  absl::BlockingCounter answered(3);
  std::vector<std::shared_ptr<WorkItem>> batch;
  const std::vector<std::vector<int>> problems_of = {{0}, {1, 2}, {3}};
  for (int i = 0; i < 3; ++i) {
    auto item = std::make_shared<WorkItem>();
    for (int j : problems_of[i]) item->problems.push_back(owned[j]->ref);
    item->report.queue_wait = absl::Milliseconds(3);
    item->done = [c = &completions[i], &answered](const absl::Status& s,
                                                  const ExecutionReport& r) {
      ++c->calls;
      c->status = s;
      c->report = r;
      answered.DecrementCount();
    };
    batch.push_back(item);
  }
  batch[2]->cancelled.store(true);
  // Execute returns at once; the executor's threads run the batch and then
  // call on_done.
  absl::Notification batch_done;
  Batch b = SingleLaunchBatch(batch);
  b.on_done = [&batch_done] { batch_done.Notify(); };
  (*ex)->Execute(std::move(b));
  ASSERT_TRUE(batch_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  answered.Wait();

  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(completions[i].calls, 1);
    EXPECT_TRUE(completions[i].status.ok()) << completions[i].status;
    EXPECT_EQ(completions[i].report.backend, "cpu");
    EXPECT_FALSE(completions[i].report.kernel.empty());
    EXPECT_GE(completions[i].report.compute, absl::ZeroDuration());
    EXPECT_GE(completions[i].report.transfer, absl::ZeroDuration());
    // The executor keeps what the queue measured.
    EXPECT_EQ(completions[i].report.queue_wait, absl::Milliseconds(3));
  }
  for (int j = 0; j < 3; ++j) {
    const OwnedProblem& p = *owned[j];
    EXPECT_LE(RelativeError(p.Output(), ReferenceGemm(p.ref)),
              Tolerance(p.ref.shape.input_dtype, p.ref.shape.output_dtype, false))
        << j;
  }
  EXPECT_EQ(completions[2].calls, 1);
  EXPECT_EQ(completions[2].status.code(), absl::StatusCode::kCancelled);
  // The cancelled item's output was never written.
  EXPECT_EQ(owned[3]->d, std::string(owned[3]->d.size(), '\xff'));
}

}  // namespace
}  // namespace gemm
