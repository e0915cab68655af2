// The CUDA lane's per-launch decisions (launch_decisions.h) on the CPU: the
// batches are laid out as the lane lays them out, over a fake device buffer
// address that is never dereferenced.
#include "service/cuda/launch_decisions.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "service/testing/host_problems.h"

namespace gemm {
namespace gpu {
namespace {

namespace gk = gemm_kernels;
namespace gt = gemm_kernels::tuning;

// A device buffer address for the arguments to point into; never read.
unsigned char* const kDev = reinterpret_cast<unsigned char*>(uintptr_t{1} << 40);

gt::TableKey H200Key() { return {"NVIDIA H200", "13000", "13000", "130100", "0.1.0"}; }

std::unique_ptr<LaunchPolicy> Policy(KernelPolicy p) {
  PortfolioSettings s;
  s.policy = p;
  return std::make_unique<LaunchPolicy>(s, H200Key());
}

class LaunchDecisionsTest : public ::testing::Test {
 protected:
  // D = A * B, all row-major, host operands that live as long as the test.
  GemmProblemRef Problem(uint64_t m, uint64_t n, uint64_t k, DType in = DType::kBf16,
                         DType out = DType::kFp32) {
    return host_.Make(m, n, k, in, out);
  }

  // One item holding `problems`, planned as `kind` launches (one launch of
  // them all for strided-batched and grouped), laid out.
  void Plan(std::vector<GemmProblemRef> problems, LaunchGroup::Kind kind,
            bool deterministic = false) {
    auto item = std::make_shared<WorkItem>();
    item->problems = std::move(problems);
    batch_.items = {item};
    batch_.launches.clear();
    if (kind == LaunchGroup::Kind::kSingle) {
      batch_.launches = SingleLaunchBatch(batch_.items).launches;
    } else {
      LaunchGroup g;
      g.kind = kind;
      for (const GemmProblemRef& p : item->problems) g.problems.push_back(&p);
      batch_.launches.push_back(g);
    }
    for (LaunchGroup& g : batch_.launches) g.deterministic = deterministic;
    BatchLayoutOptions options;
    options.grouped_descriptor_bytes = [](size_t n) { return 64 * n; };
    auto layout = LayOutBatch(batch_, options);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *std::move(layout);
  }

  Batch batch_;
  BatchLayout layout_;

