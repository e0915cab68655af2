#include "client/retry_policy.h"

#include <gtest/gtest.h>

namespace gemm {
namespace {

RetryPolicy NoJitter() {
  RetryPolicy p;
  p.max_attempts = 10;
  p.initial_backoff = absl::Milliseconds(100);
  p.max_backoff = absl::Seconds(1);
  p.multiplier = 2.0;
  p.jitter = 0.0;
  return p;
}

TEST(RetryPolicyTest, DefaultsAreValid) { EXPECT_TRUE(ValidateRetryPolicy(RetryPolicy()).ok()); }

TEST(RetryPolicyTest, ValidationNamesTheField) {
  RetryPolicy p;
  p.max_attempts = 0;
  EXPECT_NE(ValidateRetryPolicy(p).message().find("max_attempts"), std::string::npos);
  p = RetryPolicy();
  p.multiplier = 0.5;
  EXPECT_NE(ValidateRetryPolicy(p).message().find("multiplier"), std::string::npos);
  p = RetryPolicy();
  p.jitter = 1.5;
  EXPECT_NE(ValidateRetryPolicy(p).message().find("jitter"), std::string::npos);
  p = RetryPolicy();
  p.max_backoff = p.initial_backoff / 2;
  EXPECT_NE(ValidateRetryPolicy(p).message().find("max_backoff"), std::string::npos);
}

TEST(RetryPolicyTest, RetryableCodes) {
  EXPECT_TRUE(IsRetryableCode(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsRetryableCode(absl::StatusCode::kResourceExhausted));
  EXPECT_FALSE(IsRetryableCode(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(IsRetryableCode(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(IsRetryableCode(absl::StatusCode::kCancelled));
  EXPECT_FALSE(IsRetryableCode(absl::StatusCode::kInternal));
  EXPECT_FALSE(IsRetryableCode(absl::StatusCode::kOk));
}

TEST(RetryPolicyTest, BackoffGrowsExponentiallyAndSaturates) {
  const RetryPolicy p = NoJitter();
  EXPECT_EQ(BackoffDelay(p, 1, 0.5), absl::Milliseconds(100));
  EXPECT_EQ(BackoffDelay(p, 2, 0.5), absl::Milliseconds(200));
  EXPECT_EQ(BackoffDelay(p, 3, 0.5), absl::Milliseconds(400));
  EXPECT_EQ(BackoffDelay(p, 4, 0.5), absl::Milliseconds(800));
  EXPECT_EQ(BackoffDelay(p, 5, 0.5), absl::Seconds(1));
  EXPECT_EQ(BackoffDelay(p, 1000, 0.5), absl::Seconds(1));
}

TEST(RetryPolicyTest, JitterSpansPlusMinusTheFraction) {
  RetryPolicy p = NoJitter();
  p.jitter = 0.25;
  EXPECT_EQ(BackoffDelay(p, 2, 0.0), absl::Milliseconds(150));
  EXPECT_EQ(BackoffDelay(p, 2, 0.5), absl::Milliseconds(200));
  EXPECT_NEAR(absl::ToDoubleMilliseconds(BackoffDelay(p, 2, 0.999999)), 250.0, 1e-3);
  // Out-of-range randomness is clamped, never negative.
  EXPECT_EQ(BackoffDelay(p, 2, -3.0), absl::Milliseconds(150));
  p.jitter = 1.0;
  EXPECT_EQ(BackoffDelay(p, 1, 0.0), absl::ZeroDuration());
}

class NextRetryDelayTest : public ::testing::Test {
 protected:
  const RetryPolicy policy_ = NoJitter();
  const absl::Time now_ = absl::FromUnixSeconds(1000);
  const absl::Time far_ = now_ + absl::Hours(1);
  const absl::Status exhausted_ = absl::ResourceExhaustedError("queue full");
};

TEST_F(NextRetryDelayTest, BackoffWithoutPushback) {
  EXPECT_EQ(NextRetryDelay(policy_, 1, absl::UnavailableError("down"), Pushback(), now_, far_, 0.5),
            absl::Milliseconds(100));
  EXPECT_EQ(NextRetryDelay(policy_, 3, exhausted_, Pushback(), now_, far_, 0.5),
            absl::Milliseconds(400));
}

TEST_F(NextRetryDelayTest, PushbackReplacesBackoff) {
  const Pushback pb{Pushback::Kind::kDelay, absl::Milliseconds(1234)};
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, pb, now_, far_, 0.0), absl::Milliseconds(1234));
  const Pushback zero{Pushback::Kind::kDelay, absl::ZeroDuration()};
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, zero, now_, far_, 0.0), absl::ZeroDuration());
}

TEST_F(NextRetryDelayTest, NoRetry) {
  // Not retryable.
  EXPECT_EQ(NextRetryDelay(policy_, 1, absl::InvalidArgumentError("m"), Pushback(), now_, far_, 0.5),
            std::nullopt);
  EXPECT_EQ(NextRetryDelay(policy_, 1, absl::OkStatus(), Pushback(), now_, far_, 0.5), std::nullopt);
  // The server said so.
  const Pushback dont{Pushback::Kind::kDontRetry, absl::ZeroDuration()};
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, dont, now_, far_, 0.5), std::nullopt);
  // Attempts used up.
  EXPECT_NE(NextRetryDelay(policy_, 9, exhausted_, Pushback(), now_, far_, 0.5), std::nullopt);
  EXPECT_EQ(NextRetryDelay(policy_, 10, exhausted_, Pushback(), now_, far_, 0.5), std::nullopt);
  RetryPolicy once = policy_;
  once.max_attempts = 1;
  EXPECT_EQ(NextRetryDelay(once, 1, exhausted_, Pushback(), now_, far_, 0.5), std::nullopt);
}

TEST_F(NextRetryDelayTest, NeverPastTheDeadline) {
  const Pushback pb{Pushback::Kind::kDelay, absl::Milliseconds(500)};
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, pb, now_, now_ + absl::Milliseconds(500), 0.5),
            std::nullopt);
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, pb, now_, now_ + absl::Milliseconds(501), 0.5),
            absl::Milliseconds(500));
  EXPECT_EQ(NextRetryDelay(policy_, 1, exhausted_, Pushback(), now_, now_ + absl::Milliseconds(50),
                           0.5),
            std::nullopt);
}

}  // namespace
}  // namespace gemm
