#include "kernels/tuning/candidate.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace tuning {
namespace {

ShapeClass Single(DataType in, bool tf32, int64_t batch) {
  ShapeClass c;
  c.in_dtype = in;
  c.out_dtype = in;
  c.allow_tf32 = tf32;
  c.batch = batch;
  return c;
}

TEST(CandidateTest, EveryPortfolioMemberRoundTripsThroughText) {
  std::vector<CandidateId> all = BasePortfolio(Single(DataType::kBf16, false, 1));
  ShapeClass grouped = Single(DataType::kFp16, false, 1);
  grouped.kind = LaunchKind::kGrouped;
  for (const CandidateId& c : BasePortfolio(grouped)) all.push_back(c);
  CandidateId lt;
  lt.family = CandidateFamily::kCublasLt;
  lt.lt = {66, 18, 21, 4, 2, 1, 3, 0, 7};
  all.push_back(lt);
  std::set<std::string> names;
  for (const CandidateId& c : all) {
    const std::string text = CandidateToString(c);
    EXPECT_EQ(text.find(' '), std::string::npos) << text;
    EXPECT_TRUE(names.insert(text).second) << "two members named " << text;
    absl::StatusOr<CandidateId> back = ParseCandidate(text);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, c) << text;
  }
  EXPECT_EQ(CandidateToString(lt),
            "cublaslt/algo=66/tile=18/stages=21/splitk=4/reduction=2/swizzle=1/custom=3/inner=0/"
            "cluster=7");
}

TEST(CandidateTest, PortfolioStartsWithTheDefaultAndPicksTheCublasCall) {
  const std::vector<CandidateId> single = BasePortfolio(Single(DataType::kBf16, false, 1));
  ASSERT_FALSE(single.empty());
  EXPECT_EQ(single.front(), CandidateId::Heuristic());
  EXPECT_EQ(single.back().family, CandidateFamily::kCublasGemmEx);
  // Five tiles: four cooperative with three schedules, ping-pong data-parallel.
  EXPECT_EQ(single.size(), 1u + 4 * 3 + 1 + 1);

  const std::vector<CandidateId> batched = BasePortfolio(Single(DataType::kFp16, false, 8));
  EXPECT_EQ(batched.back().family, CandidateFamily::kCublasStridedBatched);

  // Strict fp32 runs only the portable kernel: no forced configurations.
  const std::vector<CandidateId> strict = BasePortfolio(Single(DataType::kFp32, false, 1));
  ASSERT_EQ(strict.size(), 2u);
  EXPECT_EQ(strict[0], CandidateId::Heuristic());
  EXPECT_EQ(strict[1].family, CandidateFamily::kCublasGemmEx);
  EXPECT_GT(BasePortfolio(Single(DataType::kFp32, true, 1)).size(), 2u);

  ShapeClass grouped = Single(DataType::kBf16, false, 1);
  grouped.kind = LaunchKind::kGrouped;
  const std::vector<CandidateId> g = BasePortfolio(grouped);
  EXPECT_EQ(g.front(), CandidateId::OursGroupedHeuristic());
  EXPECT_EQ(g.front(), DefaultCandidate(LaunchKind::kGrouped));
  EXPECT_EQ(g.back().family, CandidateFamily::kCublasGrouped);

  // FP8: our FP8 kernel alone; cuBLASLt's algorithms come from the GPU side.
  ShapeClass fp8 = Single(DataType::kFp8E4m3, false, 1);
  fp8.in_b_dtype = DataType::kFp8E5m2;
  fp8.a_scales = fp8.b_scales = ScaleMode::kTensor;
  EXPECT_EQ(BasePortfolio(fp8), std::vector<CandidateId>{CandidateId::Heuristic()});
}

TEST(CandidateTest, ParsingIsStrict) {
  for (const char* bad :
       {"", "theirs", "ours/tile=128x256", "ours/schedule=stream_k/tile=128x256",
        "ours/tile=64x64/schedule=data_parallel", "ours/tile=128x256/schedule=sideways",
        "ours_grouped/tile=192x192", "cublas_gemm_ex/fast", "cublaslt/algo=1",
        "cublaslt/algo=x/tile=0/stages=0/splitk=1/reduction=0/swizzle=0/custom=0/inner=0/"
        "cluster=0",
        "cublaslt/algo=1/tile=-1/stages=0/splitk=1/reduction=0/swizzle=0/custom=0/inner=0/"
        "cluster=0"}) {
    absl::StatusOr<CandidateId> c = ParseCandidate(bad);
    EXPECT_FALSE(c.ok()) << bad;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(CandidateTest, FamilyLabelsAreBounded) {
  EXPECT_STREQ(FamilyLabel(CandidateFamily::kOurs), "ours");
  EXPECT_STREQ(FamilyLabel(CandidateFamily::kOursGrouped), "ours");
  EXPECT_STREQ(FamilyLabel(CandidateFamily::kCublasGemmEx), "cublas");
  EXPECT_STREQ(FamilyLabel(CandidateFamily::kCublasGrouped), "cublas");
  EXPECT_STREQ(FamilyLabel(CandidateFamily::kCublasLt), "cublaslt");
}

}  // namespace
}  // namespace tuning
}  // namespace gemm_kernels
