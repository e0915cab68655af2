#include "service/queue/launch_plan.h"

#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kernels/config/deterministic_plan.h"

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

GemmProblemRef Fp8Problem(DType a, DType b, ScaleMode sa, ScaleMode sb) {
  GemmProblemRef p = Problem(64, 64, 256, a);
  p.shape.input_dtype_b = b;
  p.shape.output_dtype = DType::kBf16;
  p.a.dtype = a;
  p.b.dtype = b;
  p.a.scales.mode = sa;
  p.b.scales.mode = sb;
  p.b.scales.operand = OperandRole::kB;
  return p;
}

TEST(LaunchPlanTest, Fp8ProblemsBatchByBothFormatsAndBothScaleModes) {
  const GemmProblemRef base =
      Fp8Problem(DType::kFp8E4m3, DType::kFp8E4m3, ScaleMode::kTensor, ScaleMode::kChannel);
  EXPECT_TRUE(SameBatchShape(base, Fp8Problem(DType::kFp8E4m3, DType::kFp8E4m3,
                                              ScaleMode::kTensor, ScaleMode::kChannel)));
  std::vector<GemmProblemRef> variants = {
      Fp8Problem(DType::kFp8E5m2, DType::kFp8E4m3, ScaleMode::kTensor, ScaleMode::kChannel),
      Fp8Problem(DType::kFp8E4m3, DType::kFp8E5m2, ScaleMode::kTensor, ScaleMode::kChannel),
      Fp8Problem(DType::kFp8E4m3, DType::kFp8E4m3, ScaleMode::kBlock, ScaleMode::kChannel),
      Fp8Problem(DType::kFp8E4m3, DType::kFp8E4m3, ScaleMode::kTensor, ScaleMode::kTensor),
  };
  GemmProblemRef quantized = base;
  quantized.quantize = GemmProblemRef::Quantize::kA;
  quantized.quantize_mode = ScaleMode::kChannel;
  variants.push_back(quantized);
  for (size_t i = 0; i < variants.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_FALSE(SameBatchShape(base, variants[i]));
  }

  // Four of each of two format pairs: two strided batches, never mixed.
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 8; ++i)
    items.push_back(Item({i % 2 == 0 ? base : variants[1]}));
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(launches.size(), 2u);
  for (const LaunchGroup& l : launches) {
    EXPECT_EQ(l.kind, LaunchGroup::Kind::kStridedBatched);
    ASSERT_EQ(l.problems.size(), 4u);
    for (const GemmProblemRef* p : l.problems) {
      EXPECT_EQ(p->shape.b_dtype(), l.problems[0]->shape.b_dtype());
      EXPECT_EQ(p->shape.input_dtype, l.problems[0]->shape.input_dtype);
    }
  }
}

