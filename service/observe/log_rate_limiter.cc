#include "service/observe/log_rate_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace gemm {

absl::Status LogRateLimiter::Options::Validate() const {
  if (!(lines_per_second >= 0) || !std::isfinite(lines_per_second))
    return absl::InvalidArgumentError(
        absl::StrCat("lines_per_second must be finite and >= 0, got ", lines_per_second));
  if (burst == 0) return absl::InvalidArgumentError("burst must be at least 1");
  if (max_keys == 0) return absl::InvalidArgumentError("max_keys must be at least 1");
  return absl::OkStatus();
}

LogRateLimiter::LogRateLimiter(const Options& options, const Clock* clock)
    : options_(options), clock_(clock) {}

bool LogRateLimiter::Admit(absl::string_view key) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    // One slot stays for the overflow key, so max_keys bounds the map.
    if (buckets_.size() + 1 >= options_.max_keys && key != kOverflowKey) {
      key = kOverflowKey;
      it = buckets_.find(key);
    }
    if (it == buckets_.end())
      it = buckets_.emplace(std::string(key), Bucket{double(options_.burst), now, 0}).first;
  }
  Bucket& b = it->second;
  const double elapsed = std::max(0.0, absl::ToDoubleSeconds(now - b.refilled));
  b.tokens = std::min<double>(options_.burst, b.tokens + elapsed * options_.lines_per_second);
  b.refilled = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  ++b.suppressed;
  return false;
}

std::vector<LogRateLimiter::Suppressed> LogRateLimiter::TakeSuppressed() {
  std::vector<Suppressed> out;
  absl::MutexLock lock(&mu_);
  for (auto& [key, bucket] : buckets_) {
    if (bucket.suppressed == 0) continue;
    out.push_back({key, bucket.suppressed});
    bucket.suppressed = 0;
  }
  return out;
}

}  // namespace gemm
