// Test-only: parses one JSON object whose values are all strings (what
// --log_format=json writes) into a map, strictly: any other JSON, or text
// that is not valid JSON, gives nullopt. Written here rather than using
// protobuf's JSON parser, whose map code crashes in ThreadSanitizer builds
// against the uninstrumented libprotobuf.
#ifndef GEMM_SERVICE_TESTING_FLAT_JSON_H_
#define GEMM_SERVICE_TESTING_FLAT_JSON_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"

namespace gemm {
namespace testing_json {

inline void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// Parses a JSON string at s[*i] (the opening quote), advancing *i past it.
inline bool ParseString(absl::string_view s, size_t* i, std::string* out) {
  if (*i >= s.size() || s[*i] != '"') return false;
  ++*i;
  while (*i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[(*i)++]);
    if (c == '"') return true;
    if (c < 0x20) return false;  // control characters must be escaped
    if (c != '\\') {
      out->push_back(static_cast<char>(c));
      continue;
    }
    if (*i >= s.size()) return false;
    const char e = s[(*i)++];
    switch (e) {
      case '"': out->push_back('"'); break;
      case '\\': out->push_back('\\'); break;
      case '/': out->push_back('/'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        uint32_t cp;
        if (*i + 4 > s.size() || !absl::SimpleHexAtoi(s.substr(*i, 4), &cp)) return false;
        *i += 4;
        if (cp >= 0xd800 && cp <= 0xdfff) return false;  // the log writes no surrogates
        AppendUtf8(cp, out);
        break;
      }
      default:
        return false;
    }
  }
  return false;
}

inline std::optional<std::map<std::string, std::string>> ParseFlatObject(absl::string_view s) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  };
  skip();
  if (i >= s.size() || s[i++] != '{') return std::nullopt;
  skip();
  if (i < s.size() && s[i] == '}') {
    ++i;
  } else {
    while (true) {
      std::string key, value;
      skip();
      if (!ParseString(s, &i, &key)) return std::nullopt;
      skip();
      if (i >= s.size() || s[i++] != ':') return std::nullopt;
      skip();
      if (!ParseString(s, &i, &value)) return std::nullopt;
      if (!out.emplace(std::move(key), std::move(value)).second) return std::nullopt;  // dup
      skip();
      if (i >= s.size()) return std::nullopt;
      if (s[i] == ',') {
        ++i;
        continue;
      }
      if (s[i++] != '}') return std::nullopt;
      break;
    }
  }
  skip();
  if (i != s.size()) return std::nullopt;
  return out;
}

}  // namespace testing_json
}  // namespace gemm

#endif  // GEMM_SERVICE_TESTING_FLAT_JSON_H_
