// The deterministic contract on the CPU backend: a problem's result bytes
// are the same alone, in strided batches with random partners, in grouped
// batches of random lists and under concurrent batches.
#include <memory>

#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"

#include "service/exec/cpu_executor.h"
#include "tests/determinism_harness.h"

namespace gemm {
namespace {

std::unique_ptr<CpuExecutor> MakeExecutor() {
  CpuExecutor::Options options;
  options.concurrent_requests = 3;
  options.blas_threads = 2;
  options.calibrate = false;
  auto ex = CpuExecutor::Create(options);
  EXPECT_TRUE(ex.ok()) << ex.status();
  return ex.ok() ? *std::move(ex) : nullptr;
}

test::DeterminismOptions SmallShapes(bool deterministic) {
  test::DeterminismOptions o;
  o.problems = 160;
  o.max_dim = 160;
  o.max_skinny = 48;
  o.deep_k_min = 1024;
  o.deep_k_max = 3000;
  o.threads = 3;
  o.deterministic = deterministic;
  return o;
}

void ExpectInvariant(const test::DeterminismResult& r, int problems) {
  EXPECT_EQ(r.compared, 3 * problems);
  EXPECT_EQ(r.mismatched, 0);
  for (const std::string& e : r.examples) ADD_FAILURE() << e;
  int strided = 0, grouped = 0;
  for (const auto& [kind, count] : r.launch_kinds) {
    if (kind == "strided_batched") strided = count;
    if (kind == "grouped") grouped = count;
  }
  EXPECT_GT(strided, 0);
  EXPECT_GT(grouped, 0);
}

TEST(CpuDeterminismTest, DeterministicResultsIgnoreBatchPartnersAndLoad) {
  auto ex = MakeExecutor();
  ASSERT_NE(ex, nullptr);
  const test::DeterminismOptions o = SmallShapes(true);
  ExpectInvariant(test::RunDeterminismCheck(ex.get(), o), o.problems);
}

// The CPU backend runs every problem as one sgemm at one thread count, so
// requests without the flag are batch-invariant too.
TEST(CpuDeterminismTest, DefaultPathIsBatchInvariantToo) {
  auto ex = MakeExecutor();
  ASSERT_NE(ex, nullptr);
  const test::DeterminismOptions o = SmallShapes(false);
  ExpectInvariant(test::RunDeterminismCheck(ex.get(), o), o.problems);
}

TEST(CpuDeterminismTest, TwoExecutorsOfOneThreadCountAgree) {
  auto first = MakeExecutor();
  auto second = MakeExecutor();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  test::DeterminismOptions o = SmallShapes(true);
  o.problems = 40;
  const test::DeterminismResult a = test::RunDeterminismCheck(first.get(), o);
  const test::DeterminismResult b = test::RunDeterminismCheck(second.get(), o);
  EXPECT_EQ(a.problem_digests, b.problem_digests);
  EXPECT_EQ(a.digest, b.digest);
}

TEST(CpuDeterminismTest, DeterministicReportNamesWhatFixedTheBits) {
  auto ex = MakeExecutor();
  ASSERT_NE(ex, nullptr);
  std::vector<float> a(6, 1.0f), b(6, 2.0f), d(4);
  auto item = std::make_shared<WorkItem>();
  GemmShape s;
  s.m = 2;
  s.n = 2;
  s.k = 3;
  for (int i = 0; i < 2; ++i) {
    GemmProblemRef p;
    p.shape = s;
    p.a = MatrixA(s, a.data());
    p.b = MatrixB(s, b.data());
    p.d = d.data();
    item->problems.push_back(p);
  }
  item->deterministic = true;
  absl::Notification done;
  ExecutionReport report;
  item->done = [&](const absl::Status& st, const ExecutionReport& r) {
    EXPECT_TRUE(st.ok()) << st;
    report = r;
    done.Notify();
  };
  ex->Execute(SingleLaunchBatch({item}));
  done.WaitForNotification();
  ASSERT_EQ(report.reproducibility.size(), 2u);
  EXPECT_EQ(report.reproducibility[0].kernel_family, "openblas_sgemm");
  EXPECT_EQ(report.reproducibility[0].splits, 1);
  EXPECT_NE(report.reproducibility[1].reduction_order.find("2 BLAS threads"), std::string::npos);
  EXPECT_NE(report.device_model.find("2 BLAS threads"), std::string::npos);
  EXPECT_EQ(d[0], 6.0f);  // 3 products of 1 x 2
}

}  // namespace
}  // namespace gemm
