#include "service/observe/call_log.h"

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "service/base/limits.h"
#include "service/observe/log_format.h"

namespace gemm {
namespace {

bool IsFieldPath(absl::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' &&
        c != ']')
      return false;
  return true;
}

}  // namespace

CallLog::CallLog(const LogRateLimiter::Options& rate, const Clock* clock)
    : limiter_(rate, clock) {}

spdlog::level::level_enum CallLog::LevelFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return spdlog::level::warn;
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return spdlog::level::err;
    case absl::StatusCode::kCancelled:
      return spdlog::level::debug;
    default:
      return spdlog::level::info;
  }
}

std::string CallLog::FieldOf(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return "";
  const absl::string_view head = message.substr(0, colon);
  return IsFieldPath(head) ? std::string(head) : "";
}

void CallLog::Failed(absl::string_view method, absl::string_view caller,
                     const absl::Status& status) {
  if (status.ok()) return;
  const spdlog::level::level_enum level = LevelFor(status.code());
  // Checked first: lines below the level neither log nor use up the budget.
  if (!spdlog::default_logger_raw()->should_log(level)) return;
  const std::string code = absl::StatusCodeToString(status.code());
  // StatusCodeToString gives "RESOURCE_EXHAUSTED" etc., gRPC's names.
  if (!limiter_.Admit(absl::StrCat(method, " ", code))) return;
  LogFields fields = {{"code", code}, {"method", std::string(method)},
                      {"caller", caller.empty() ? "anonymous" : std::string(caller)}};
  // A message may start with the method's own name ("Gemm: the server is
  // shutting down"): that is no field.
  if (std::string field = FieldOf(status.message()); !field.empty() && field != method)
    fields.push_back({"field", std::move(field)});
  if (auto limit = status.GetPayload(kLimitPayloadUrl); limit.has_value())
    fields.push_back({"limit", std::string(*limit)});
  LogWithFields(level, absl::StrCat(method, " refused: ", status.message()), fields);
}

void CallLog::AuthFailed(absl::string_view reason, absl::string_view method,
                         absl::string_view peer, absl::string_view message) {
  if (!spdlog::default_logger_raw()->should_log(spdlog::level::warn)) return;
  if (!limiter_.Admit(absl::StrCat("auth ", reason))) return;
  LogWithFields(spdlog::level::warn, absl::StrCat("authentication failed: ", message),
                {{"code", "UNAUTHENTICATED"},
                 {"reason", std::string(reason)},
                 {"method", std::string(method)},
                 {"peer", std::string(peer)}});
}

void CallLog::FlushSuppressed() {
  for (const LogRateLimiter::Suppressed& s : limiter_.TakeSuppressed())
    LogWithFields(spdlog::level::warn,
                  absl::StrCat("suppressed ", s.count, " similar lines (", s.key, ")"),
                  {{"suppressed", std::to_string(s.count)}, {"key", s.key}});
}

}  // namespace gemm
