// LogRateLimiter: keeps a flood of similar log lines (one client hammering
// a full queue, a scanner trying tokens) from filling the disk.
//
// Lines are grouped by a key, e.g. "Gemm RESOURCE_EXHAUSTED" or
// "auth unknown_token". Each key has a token bucket: it holds up to `burst`
// lines and refills at `lines_per_second`. A line that finds its bucket empty
// is not written but counted; TakeSuppressed() hands the counts over (and
// resets them) so that the owner can write one summary line per key,
// "suppressed K similar lines". Keys beyond `max_keys` share one bucket, so
// the limiter's memory stays bounded whatever the keys are.
#ifndef GEMM_SERVICE_OBSERVE_LOG_RATE_LIMITER_H_
#define GEMM_SERVICE_OBSERVE_LOG_RATE_LIMITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "service/base/clock.h"

namespace gemm {

class LogRateLimiter {
 public:
  struct Options {
    // Lines per key per second once the burst is spent; 0 writes only the
    // burst and suppresses the rest until TakeSuppressed's summary.
    double lines_per_second = 5;
    // Lines per key that may be written back to back.
    uint32_t burst = 20;
    // Distinct keys tracked; the rest share the key kOverflowKey.
    uint32_t max_keys = 256;

    // InvalidArgument naming the field.
    absl::Status Validate() const;
  };
  static constexpr char kOverflowKey[] = "other";

  // `clock` must outlive the limiter. Options must be valid (Validate()).
  LogRateLimiter(const Options& options, const Clock* clock);

  // Whether a line of `key` may be written now; if not, it is counted as
  // suppressed. Thread-safe.
  bool Admit(absl::string_view key);

  struct Suppressed {
    std::string key;
    uint64_t count = 0;
  };
  // The keys with lines suppressed since the last call, with their counts,
  // in key order; the counts start again from zero. Thread-safe.
  std::vector<Suppressed> TakeSuppressed();

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time refilled;
    uint64_t suppressed = 0;
  };

  const Options options_;
  const Clock* const clock_;
  absl::Mutex mu_;
  std::map<std::string, Bucket, std::less<>> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_LOG_RATE_LIMITER_H_
