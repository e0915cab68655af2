#include "client/retry_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gemm {

absl::Status ValidateRetryPolicy(const RetryPolicy& p) {
  if (p.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.max_attempts must be >= 1, got ", p.max_attempts));
  }
  if (p.initial_backoff < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("retry.initial_backoff must not be negative");
  }
  if (p.max_backoff < p.initial_backoff) {
    return absl::InvalidArgumentError("retry.max_backoff must be >= retry.initial_backoff");
  }
  if (!(p.multiplier >= 1.0) || !std::isfinite(p.multiplier)) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.multiplier must be a finite number >= 1, got ", p.multiplier));
  }
  if (!(p.jitter >= 0.0 && p.jitter <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.jitter must be in [0, 1], got ", p.jitter));
  }
  return absl::OkStatus();
}

bool IsRetryableCode(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kResourceExhausted;
}

absl::Duration BackoffDelay(const RetryPolicy& p, int retry, double uniform) {
  const double initial_s = absl::ToDoubleSeconds(p.initial_backoff);
  const double max_s = absl::ToDoubleSeconds(p.max_backoff);
  // Computed in floating point and capped before scaling, so a large retry
  // number saturates at max_backoff instead of overflowing.
  const double exponent = std::max(0, retry - 1);
  const double base_s = std::min(max_s, initial_s * std::pow(p.multiplier, exponent));
  const double u = std::clamp(uniform, 0.0, 1.0);
  const double factor = 1.0 + p.jitter * (2.0 * u - 1.0);
  return absl::Seconds(std::max(0.0, base_s * factor));
}

std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_made,
                                             const absl::Status& status, const Pushback& pushback,
                                             absl::Time now, absl::Time deadline, double uniform) {
  if (status.ok() || !IsRetryableCode(status.code())) return std::nullopt;
  if (attempts_made >= policy.max_attempts) return std::nullopt;
  if (pushback.kind == Pushback::Kind::kDontRetry) return std::nullopt;
  const absl::Duration delay = pushback.kind == Pushback::Kind::kDelay
                                   ? pushback.delay
                                   : BackoffDelay(policy, attempts_made, uniform);
  if (now + delay >= deadline) return std::nullopt;
  return delay;
}

}  // namespace gemm
