#include "service/cuda/portfolio_policy.h"

#include <memory>

#include "gtest/gtest.h"

namespace gemm {
namespace gpu {
namespace {

namespace gt = gemm_kernels::tuning;

gt::TableKey H200Key() { return {"NVIDIA H200", "13000", "13000", "130100", "0.1.0"}; }

gt::ShapeClass Dense(int64_t m, int64_t n, int64_t k, int64_t batch = 1) {
  gt::ShapeClass c;
  c.b_layout = gemm_kernels::Layout::kColMajor;
  c.m = m;
  c.n = n;
  c.k = k;
  c.batch = batch;
  return c;
}

gt::ShapeClass Grouped() {
  gt::ShapeClass c = Dense(2048, 4096, 2048);
  c.kind = gt::LaunchKind::kGrouped;
  c.group = 32;
  return c;
}

gt::CandidateId Lt() {
  gt::CandidateId c;
  c.family = gt::CandidateFamily::kCublasLt;
  c.lt.algo_id = 66;
  c.lt.tile = 24;
  c.lt.stages = 35;
  return c;
}

std::shared_ptr<const gt::TuningTable> TableWithLt(const gt::TableKey& key) {
  auto t = std::make_shared<gt::TuningTable>(key, 4);
  EXPECT_TRUE(t->Put({Dense(4096, 4096, 4096), Lt(), 208.6, 209.2, 214.9}).ok());
  return t;
}

PortfolioSettings Settings(KernelPolicy p, std::shared_ptr<const gt::TuningTable> table) {
  PortfolioSettings s;
  s.policy = p;
  s.table = std::move(table);
  s.table_path = "tables/h200.table";
  return s;
}

TEST(KernelPolicyTest, ParsesTheThreeNamesAndRefusesOthersNamingField) {
  EXPECT_EQ(*ParseKernelPolicy("table", "kernel_policy"), KernelPolicy::kTable);
  EXPECT_EQ(*ParseKernelPolicy("heuristic", "kernel_policy"), KernelPolicy::kHeuristic);
  EXPECT_EQ(*ParseKernelPolicy("cublas", "kernel_policy"), KernelPolicy::kCublas);
  absl::StatusOr<KernelPolicy> bad = ParseKernelPolicy("fastest", "kernel_policy");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "kernel_policy: \"fastest\" is not one of table, heuristic, cublas");
}

TEST(LaunchPolicyTest, MatchingTableIsConsultedAndDescribed) {
  const LaunchPolicy p(Settings(KernelPolicy::kTable, TableWithLt(H200Key())), H200Key());
  ASSERT_NE(p.table(), nullptr);
  EXPECT_TRUE(p.table_ignored_reason().empty());
  EXPECT_TRUE(p.consults_classes());
  EXPECT_TRUE(p.may_use_cublas());
  EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), false), Lt());
  // A class the table has no entry for takes the heuristic.
  EXPECT_EQ(p.Choose(Dense(512, 512, 512), false), gt::CandidateId::Heuristic());
  EXPECT_EQ(p.Choose(Grouped(), false), gt::CandidateId::OursGroupedHeuristic());
  EXPECT_EQ(p.Describe(),
            "kernel policy table; tuning table tables/h200.table (gpu \"NVIDIA H200\", driver "
            "13000, cuda_runtime 13000, cublas 130100, build 0.1.0; 1 entries)");
}

// With tables of several GPU models, each executor keeps its model's; with
// none for its model, the first stays (and its mismatch is reported).
TEST(LaunchPolicyTest, EachGpuModelUsesItsOwnTable) {
  gt::TableKey h100 = H200Key();
  h100.gpu = "NVIDIA H100 80GB HBM3";
  PortfolioSettings s = Settings(KernelPolicy::kTable, TableWithLt(H200Key()));
  s.tables = {{"tables/h200.table", s.table}, {"tables/h100.table", TableWithLt(h100)}};

  const PortfolioSettings on_h100 = ForDevice(s, h100.gpu);
  EXPECT_EQ(on_h100.table_path, "tables/h100.table");
  EXPECT_EQ(on_h100.table->key().gpu, h100.gpu);
  const LaunchPolicy p(on_h100, h100);
  EXPECT_NE(p.table(), nullptr);
  EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), false), Lt());

  EXPECT_EQ(ForDevice(s, "NVIDIA H200").table_path, "tables/h200.table");
  gt::TableKey other = H200Key();
  other.gpu = "NVIDIA A100-SXM4-80GB";
  const PortfolioSettings on_other = ForDevice(s, other.gpu);
  EXPECT_EQ(on_other.table_path, "tables/h200.table");
  const LaunchPolicy ignored(on_other, other);
  EXPECT_EQ(ignored.table(), nullptr);
  EXPECT_NE(ignored.table_ignored_reason().find("gpu"), std::string::npos)
      << ignored.table_ignored_reason();
}