TEST(LaunchPlanTest, Fp8ProblemsOfDifferentShapesRunAloneNotGrouped) {
  // The grouped kernel reads no FP8: mixed FP8 shapes become single launches
  // beside a grouped launch of the bf16 ones.
  std::vector<std::shared_ptr<WorkItem>> items;
  for (uint64_t m : {64, 96, 128}) {
    GemmProblemRef p =
        Fp8Problem(DType::kFp8E4m3, DType::kFp8E5m2, ScaleMode::kTensor, ScaleMode::kTensor);
    p.shape.m = m;
    items.push_back(Item({p, Problem(m, 32, 32)}));
  }
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  size_t fp8_singles = 0, grouped = 0;
  for (const LaunchGroup& l : launches) {
    if (l.problems[0]->shape.fp8()) {
      EXPECT_EQ(l.kind, LaunchGroup::Kind::kSingle);
      ++fp8_singles;
    } else {
      EXPECT_EQ(l.kind, LaunchGroup::Kind::kGrouped);
      ++grouped;
    }
  }
  EXPECT_EQ(fp8_singles, 3u);
  EXPECT_EQ(grouped, 1u);
  EXPECT_EQ(CountProblems(launches), 6u);
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

namespace gemm {
namespace {

int PlanTile(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  return static_cast<int>(gemm_kernels::PlanDeterministicSm90ForLayout(
                              static_cast<int64_t>(s.m), static_cast<int64_t>(s.n),
                              static_cast<int64_t>(s.k), s.layout_d == Layout::kColMajor)
                              .tile);
}

TEST(LaunchPlanTest, DeterministicProblemsShareLaunchesOnlyWithEachOther) {
  std::vector<std::shared_ptr<WorkItem>> items;
  for (int i = 0; i < 4; ++i) {
    items.push_back(Item({Problem(128, 128, 128), Problem(100, 64, 32)}));
    items.back()->deterministic = i % 2 == 0;
  }
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(CountProblems(launches), 8u);
  for (const LaunchGroup& l : launches) {
    EXPECT_EQ(l.kind, LaunchGroup::Kind::kStridedBatched);  // two of each shape on each side
    for (const GemmProblemRef* p : l.problems) {
      const bool det = p == &items[0]->problems[0] || p == &items[0]->problems[1] ||
                       p == &items[2]->problems[0] || p == &items[2]->problems[1];
      EXPECT_EQ(det, l.deterministic);
    }
  }
}

TEST(LaunchPlanTest, DeterministicFp32NeverGroups) {
  std::vector<std::shared_ptr<WorkItem>> items = {
      Item({Problem(100, 64, 32, DType::kFp32), Problem(7, 9, 11, DType::kFp32)})};
  for (GemmProblemRef& p : items[0]->problems) {
    p.shape.allow_tf32 = true;
    p.shape.layout_b = Layout::kColMajor;  // both operands K-major: groupable when not deterministic
  }
  items[0]->deterministic = true;
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(launches.size(), 2u);
  for (const LaunchGroup& l : launches) {
    EXPECT_EQ(l.kind, LaunchGroup::Kind::kSingle);
    EXPECT_TRUE(l.deterministic);
  }
  items[0]->deterministic = false;  // the same problems otherwise group as before
  EXPECT_EQ(PlanLaunches(items, LaunchPlanOptions())[0].kind, LaunchGroup::Kind::kGrouped);
}

// A bf16 problem whose A or B rows are off the 16-byte grid runs alone
// (copied aligned onto the Hopper kernel), deterministic or not: in a grouped
// launch it would run the SIMT kernel, with other bits than alone.
TEST(LaunchPlanTest, SixteenBitRowsOffTheGridNeverGroup) {
  auto with_operands = [](uint64_t m, uint64_t n, uint64_t k) {
    GemmProblemRef p = Problem(m, n, k);
    p.a = MatrixA(p.shape, nullptr);
    p.b = MatrixB(p.shape, nullptr);
    return p;
  };
  for (bool deterministic : {false, true}) {
    // 64 x 64 x 64 and 64 x 128 x 32: every row a multiple of 16 bytes;
    // 77 x 64 x 33: A's rows are 33 elements (66 bytes); 64 x 75 x 64: B's
    // rows are 75 elements.
    std::vector<std::shared_ptr<WorkItem>> items = {
        Item({with_operands(64, 64, 64), with_operands(77, 64, 33), with_operands(64, 128, 32),
              with_operands(64, 75, 64)})};
    items[0]->deterministic = deterministic;
    const auto launches = PlanLaunches(items, LaunchPlanOptions());
    ASSERT_EQ(CountProblems(launches), 4u);
    int grouped = 0, single = 0;
    for (const LaunchGroup& l : launches) {
      if (l.kind == LaunchGroup::Kind::kGrouped) {
        ++grouped;
        for (const GemmProblemRef* p : l.problems) EXPECT_EQ(p->shape.n % 8, 0u);
        for (const GemmProblemRef* p : l.problems) EXPECT_EQ(p->shape.k % 8, 0u);
      } else {
        ++single;
      }
    }
    EXPECT_EQ(single, 2) << deterministic;
    EXPECT_LE(grouped, 1) << deterministic;
  }
}

TEST(LaunchPlanTest, Tf32ProblemsWithOperandsNotKMajorNeverGroup) {
  auto tf32 = [](uint64_t m, Layout la, bool ta, Layout lb, bool tb, bool allow_tf32 = true) {
    GemmProblemRef p = Problem(m, 64, 64, DType::kFp32);
    p.shape.allow_tf32 = allow_tf32;
    p.shape.layout_a = la;
    p.shape.transpose_a = ta;
    p.shape.layout_b = lb;
    p.shape.transpose_b = tb;
    p.a = MatrixA(p.shape, nullptr);
    p.b = MatrixB(p.shape, nullptr);
    return p;
  };
  const Layout kRow = Layout::kRowMajor, kCol = Layout::kColMajor;
  // K-major: A row-major (or col-major transposed), B col-major (or
  // row-major transposed). The last three each have one operand that is not.
  std::vector<std::shared_ptr<WorkItem>> items = {
      Item({tf32(64, kRow, false, kCol, false), tf32(96, kCol, true, kRow, true),
            tf32(128, kCol, false, kCol, false), tf32(160, kRow, false, kRow, false),
            tf32(192, kRow, true, kCol, false)})};
  const auto launches = PlanLaunches(items, LaunchPlanOptions());
  ASSERT_EQ(CountProblems(launches), 5u);
  int grouped = 0, single = 0;
  for (const LaunchGroup& l : launches) {
    if (l.kind == LaunchGroup::Kind::kGrouped) {
      ++grouped;
      ASSERT_EQ(l.problems.size(), 2u);
      EXPECT_EQ(l.problems[0]->shape.m, 64u);
      EXPECT_EQ(l.problems[1]->shape.m, 96u);
    } else {
      ++single;
    }
  }
  EXPECT_EQ(grouped, 1);
  EXPECT_EQ(single, 3);

  // Strict fp32 runs on the SIMT kernel alone too: it still groups.
  std::vector<std::shared_ptr<WorkItem>> strict = {Item(
      {tf32(64, kCol, false, kRow, false, false), tf32(96, kCol, false, kRow, false, false)})};
  const auto strict_launches = PlanLaunches(strict, LaunchPlanOptions());
  ASSERT_EQ(strict_launches.size(), 1u);
  EXPECT_EQ(strict_launches[0].kind, LaunchGroup::Kind::kGrouped);
}

// Thousands of random queues of deterministic and other requests: every
// deterministic problem lands in a launch of deterministic problems only,
// whose members all run its own plan: strided batches of identical problems,
// grouped launches of one plan tile and 16-bit inputs, and nothing else.
TEST(LaunchPlanTest, DeterministicLaunchesKeepEachMembersOwnPlan) {
  std::mt19937_64 rng(33);
  std::uniform_int_distribution<int> items_per_batch(1, 12), problems_per_item(1, 6),
      pick_shape(0, 11), coin(0, 1), dtype(0, 2);
  std::uniform_int_distribution<uint64_t> dim(1, 3000), deep(2048, 20000);
  const DType dtypes[] = {DType::kBf16, DType::kFp16, DType::kFp32};
  size_t strided = 0, grouped = 0, det_problems = 0;
  for (int round = 0; round < 2000; ++round) {
    // A small pool of shapes so that identical problems meet.
    std::vector<GemmProblemRef> pool;
    for (int i = 0; i < 12; ++i) {
      GemmProblemRef p = Problem(dim(rng), dim(rng), coin(rng) ? dim(rng) : deep(rng),
                                 dtypes[dtype(rng)]);
      p.shape.allow_tf32 = p.shape.input_dtype == DType::kFp32;
      if (coin(rng)) p.shape.layout_d = Layout::kColMajor;
      pool.push_back(p);
    }
    std::vector<std::shared_ptr<WorkItem>> items;
    for (int i = items_per_batch(rng); i > 0; --i) {
      std::vector<GemmProblemRef> problems;
      for (int j = problems_per_item(rng); j > 0; --j) problems.push_back(pool[pick_shape(rng)]);
      items.push_back(Item(std::move(problems)));
      items.back()->deterministic = coin(rng);
    }
    std::map<const GemmProblemRef*, bool> det_of;
    size_t total = 0;
    for (const auto& item : items)
      for (const GemmProblemRef& p : item->problems) {
        det_of[&p] = item->deterministic;
        ++total;
      }
    const auto launches = PlanLaunches(items, LaunchPlanOptions());
    ASSERT_EQ(CountProblems(launches), total);
    for (const LaunchGroup& l : launches) {
      const GemmProblemRef& first = *l.problems.front();
      for (const GemmProblemRef* p : l.problems) ASSERT_EQ(det_of.at(p), l.deterministic);
      if (!l.deterministic) continue;
      det_problems += l.problems.size();
      if (l.kind == LaunchGroup::Kind::kStridedBatched) {
        ++strided;
        for (const GemmProblemRef* p : l.problems) EXPECT_TRUE(SameBatchShape(*p, first));
      } else if (l.kind == LaunchGroup::Kind::kGrouped) {
        ++grouped;
        EXPECT_NE(first.shape.input_dtype, DType::kFp32);
        for (const GemmProblemRef* p : l.problems) {
          EXPECT_EQ(PlanTile(*p), PlanTile(first));
          EXPECT_EQ(p->shape.input_dtype, first.shape.input_dtype);
          EXPECT_EQ(p->shape.output_dtype, first.shape.output_dtype);
        }
      } else {
        EXPECT_EQ(l.problems.size(), 1u);
      }
    }
  }
  EXPECT_GT(strided, 0u);
  EXPECT_GT(grouped, 0u);
  EXPECT_GT(det_problems, 1000u);
}

}  // namespace
}  // namespace gemm
