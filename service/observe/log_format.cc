#include "service/observe/log_format.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace gemm {
namespace {

// The fields of the LogWithFields call running on this thread, if any.
thread_local const LogFields* current_fields = nullptr;

void Append(spdlog::memory_buf_t& dest, absl::string_view s) {
  dest.append(s.data(), s.data() + s.size());
}

// A text value needs quotes when it is empty or holds a space, quote,
// '=' or a control character; inside them it is escaped as in JSON.
bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v)
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  return false;
}

class TextFormatter final : public spdlog::formatter {
 public:
  TextFormatter()
      : prefix_("[%Y-%m-%d %H:%M:%S.%e] [%l] %v", spdlog::pattern_time_type::local, "") {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    prefix_.format(msg, dest);
    if (current_fields != nullptr) {
      for (const LogField& f : *current_fields) {
        Append(dest, " ");
        Append(dest, f.key);
        Append(dest, "=");
        if (NeedsQuotes(f.value)) {
          Append(dest, "\"");
          Append(dest, JsonEscape(f.value));
          Append(dest, "\"");
        } else {
          Append(dest, f.value);
        }
      }
    }
    Append(dest, "\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<TextFormatter>();
  }

 private:
  spdlog::pattern_formatter prefix_;
};

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const absl::string_view level = spdlog::level::to_string_view(msg.level).data();
    Append(dest, "{\"time\":\"");
    Append(dest, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(msg.time),
                                  absl::UTCTimeZone()));
    Append(dest, "\",\"level\":\"");
    Append(dest, JsonEscape(level));
    Append(dest, "\",\"logger\":\"");
    Append(dest, JsonEscape(absl::string_view(msg.logger_name.data(), msg.logger_name.size())));
    Append(dest, "\",\"message\":\"");
    Append(dest, JsonEscape(absl::string_view(msg.payload.data(), msg.payload.size())));
    Append(dest, "\"");
    if (current_fields != nullptr) {
      for (const LogField& f : *current_fields) {
        // The fixed keys keep their meaning: a field of the same name is
        // written with a prefix instead of a second, conflicting key.
        const bool reserved = f.key == "time" || f.key == "level" || f.key == "logger" ||
                              f.key == "message";
        Append(dest, ",\"");
        if (reserved) Append(dest, "field_");
        Append(dest, JsonEscape(f.key));
        Append(dest, "\":\"");
        Append(dest, JsonEscape(f.value));
        Append(dest, "\"");
      }
    }
    Append(dest, "}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  size_t n;
  uint32_t cp;
  if (lead >= 0xc2 && lead <= 0xdf) {
    n = 2, cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    n = 3, cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    n = 4, cp = lead & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i) & 0x3f);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view value, absl::string_view flag) {
  if (value == "text") return LogFormat::kText;
  if (value == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": \"", value, "\" is not one of text, json"));
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  return std::make_unique<TextFormatter>();
}

void ConfigureLogging(LogFormat format, const std::string& logger_name) {
  auto logger = spdlog::stdout_color_mt(logger_name);
  logger->set_formatter(MakeLogFormatter(format));
  spdlog::set_default_logger(std::move(logger));
}

void LogWithFields(spdlog::level::level_enum level, absl::string_view message,
                   const LogFields& fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  const LogFields* outer = current_fields;
  current_fields = &fields;
  logger->log(level, "{}", fmt::string_view(message.data(), message.size()));
  current_fields = outer;
}

std::string JsonEscape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // JSON text is UTF-8: a valid sequence is kept, any other byte
      // becomes U+FFFD.
      const size_t n = Utf8SequenceLength(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace gemm