TEST(LaunchPolicyTest, DeterministicLaunchesNeverTakeTheTablesChoice) {
  const LaunchPolicy p(Settings(KernelPolicy::kTable, TableWithLt(H200Key())), H200Key());
  EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), true), gt::CandidateId::Heuristic());
  const LaunchPolicy blas(Settings(KernelPolicy::kCublas, nullptr), H200Key());
  EXPECT_EQ(blas.Choose(Dense(4096, 4096, 4096), true), gt::CandidateId::Heuristic());
  EXPECT_EQ(blas.Choose(Grouped(), true), gt::CandidateId::OursGroupedHeuristic());
}

TEST(LaunchPolicyTest, TableOfAnotherKeyIsIgnoredNamingTheField) {
  struct Case {
    gt::TableKey key;
    const char* reason;
  };
  const Case cases[] = {
      {{"NVIDIA H100 80GB HBM3", "13000", "13000", "130100", "0.1.0"},
       "made for gpu \"NVIDIA H100 80GB HBM3\" (this process: \"NVIDIA H200\")"},
      {{"NVIDIA H200", "12080", "13000", "130100", "0.1.0"},
       "made for driver \"12080\" (this process: \"13000\")"},
      {{"NVIDIA H200", "13000", "12090", "130100", "0.1.0"},
       "made for cuda_runtime \"12090\" (this process: \"13000\")"},
      {{"NVIDIA H200", "13000", "13000", "120904", "0.1.0"},
       "made for cublas \"120904\" (this process: \"130100\")"},
      {{"NVIDIA H200", "13000", "13000", "130100", "0.0.9"},
       "made for build \"0.0.9\" (this process: \"0.1.0\")"},
  };
  for (const Case& c : cases) {
    const LaunchPolicy p(Settings(KernelPolicy::kTable, TableWithLt(c.key)), H200Key());
    EXPECT_EQ(p.table(), nullptr);
    EXPECT_EQ(p.table_ignored_reason(), c.reason);
    EXPECT_FALSE(p.consults_classes());
    EXPECT_FALSE(p.may_use_cublas());
    EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), false), gt::CandidateId::Heuristic());
    EXPECT_EQ(p.Describe(), std::string("kernel policy table; tuning table tables/h200.table "
                                        "ignored: ") +
                                c.reason + "; the heuristic runs");
  }
}

TEST(LaunchPolicyTest, HeuristicPolicyNeverConsultsTheTable) {
  const LaunchPolicy p(Settings(KernelPolicy::kHeuristic, TableWithLt(H200Key())), H200Key());
  EXPECT_FALSE(p.consults_classes());
  EXPECT_FALSE(p.may_use_cublas());
  EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), false), gt::CandidateId::Heuristic());
  EXPECT_NE(p.Describe().find("not consulted under this policy"), std::string::npos);
}

TEST(LaunchPolicyTest, TableOfOurOwnMembersNeedsNoCublas) {
  auto t = std::make_shared<gt::TuningTable>(H200Key(), 4);
  gt::CandidateId forced;
  forced.tile = gemm_kernels::TileHint::k128x128;
  forced.schedule = gemm_kernels::ScheduleHint::kStreamK;
  ASSERT_TRUE(t->Put({Dense(2048, 2048, 8192), forced, 100, 99, 103}).ok());
  const LaunchPolicy p(Settings(KernelPolicy::kTable, t), H200Key());
  EXPECT_TRUE(p.consults_classes());
  EXPECT_FALSE(p.may_use_cublas());
  EXPECT_EQ(p.Choose(Dense(2048, 2048, 8192), false), forced);
}

