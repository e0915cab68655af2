#include "service/exec/calibration.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gemm {
namespace {

using ::testing::HasSubstr;

TEST(PeakFlagsTest, ParsesTflopsPerDtype) {
  auto r = ParsePeakTflops("bf16=700, fp16=700.5,fp32=60", "peak_tflops");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].kind, "bf16");
  EXPECT_DOUBLE_EQ((*r)[0].per_second, 700e12);
  EXPECT_DOUBLE_EQ((*r)[1].per_second, 700.5e12);
  EXPECT_EQ((*r)[2].kind, "fp32");
  EXPECT_DOUBLE_EQ((*r)[2].per_second, 60e12);
  for (const PeakRate& p : *r) EXPECT_EQ(p.method, "flag");
  auto empty = ParsePeakTflops("", "peak_tflops");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(PeakFlagsTest, RefusesBadTflopsNamingTheFlag) {
  for (const char* bad : {"bf16", "bf16=", "bf16=abc", "bf16=0", "bf16=-3", "bf16=nan",
                          "bf16=inf", "int8=100", "bf16=1,bf16=2", "bf16=1e9", "=5", ","}) {
    auto r = ParsePeakTflops(bad, "peak_tflops");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("--peak_tflops")) << bad;
  }
}

TEST(PeakFlagsTest, ParsesAndRefusesMemoryBandwidth) {
  auto r = ParsePeakMemoryGbps("4800", "peak_memory_gbps");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].kind, "memory");
  EXPECT_DOUBLE_EQ((*r)[0].per_second, 4.8e12);
  EXPECT_EQ((*r)[0].method, "flag");
  for (const char* bad : {"fast", "0", "-1", "1e12", "nan"}) {
    auto b = ParsePeakMemoryGbps(bad, "peak_memory_gbps");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_THAT(b.status().message(), HasSubstr("--peak_memory_gbps")) << bad;
  }
}

TEST(PeakFlagsTest, OverridesReplaceMeasuredKindsAndKeepTheOthers) {
  std::vector<PeakRate> rates = {{"fp32", 6.9e9, "measured"},
                                 {"fp16", 6.9e9, "measured"},
                                 {"memory", 2e10, "measured"}};
  ApplyPeakOverrides({{"fp32", 3e10, "flag"}, {"bf16", 3e10, "flag"}}, &rates);
  ASSERT_EQ(rates.size(), 4u);
  EXPECT_EQ(RateOf(rates, "fp32"), 3e10);
  EXPECT_EQ(rates[0].method, "flag");
  EXPECT_EQ(RateOf(rates, "fp16"), 6.9e9);
  EXPECT_EQ(rates[1].method, "measured");
  EXPECT_EQ(RateOf(rates, "bf16"), 3e10);
  EXPECT_EQ(RateOf(rates, "memory"), 2e10);
}

}  // namespace
}  // namespace gemm
