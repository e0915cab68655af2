#include "service/observe/log_rate_limiter.h"

#include <limits>

#include <gtest/gtest.h>

namespace gemm {
namespace {

LogRateLimiter::Options Rate(double per_second, uint32_t burst, uint32_t max_keys = 256) {
  LogRateLimiter::Options o;
  o.lines_per_second = per_second;
  o.burst = burst;
  o.max_keys = max_keys;
  return o;
}

TEST(LogRateLimiterTest, BurstThenSuppressedUntilRefilled) {
  FakeClock clock;
  LogRateLimiter limiter(Rate(2, 3), &clock);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("Gemm RESOURCE_EXHAUSTED")) << i;
  EXPECT_FALSE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  EXPECT_FALSE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  // Half a second at 2 lines/s refills one line.
  clock.Advance(absl::Milliseconds(500));
  EXPECT_TRUE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  EXPECT_FALSE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  // A long quiet spell refills no more than the burst.
  clock.Advance(absl::Hours(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("Gemm RESOURCE_EXHAUSTED")) << i;
  EXPECT_FALSE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
}

TEST(LogRateLimiterTest, KeysHaveBucketsOfTheirOwn) {
  FakeClock clock;
  LogRateLimiter limiter(Rate(1, 1), &clock);
  EXPECT_TRUE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  EXPECT_FALSE(limiter.Admit("Gemm RESOURCE_EXHAUSTED"));
  EXPECT_TRUE(limiter.Admit("auth unknown_token"));
  EXPECT_TRUE(limiter.Admit("Gemm INVALID_ARGUMENT"));
}

TEST(LogRateLimiterTest, TakeSuppressedCountsPerKeyAndResets) {
  FakeClock clock;
  LogRateLimiter limiter(Rate(0, 1), &clock);
  EXPECT_TRUE(limiter.TakeSuppressed().empty());
  limiter.Admit("b");
  for (int i = 0; i < 4; ++i) limiter.Admit("b");
  limiter.Admit("a");
  limiter.Admit("a");
  limiter.Admit("c");  // admitted: nothing suppressed for c
  std::vector<LogRateLimiter::Suppressed> s = limiter.TakeSuppressed();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].key, "a");
  EXPECT_EQ(s[0].count, 1u);
  EXPECT_EQ(s[1].key, "b");
  EXPECT_EQ(s[1].count, 4u);
  EXPECT_TRUE(limiter.TakeSuppressed().empty());
  // At 0 lines/s the burst never comes back, however long the wait.
  clock.Advance(absl::Hours(24));
  EXPECT_FALSE(limiter.Admit("a"));
  ASSERT_EQ(limiter.TakeSuppressed().size(), 1u);
}

TEST(LogRateLimiterTest, KeysPastMaxKeysShareTheOverflowBucket) {
  FakeClock clock;
  LogRateLimiter limiter(Rate(0, 2, /*max_keys=*/3), &clock);
  EXPECT_TRUE(limiter.Admit("k1"));
  EXPECT_TRUE(limiter.Admit("k2"));
  // k3 and k4 find the map full and share "other".
  EXPECT_TRUE(limiter.Admit("k3"));
  EXPECT_TRUE(limiter.Admit("k4"));
  EXPECT_FALSE(limiter.Admit("k5"));
  // Known keys keep their own buckets.
  EXPECT_TRUE(limiter.Admit("k1"));
  std::vector<LogRateLimiter::Suppressed> s = limiter.TakeSuppressed();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].key, LogRateLimiter::kOverflowKey);
  EXPECT_EQ(s[0].count, 1u);
}

TEST(LogRateLimiterTest, ValidateNamesTheField) {
  EXPECT_TRUE(Rate(5, 20).Validate().ok());
  EXPECT_TRUE(Rate(0, 1).Validate().ok());
  EXPECT_NE(Rate(-1, 20).Validate().message().find("lines_per_second"), std::string::npos);
  EXPECT_NE(Rate(std::numeric_limits<double>::infinity(), 20).Validate().message().find(
                "lines_per_second"),
            std::string::npos);
  EXPECT_NE(Rate(5, 0).Validate().message().find("burst"), std::string::npos);
  EXPECT_NE(Rate(5, 1, 0).Validate().message().find("max_keys"), std::string::npos);
}

}  // namespace
}  // namespace gemm