 private:
  fake::HostProblems host_;
};

TEST_F(LaunchDecisionsTest, ASingleLaunchReadsItsOperandsFromItsSlotsAndWritesTheOutputRegion) {
  Plan({Problem(3, 5, 7), Problem(8, 8, 8)}, LaunchGroup::Kind::kSingle);
  ASSERT_EQ(layout_.launches.size(), 2u);
  const gk::GemmArguments args = GemmLaunchArguments(batch_.launches[1], layout_, 1, kDev, {});
  const Placement& pl = layout_.problem(1, 0).placement;
  EXPECT_EQ(args.m, 8);
  EXPECT_EQ(args.batch_count, 1);
  EXPECT_EQ(args.a.ptr, kDev + pl.a);
  EXPECT_EQ(args.b.ptr, kDev + pl.b);
  EXPECT_EQ(args.d.ptr, kDev + layout_.input_bytes + pl.d);
  EXPECT_EQ(args.a.batch_stride, 0);
  EXPECT_FALSE(args.copy_unaligned_operands);
  EXPECT_FALSE(args.copy_pricing.measured());
}

TEST_F(LaunchDecisionsTest, AStridedLaunchStepsThroughItsMembersAtTheirStride) {
  Plan({Problem(10, 10, 10), Problem(10, 10, 10), Problem(10, 10, 10)},
       LaunchGroup::Kind::kStridedBatched);
  const gk::GemmArguments args = GemmLaunchArguments(batch_.launches[0], layout_, 0, kDev, {});
  EXPECT_EQ(args.batch_count, 3);
  const Placement& first = layout_.problem(0, 0).placement;
  const Placement& second = layout_.problem(0, 1).placement;
  EXPECT_EQ(args.a.batch_stride, static_cast<int64_t>((second.a - first.a) / 2));  // bf16
  EXPECT_EQ(args.b.batch_stride, static_cast<int64_t>((second.b - first.b) / 2));
  EXPECT_EQ(args.d.batch_stride, static_cast<int64_t>((second.d - first.d) / 4));  // fp32 out
  EXPECT_GT(args.a.batch_stride, 0);
}

TEST_F(LaunchDecisionsTest, OperandCopiesArePricedOnlyForLaunchesThatAreNotDeterministic) {
  int asked = 0;
  LaunchRules rules;
  rules.copy_unaligned_operands = true;
  rules.copy_pricing = [&asked](DType in) {
    ++asked;
    EXPECT_EQ(in, DType::kBf16);
    gk::CopyPricing p;
    p.tensor_flops_per_s = 600e12;
    return p;
  };
  Plan({Problem(77, 33, 65)}, LaunchGroup::Kind::kSingle);
  gk::GemmArguments args = GemmLaunchArguments(batch_.launches[0], layout_, 0, kDev, rules);
  EXPECT_TRUE(args.copy_unaligned_operands);
  EXPECT_EQ(args.copy_pricing.tensor_flops_per_s, 600e12);
  EXPECT_EQ(asked, 1);

  Plan({Problem(77, 33, 65)}, LaunchGroup::Kind::kSingle, /*deterministic=*/true);
  args = GemmLaunchArguments(batch_.launches[0], layout_, 0, kDev, rules);
  EXPECT_TRUE(args.copy_unaligned_operands);  // copies wherever they apply
  EXPECT_EQ(args.copy_pricing.tensor_flops_per_s, 0);
  EXPECT_EQ(asked, 1);
}

TEST_F(LaunchDecisionsTest, GroupedMembersEachReadTheirOwnSlots) {
  Plan({Problem(16, 32, 64), Problem(48, 32, 64), Problem(16, 96, 64)},
       LaunchGroup::Kind::kGrouped);
  const std::vector<gk::GemmArguments> members = GroupedMemberArguments(layout_, 0, kDev);
  ASSERT_EQ(members.size(), 3u);
  for (size_t i = 0; i < members.size(); ++i) {
    const Placement& pl = layout_.problem(0, i).placement;
    EXPECT_EQ(members[i].a.ptr, kDev + pl.a) << i;
    EXPECT_EQ(members[i].d.ptr, kDev + layout_.input_bytes + pl.d) << i;
    EXPECT_EQ(members[i].batch_count, 1) << i;
  }
  EXPECT_EQ(members[1].m, 48);
  EXPECT_EQ(members[2].n, 96);
}

TEST_F(LaunchDecisionsTest, TheMemberIsTheHeuristicUnlessAPolicyChoosesForAnOpenLaunch) {
  Plan({Problem(256, 256, 256)}, LaunchGroup::Kind::kSingle);
  const gk::GemmArguments args = GemmLaunchArguments(batch_.launches[0], layout_, 0, kDev, {});
  EXPECT_EQ(ChooseSingleMember(nullptr, args, false), gt::CandidateId::Heuristic());
  auto heuristic = Policy(KernelPolicy::kHeuristic);
  EXPECT_EQ(ChooseSingleMember(heuristic.get(), args, false), gt::CandidateId::Heuristic());
  auto cublas = Policy(KernelPolicy::kCublas);
  EXPECT_EQ(ChooseSingleMember(cublas.get(), args, false).family,
            gt::CandidateFamily::kCublasGemmEx);
  EXPECT_EQ(ChooseSingleMember(cublas.get(), args, /*deterministic=*/true),
            gt::CandidateId::Heuristic());
  gk::GemmArguments broken = args;
  broken.k = 0;  // our kernels cannot take it: no class is looked up
  EXPECT_EQ(ChooseSingleMember(cublas.get(), broken, false), gt::CandidateId::Heuristic());

  Plan({Problem(64, 64, 64), Problem(64, 64, 64)}, LaunchGroup::Kind::kStridedBatched);
  const gk::GemmArguments strided =
      GemmLaunchArguments(batch_.launches[0], layout_, 0, kDev, {});
  EXPECT_EQ(ChooseSingleMember(cublas.get(), strided, false).family,
            gt::CandidateFamily::kCublasStridedBatched);
}

TEST_F(LaunchDecisionsTest, AGroupedLaunchRunsOurGroupedKernelUnlessThePolicyChoosesCublas) {
  Plan({Problem(128, 256, 64), Problem(256, 256, 64)}, LaunchGroup::Kind::kGrouped);
  const std::vector<gk::GemmArguments> members = GroupedMemberArguments(layout_, 0, kDev);
  auto cublas = Policy(KernelPolicy::kCublas);
  EXPECT_EQ(ChooseGroupedMember(nullptr, members, false), gt::CandidateId::OursGroupedHeuristic());
  EXPECT_EQ(ChooseGroupedMember(cublas.get(), members, true),
            gt::CandidateId::OursGroupedHeuristic());
  EXPECT_EQ(ChooseGroupedMember(cublas.get(), members, false).family,
            gt::CandidateFamily::kCublasGrouped);
  std::vector<gk::GemmArguments> broken = members;
  broken[1].m = 0;
  EXPECT_EQ(ChooseGroupedMember(cublas.get(), broken, false),
            gt::CandidateId::OursGroupedHeuristic());
}

TEST_F(LaunchDecisionsTest, OnlyLargeSingleLaunchesWithAWorkspaceInBoundsReduce) {
  LaunchRules rules;
  rules.reducing_min_flops = 2.0 * 256 * 256 * 256;
  rules.max_reducing_workspace_bytes = 1 << 20;
  Plan({Problem(256, 256, 256)}, LaunchGroup::Kind::kSingle);
  const LaunchGroup& g = batch_.launches[0];
  const GemmProblemRef& p = *layout_.problem(0, 0).problem;

  ReducingChoice c = ChooseReducing(g, p, 4096, rules);
  EXPECT_TRUE(c.reducing);
  EXPECT_EQ(c.workspace, 4096u);
  c = ChooseReducing(g, p, 0, rules);  // data-parallel or paired split-K
  EXPECT_FALSE(c.reducing);
  c = ChooseReducing(g, p, (1 << 20) + 1, rules);  // over the bound: data-parallel
  EXPECT_FALSE(c.reducing);
  EXPECT_EQ(c.workspace, (1u << 20) + 1);

  LaunchRules off = rules;
  off.reducing_schedules = false;
  EXPECT_FALSE(ChooseReducing(g, p, 4096, off).reducing);
  LaunchRules higher = rules;
  higher.reducing_min_flops = rules.reducing_min_flops * 2;
  EXPECT_FALSE(ChooseReducing(g, p, 4096, higher).reducing);
  LaunchGroup deterministic = g;
  deterministic.deterministic = true;
  EXPECT_FALSE(ChooseReducing(deterministic, p, 4096, rules).reducing);
  LaunchGroup strided = g;
  strided.kind = LaunchGroup::Kind::kStridedBatched;
  EXPECT_FALSE(ChooseReducing(strided, p, 4096, rules).reducing);
}

TEST(LaunchLabelsTest, TheLabelNamesTheLaunchKindFamilyAndPath) {
  using K = LaunchGroup::Kind;
  EXPECT_EQ(OursLaunchLabel(K::kSingle, gk::KernelKind::kSm90TmaWgmma, false, DType::kBf16, false),
            "single/sm90_wgmma");
  EXPECT_EQ(OursLaunchLabel(K::kSingle, gk::KernelKind::kSm90TmaWgmma, false, DType::kFp16, true),
            "single/sm90_wgmma_padded");
  // TF32's K-major copies are not the unaligned path.
  EXPECT_EQ(OursLaunchLabel(K::kSingle, gk::KernelKind::kSm90TmaWgmma, false, DType::kFp32, true),
            "single/sm90_wgmma");
  EXPECT_EQ(OursLaunchLabel(K::kStridedBatched, gk::KernelKind::kSm90TmaWgmma, false,
                            DType::kFp8E4m3, true),
            "strided_batched/sm90_wgmma_fp8");
  EXPECT_EQ(OursLaunchLabel(K::kGrouped, gk::KernelKind::kSm90TmaWgmma, true, DType::kBf16, false),
            "grouped/sm90_wgmma");
  EXPECT_EQ(OursLaunchLabel(K::kSingle, gk::KernelKind::kPortableSimt, false, DType::kFp32, false),
            "single/portable_simt");
  EXPECT_EQ(CublasLaunchLabel(K::kSingle, gt::CandidateFamily::kCublasLt, true),
            "single/cublaslt_fp8");
  EXPECT_EQ(CublasLaunchLabel(K::kGrouped, gt::CandidateFamily::kCublasGrouped, false),
            "grouped/cublas_grouped");
}

}  // namespace
}  // namespace gpu
}  // namespace gemm