TEST(LaunchPolicyTest, CublasPolicyPicksTheFormByLaunchKind) {
  const LaunchPolicy p(Settings(KernelPolicy::kCublas, nullptr), H200Key());
  EXPECT_TRUE(p.consults_classes());
  EXPECT_TRUE(p.may_use_cublas());
  EXPECT_EQ(p.Choose(Dense(4096, 4096, 4096), false).family,
            gt::CandidateFamily::kCublasGemmEx);
  EXPECT_EQ(p.Choose(Dense(128, 128, 128, 1024), false).family,
            gt::CandidateFamily::kCublasStridedBatched);
  EXPECT_EQ(p.Choose(Grouped(), false).family, gt::CandidateFamily::kCublasGrouped);
  EXPECT_EQ(p.Describe(), "kernel policy cublas; no tuning table");
}

TEST(LaunchPolicyTest, EmptyTablePlansAsTheHeuristic) {
  auto t = std::make_shared<gt::TuningTable>(H200Key(), 4);
  const LaunchPolicy p(Settings(KernelPolicy::kTable, t), H200Key());
  EXPECT_FALSE(p.consults_classes());
  EXPECT_FALSE(p.may_use_cublas());
}

TEST(LaunchPolicyTest, FallbacksAreCounted) {
  const LaunchPolicy p(Settings(KernelPolicy::kCublas, nullptr), H200Key());
  EXPECT_EQ(p.fallbacks(), 0u);
  for (int i = 0; i < 5; ++i)
    p.CountFallback(p.Choose(Grouped(), false), absl::InvalidArgumentError("d.dtype"));
  EXPECT_EQ(p.fallbacks(), 5u);
}

TEST(FamilyLabelTest, CublasMembersHaveTheirOwnBoundedLabels) {
  EXPECT_STREQ(CublasFamilyLabel(gt::CandidateFamily::kCublasGemmEx), "cublas_gemm_ex");
  EXPECT_STREQ(CublasFamilyLabel(gt::CandidateFamily::kCublasStridedBatched),
               "cublas_strided_batched");
  EXPECT_STREQ(CublasFamilyLabel(gt::CandidateFamily::kCublasGrouped), "cublas_grouped");
  EXPECT_STREQ(CublasFamilyLabel(gt::CandidateFamily::kCublasLt), "cublaslt");
}

// cuBLAS is loaded only where a launch may run it: the cublas policy, or a
// table that applies (every key field but cuBLAS's own) and names a cuBLAS
// member.
TEST(LaunchPolicyTest, NeedsCublasOnlyWhereALaunchMayRunIt) {
  gt::TableKey current = H200Key();
  current.cublas = "";  // not known before cuBLAS is loaded
  EXPECT_TRUE(LaunchPolicy::NeedsCublas(Settings(KernelPolicy::kCublas, nullptr), current));
  EXPECT_FALSE(LaunchPolicy::NeedsCublas(Settings(KernelPolicy::kTable, nullptr), current));
  EXPECT_TRUE(
      LaunchPolicy::NeedsCublas(Settings(KernelPolicy::kTable, TableWithLt(H200Key())), current));
  EXPECT_FALSE(LaunchPolicy::NeedsCublas(
      Settings(KernelPolicy::kHeuristic, TableWithLt(H200Key())), current));
  gt::TableKey other_gpu = H200Key();
  other_gpu.gpu = "NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(
      LaunchPolicy::NeedsCublas(Settings(KernelPolicy::kTable, TableWithLt(other_gpu)), current));
  auto ours_only = std::make_shared<gt::TuningTable>(H200Key(), 4);
  gt::CandidateId ours = gt::CandidateId::Heuristic();
  ours.tile = gemm_kernels::TileHint::k128x128;
  ASSERT_TRUE(ours_only->Put({Dense(4096, 4096, 4096), ours, 200.0, 201.0, 205.0}).ok());
  EXPECT_FALSE(LaunchPolicy::NeedsCublas(Settings(KernelPolicy::kTable, ours_only), current));
}

// A table whose cuBLAS did not load is not used: the heuristic runs, and
// Describe says why.
TEST(LaunchPolicyTest, TableUnusableWhenCublasDoesNotLoad) {
  const LaunchPolicy policy(Settings(KernelPolicy::kTable, TableWithLt(H200Key())), H200Key(),
                            "cuBLAS, which it chooses, does not start (cannot load libcublas.so.13)");
  EXPECT_EQ(policy.table(), nullptr);
  EXPECT_FALSE(policy.may_use_cublas());
  EXPECT_EQ(policy.Choose(Dense(4096, 4096, 4096), false), gt::CandidateId::Heuristic());
  EXPECT_NE(policy.Describe().find("cannot load libcublas.so.13"), std::string::npos)
      << policy.Describe();
}

}  // namespace
}  // namespace gpu
}  // namespace gemm
