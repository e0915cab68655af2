#include "service/launch_plan.h"

#include <set>

#include <gtest/gtest.h>

namespace gemm {
namespace {

GemmProblemRef Problem(uint64_t m, uint64_t n, uint64_t k, DType in = DType::kBf16) {
  GemmProblemRef p;
  p.shape.m = m;
  p.shape.n = n;
  p.shape.k = k;
  p.shape.input_dtype = in;
  p.shape.output_dtype = in;
  return p;
}

std::shared_ptr<WorkItem> Item(std::vector<GemmProblemRef> problems) {
  auto item = std::make_shared<WorkItem>();
  item->problems = std::move(problems);
  return item;
}

size_t CountProblems(const std::vector<LaunchGroup>& launches) {
  size_t n = 0;
  for (const LaunchGroup& l : launches) n += l.problems.size();
  return n;
}

TEST(LaunchPlanTest, IdenticalShapesAcrossRequestsFormOneStridedBatch) {
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 5; ++i) items.push_back(Item({Problem(128, 128, 128)}));
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].kind, LaunchGroup::Kind::kStridedBatched);
  ASSERT_EQ(launches[0].problems.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(launches[0].problems[i], &items[i]->problems[0]);
}

TEST(LaunchPlanTest, AnythingThatDiffersSplitsTheBatch) {
  GemmProblemRef base = Problem(64, 64, 64);
  std::vector<GemmProblemRef> variants(6, base);
  variants[1].shape.transpose_a = true;
  variants[2].alpha = 2.0;
  variants[3].shape.layout_d = Layout::kColMajor;
  variants[4].shape.allow_tf32 = true;
  variants[5].shape.output_dtype = DType::kFp32;
  for (size_t i = 1; i < variants.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_FALSE(SameBatchShape(base, variants[i]));
  }
  EXPECT_TRUE(SameBatchShape(base, Problem(64, 64, 64)));
}

TEST(LaunchPlanTest, MixedShapesOfOneTypeAreGrouped) {
  std::vector<std::shared_ptr<WorkItem>> items = {
      Item({Problem(100, 64, 32), Problem(7, 9, 11)}), Item({Problem(300, 20, 64)}),
      Item({Problem(64, 64, 64, DType::kFp16)})};
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].kind, LaunchGroup::Kind::kGrouped);
  EXPECT_EQ(launches[0].problems.size(), 3u);
  EXPECT_EQ(launches[1].kind, LaunchGroup::Kind::kSingle);  // the lone fp16 problem
  EXPECT_EQ(CountProblems(launches), 4u);
}

TEST(LaunchPlanTest, WithoutGroupedSupportMixedShapesRunSingly) {
  std::vector<std::shared_ptr<WorkItem>> items = {Item({Problem(100, 64, 32)}),
                                                  Item({Problem(7, 9, 11)})};
  LaunchPlanOptions options;
  options.grouped_supported = false;
  const auto launches = PlanLaunches(items, options);
  ASSERT_EQ(launches.size(), 2u);
  for (const LaunchGroup& l : launches) EXPECT_EQ(l.kind, LaunchGroup::Kind::kSingle);
}

TEST(LaunchPlanTest, LargeProblemsRunAlone) {
  LaunchPlanOptions options;
  options.large_problem_flops = 2.0 * 512 * 512 * 512;
  std::vector<std::shared_ptr<WorkItem>> items = {
      Item({Problem(512, 512, 512)}), Item({Problem(512, 512, 512)}), Item({Problem(64, 64, 64)})};
  const auto launches = PlanLaunches(items, options);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].kind, LaunchGroup::Kind::kSingle);
  EXPECT_EQ(launches[1].kind, LaunchGroup::Kind::kSingle);
  EXPECT_EQ(launches[2].kind, LaunchGroup::Kind::kSingle);
  EXPECT_EQ(launches[0].problems[0]->shape.m, 512u);
}

TEST(LaunchPlanTest, EveryProblemIsPlannedExactlyOnce) {
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 40; ++i) {
    std::vector<GemmProblemRef> ps;
    for (int j = 0; j <= i % 3; ++j)
      ps.push_back(Problem(1 + (i * 7 + j) % 5 * 31, 16 + i % 2, 8, i % 4 ? DType::kBf16 : DType::kFp32));
    items.push_back(Item(std::move(ps)));
  }
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  std::set<const GemmProblemRef*> seen;
  for (const LaunchGroup& l : launches)
    for (const GemmProblemRef* p : l.problems) EXPECT_TRUE(seen.insert(p).second);
  size_t total = 0;
  for (const auto& item : items) total += item->problems.size();
  EXPECT_EQ(seen.size(), total);
}

TEST(LaunchPlanTest, SingleLaunchBatchHasOneLaunchPerProblem) {
  Batch b = SingleLaunchBatch({Item({Problem(8, 8, 8), Problem(8, 8, 8)}), Item({Problem(4, 4, 4)})});
  EXPECT_EQ(b.launches.size(), 3u);
  EXPECT_EQ(b.items.size(), 2u);
}

}  // namespace
}  // namespace gemm

namespace gemm {
namespace {

TEST(LaunchPlanTest, StridedBatchesShareOneResidentOperandOrNone) {
  // Stand-ins: the plan compares resident pointers, it never reads them.
  const auto* x = reinterpret_cast<const ResidentMatrix*>(0x1000);
  const auto* y = reinterpret_cast<const ResidentMatrix*>(0x2000);
  std::vector<std::shared_ptr<WorkItem>> items;
  for (const ResidentMatrix* b : {x, x, y, y, static_cast<const ResidentMatrix*>(nullptr), x}) {
    GemmProblemRef p = Problem(64, 64, 64);
    p.b.resident = b;
    items.push_back(Item({p}));
  }
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(CountProblems(launches), 6u);
  for (const LaunchGroup& l : launches) {
    for (const GemmProblemRef* p : l.problems)
      EXPECT_EQ(p->b.resident, l.problems.front()->b.resident);
  }
  // x (3 problems) and y (2) batch; the one without a resident B runs alone.
  std::multiset<size_t> sizes;
  for (const LaunchGroup& l : launches)
    if (l.kind == LaunchGroup::Kind::kStridedBatched) sizes.insert(l.problems.size());
  EXPECT_EQ(sizes, (std::multiset<size_t>{2, 3}));
}

}  // namespace
}  // namespace gemm
