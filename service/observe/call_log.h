// CallLog: the log lines of calls the server refuses or fails, and of
// failed authentications, each with the status code, the caller, the method
// and the request field or server limit the refusal names, rate-limited per
// (method, code) so that a flood cannot fill the disk (log_rate_limiter.h).
//
// Levels (LevelFor):
//   warn   UNAUTHENTICATED, PERMISSION_DENIED: someone is using the service
//          without the right credentials; worth an operator's look.
//   error  INTERNAL, UNKNOWN, DATA_LOSS: the server failed, not the request.
//   debug  CANCELLED: the client went away; routine.
//   info   every other code: routine refusals (INVALID_ARGUMENT,
//          RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNAVAILABLE while
//          draining, NOT_FOUND, ...), visible at the default level.
#ifndef GEMM_SERVICE_OBSERVE_CALL_LOG_H_
#define GEMM_SERVICE_OBSERVE_CALL_LOG_H_

#include <string>

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "service/base/clock.h"
#include "service/observe/log_rate_limiter.h"

namespace gemm {

class CallLog {
 public:
  // `clock` must outlive the log. `rate` must be valid.
  CallLog(const LogRateLimiter::Options& rate, const Clock* clock);

  // A call (or one request of a stream) of `method` answered with a non-OK
  // `status`; `caller` as CallerIdentity() names it ("" is anonymous). OK is
  // not logged. Thread-safe.
  void Failed(absl::string_view method, absl::string_view caller, const absl::Status& status);

  // A call refused before any handler ran, because its credentials did not
  // authenticate. `reason` is one of the bounded AuthFailureReason names;
  // `peer` what is known of the caller (a certificate identity, or the
  // peer address). Thread-safe.
  void AuthFailed(absl::string_view reason, absl::string_view method, absl::string_view peer,
                  absl::string_view message);

  // One line per key with lines suppressed since the last call ("suppressed
  // K similar lines"). The server calls it about once a second and at
  // shutdown.
  void FlushSuppressed();

  static spdlog::level::level_enum LevelFor(absl::StatusCode code);
  // The request field a status message names: the text before its first
  // ": " when that looks like a field path ("problems[0].a.handle"), else "".
  static std::string FieldOf(absl::string_view message);

 private:
  LogRateLimiter limiter_;
};

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_CALL_LOG_H_
