// When and how long to wait before retrying a failed call: exponential backoff
// with jitter on UNAVAILABLE and RESOURCE_EXHAUSTED, overridden by the
// server's pushback hint, and never past the call's deadline.
//
// Everything here is a pure function of its arguments (randomness comes in as
// a uniform number in [0, 1)), so the policy is tested without clocks or RPCs.
#ifndef GEMM_CLIENT_RETRY_POLICY_H_
#define GEMM_CLIENT_RETRY_POLICY_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"

namespace gemm {

struct RetryPolicy {
  // Attempts in all, the first included; 1 disables retries.
  int max_attempts = 5;
  // Delay before the first retry; multiplied by `multiplier` after each retry
  // and capped at `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  double multiplier = 2.0;
  // Each delay is scaled by a uniform factor in [1 - jitter, 1 + jitter], so
  // that clients rejected together do not come back together. In [0, 1].
  double jitter = 0.2;
};

// InvalidArgument naming the bad field, or OK.
absl::Status ValidateRetryPolicy(const RetryPolicy& policy);

// Whether a call that failed with `code` may be retried at all.
bool IsRetryableCode(absl::StatusCode code);

// The backoff before retry number `retry` (1 = the wait before the second
// attempt), with `uniform` in [0, 1) choosing the jitter.
absl::Duration BackoffDelay(const RetryPolicy& policy, int retry, double uniform);

// Decides whether to retry after attempt number `attempts_made` (1-based)
// failed with `status`, given the server's `pushback` (Pushback and its
// parsing live in common/grpc_status.h). Returns the delay to wait, or std::nullopt when the
// call should end with `status`: not retryable, attempts used up, the server
// said not to, or the retry would start at or after `deadline`.
std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_made,
                                             const absl::Status& status, const Pushback& pushback,
                                             absl::Time now, absl::Time deadline, double uniform);

}  // namespace gemm

#endif  // GEMM_CLIENT_RETRY_POLICY_H_
