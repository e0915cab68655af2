#include "bench/kernel_path_mix.h"

#include <set>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "service/base/limits.h"
#include "service/observe/metrics.h"
#include "service/rpc/request_validation.h"

namespace gemm {
namespace bench {
namespace {

using ::testing::HasSubstr;

// The leading dimension of a packed stored matrix, in elements.
uint64_t LeadingDimension(uint64_t rows, uint64_t cols, v1::Layout layout) {
  return layout == v1::LAYOUT_COL_MAJOR ? rows : cols;
}

TEST(RandomMixRequests, MakesValidRequestsOfEveryKindWithMostSixteenBitRowsOffTheGrid) {
  MixOptions options;
  options.problems = 400;
  options.max_size = 300;
  const std::vector<v1::GemmRequest> requests = RandomMixRequests(options);
  int problems = 0, sixteen_bit = 0, off_grid = 0;
  std::set<std::string> kinds;
  std::set<bool> transposes, row_major_outputs;
  for (const v1::GemmRequest& r : requests) {
    ASSERT_GE(r.problems_size(), 1);
    ASSERT_LE(r.problems_size(), options.max_problems_per_request);
    v1::GemmResponse response;
    ASSERT_TRUE(ValidateRequest(r, ServiceLimits(), &response).ok());
    for (const v1::GemmProblem& p : r.problems()) {
      ++problems;
      EXPECT_GE(p.m(), 1u);
      EXPECT_LE(p.m(), 300u);
      EXPECT_LE(p.n(), 300u);
      EXPECT_LE(p.k(), 300u);
      kinds.insert(p.input_dtype() == v1::DATA_TYPE_FP32 ? (p.allow_tf32() ? "tf32" : "fp32")
                                                         : v1::DataType_Name(p.input_dtype()));
      transposes.insert(p.transpose_a());
      row_major_outputs.insert(p.output_layout() == v1::LAYOUT_ROW_MAJOR);
      if (p.input_dtype() == v1::DATA_TYPE_FP32) continue;
      ++sixteen_bit;
      const uint64_t lda = p.transpose_a() ? LeadingDimension(p.k(), p.m(), p.a().layout())
                                           : LeadingDimension(p.m(), p.k(), p.a().layout());
      const uint64_t ldb = p.transpose_b() ? LeadingDimension(p.n(), p.k(), p.b().layout())
                                           : LeadingDimension(p.k(), p.n(), p.b().layout());
      if (lda % 8 != 0 || ldb % 8 != 0) ++off_grid;
    }
  }
  EXPECT_EQ(problems, 400);
  EXPECT_EQ(kinds.size(), 4u);
  EXPECT_EQ(transposes.size(), 2u);
  EXPECT_EQ(row_major_outputs.size(), 2u);
  // Each leading dimension is on the grid one time in eight.
  EXPECT_GT(off_grid, sixteen_bit * 3 / 4);
  // The same seed makes the same workload.
  const std::vector<v1::GemmRequest> again = RandomMixRequests(options);
  ASSERT_EQ(again.size(), requests.size());
  EXPECT_EQ(again[0].SerializeAsString(), requests[0].SerializeAsString());
}

TEST(RandomMixRequests, KeepsToTheDtypesAsked) {
  MixOptions options;
  options.problems = 50;
  options.dtypes = {"bf16"};
  for (const v1::GemmRequest& r : RandomMixRequests(options))
    for (const v1::GemmProblem& p : r.problems()) EXPECT_EQ(p.input_dtype(), v1::DATA_TYPE_BF16);
}

TEST(LaunchTotalsByKind, SumsTheServersCountersOverGpusAndDiffersFromABaseline) {
  ServiceMetrics metrics;
  metrics.RecordLaunch("cuda", {"single/sm90_wgmma_padded", absl::Microseconds(5), 3e9}, 0);
  metrics.RecordLaunch("cuda", {"single/sm90_wgmma_padded", absl::Microseconds(5), 1e9}, 1);
  metrics.RecordLaunch("cuda", {"single/portable_simt", absl::Microseconds(9), 1e9}, 0);
  const auto before = LaunchTotalsByKind(metrics.Scrape());
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before.at("single/sm90_wgmma_padded").launches, 2);
  EXPECT_EQ(before.at("single/sm90_wgmma_padded").flops, 4e9);
  EXPECT_EQ(before.at("single/portable_simt").launches, 1);

  metrics.RecordLaunch("cuda", {"single/portable_simt", absl::Microseconds(9), 1e9}, 0);
  metrics.RecordLaunch("cuda", {"grouped/sm90_wgmma", absl::Microseconds(9), 2e9}, 0);
  const auto added = Difference(LaunchTotalsByKind(metrics.Scrape()), before);
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added.at("single/portable_simt").launches, 1);
  EXPECT_EQ(added.at("grouped/sm90_wgmma").flops, 2e9);

  const std::string table = PathTable(added);
  EXPECT_THAT(table, HasSubstr("| single/portable_simt | 1 | 50.0% | 1.000 | 33.3% |"));
  EXPECT_THAT(table, HasSubstr("on the portable SIMT kernel: 50.0% of launches, 33.3% of FLOPs"));
}

}  // namespace
}  // namespace bench
}  // namespace gemm
