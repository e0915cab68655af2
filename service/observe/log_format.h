// How gemm_server's log lines look: plain text for people, or one JSON
// object per line for log collectors (--log_format), and structured fields
// (code, caller, method, field, ...) carried beside the message in both.
//
// Text:  [2026-12-04 18:00:00.123] [info] message key=value key="a value"
// JSON:  {"time":"2026-12-04T18:00:00.123Z","level":"info","logger":"gemm",
//         "message":"message","key":"value"}
// JSON times are UTC (RFC 3339); text times are local, as spdlog writes them.
// Every string is escaped, so a caller name or status message with quotes,
// backslashes or newlines still gives one valid JSON object per line.
//
// Fields reach the formatter through the thread that logs, so they are
// seen only by synchronous loggers (spdlog's default; the server makes no
// asynchronous one).
#ifndef GEMM_SERVICE_OBSERVE_LOG_FORMAT_H_
#define GEMM_SERVICE_OBSERVE_LOG_FORMAT_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/formatter.h>
#include <spdlog/spdlog.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gemm {

enum class LogFormat { kText, kJson };

// "text" or "json"; InvalidArgument naming `flag` and the allowed values.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value, absl::string_view flag);

// A structured field of one log line.
struct LogField {
  std::string key;
  std::string value;
};
using LogFields = std::vector<LogField>;

// A formatter for spdlog sinks in `format`, writing the fields of
// LogWithFields calls.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format);

// Makes the default logger one named `logger_name` writing to stdout in
// `format`. Call once, before other threads log.
void ConfigureLogging(LogFormat format, const std::string& logger_name);

// Logs `message` at `level` on the default logger with `fields`.
void LogWithFields(spdlog::level::level_enum level, absl::string_view message,
                   const LogFields& fields);

// `s` as the contents of a JSON string (no surrounding quotes); bytes that
// are not UTF-8 become U+FFFD.
std::string JsonEscape(absl::string_view s);

// The length of the valid UTF-8 sequence `s` starts with (2 to 4 bytes), or
// 0 if it starts with none.
size_t Utf8SequenceLength(absl::string_view s);

}  // namespace gemm

#endif  // GEMM_SERVICE_OBSERVE_LOG_FORMAT_H_
