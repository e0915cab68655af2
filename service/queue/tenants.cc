#include "service/queue/tenants.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gemm {
namespace {

constexpr size_t kMaxNameLength = 64;

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name)
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  return true;
}

// Splits a line into words at whitespace; a double-quoted part (no escapes)
// may hold whitespace and '#'. An unquoted '#' ends the line.
absl::StatusOr<std::vector<std::string>> Words(absl::string_view line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false, quoted = false;
  for (char c : line) {
    if (quoted) {
      if (c == '"')
        quoted = false;
      else
        word.push_back(c);
      continue;
    }
    if (c == '#') break;
    if (c == '"') {
      quoted = true;
      in_word = true;
    } else if (absl::ascii_isspace(c)) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word.push_back(c);
      in_word = true;
    }
  }
  if (quoted) return absl::InvalidArgumentError("unterminated double quote");
  if (in_word) words.push_back(std::move(word));
  return words;
}

absl::StatusOr<uint64_t> ParseBytes(absl::string_view value) {
  static constexpr std::pair<absl::string_view, uint64_t> kSuffixes[] = {
      {"KiB", uint64_t{1} << 10}, {"MiB", uint64_t{1} << 20}, {"GiB", uint64_t{1} << 30},
      {"TiB", uint64_t{1} << 40}, {"KB", 1000},               {"MB", 1000 * 1000},
      {"GB", 1000 * 1000 * 1000}, {"TB", uint64_t{1000} * 1000 * 1000 * 1000},
  };
  uint64_t unit = 1;
  absl::string_view digits = value;
  for (const auto& [suffix, scale] : kSuffixes) {
    if (absl::EndsWith(value, suffix)) {
      unit = scale;
      digits = value.substr(0, value.size() - suffix.size());
      break;
    }
  }
  uint64_t n = 0;
  if (digits.empty() || !absl::ascii_isdigit(digits[0]) || !absl::SimpleAtoi(digits, &n) ||
      n > std::numeric_limits<uint64_t>::max() / unit)
    return absl::InvalidArgumentError(
        absl::StrCat("expected a byte count such as 1048576, 512MiB or 2GB, got \"", value, "\""));
  return n * unit;
}

absl::StatusOr<double> ParsePositive(absl::string_view value) {
  double d = 0;
  if (!absl::SimpleAtod(value, &d) || !std::isfinite(d) || !(d > 0))
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive finite number, got \"", value, "\""));
  return d;
}

// Applies one key=value of a `tenant` line to `spec`.
absl::Status ApplyKey(absl::string_view key, absl::string_view value, TenantSpec* spec) {
  auto named = [key](absl::Status st) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", st.message()));
  };
  if (key == "caller") {
    if (value.empty()) return absl::InvalidArgumentError("caller: empty identity");
    spec->callers.emplace_back(value);
  } else if (key == "weight") {
    auto w = ParsePositive(value);
    if (!w.ok()) return named(w.status());
    spec->weight = *w;
  } else if (key == "max_inflight_bytes") {
    auto b = ParseBytes(value);
    if (!b.ok()) return named(b.status());
    if (*b == 0) return absl::InvalidArgumentError("max_inflight_bytes: must be positive");
    spec->limits.max_inflight_bytes = *b;
  } else if (key == "max_resident_bytes") {
    auto b = ParseBytes(value);
    if (!b.ok()) return named(b.status());
    if (*b == 0) return absl::InvalidArgumentError("max_resident_bytes: must be positive");
    spec->limits.max_resident_bytes = *b;
  } else if (key == "max_requests_in_flight") {
    uint32_t n = 0;
    if (value.empty() || !absl::ascii_isdigit(value[0]) || !absl::SimpleAtoi(value, &n) || n == 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "max_requests_in_flight: expected a positive integer, got \"", value, "\""));
    spec->limits.max_requests_in_flight = n;
  } else if (key == "max_flops_per_s") {
    auto r = ParsePositive(value);
    if (!r.ok()) return named(r.status());
    spec->limits.max_flops_per_s = *r;
  } else if (key == "flops_burst") {
    auto b = ParsePositive(value);
    if (!b.ok()) return named(b.status());
    spec->limits.flops_burst = *b;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown key \"", key,
        "\" (known: caller, weight, max_inflight_bytes, max_requests_in_flight, "
        "max_resident_bytes, max_flops_per_s, flops_burst)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TenantSpec> ParseTenantLine(const std::vector<std::string>& words) {
  if (words.size() < 2) return absl::InvalidArgumentError("tenant: expected a name");
  TenantSpec spec;
  spec.name = words[1];
  if (!ValidName(spec.name))
    return absl::InvalidArgumentError(
        absl::StrCat("tenant: the name \"", spec.name, "\" is not [A-Za-z0-9._@-]{1,64}"));
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 2; i < words.size(); ++i) {
    const std::string& word = words[i];
    const size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0)
      return absl::InvalidArgumentError(
          absl::StrCat("tenant ", spec.name, ": expected key=value, got \"", word, "\""));
    const std::string key = word.substr(0, eq);
    if (key != "caller" && !seen.insert(key).second)
      return absl::InvalidArgumentError(
          absl::StrCat("tenant ", spec.name, ": ", key, " given twice"));
    if (absl::Status st = ApplyKey(key, absl::string_view(word).substr(eq + 1), &spec); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat("tenant ", spec.name, ": ", st.message()));
  }
  if (spec.limits.flops_burst > 0 && spec.limits.max_flops_per_s == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("tenant ", spec.name, ": flops_burst needs max_flops_per_s"));
  if (spec.limits.max_flops_per_s > 0 && spec.limits.flops_burst == 0)
    spec.limits.flops_burst = spec.limits.max_flops_per_s;  // one second's worth
  if (spec.callers.empty()) spec.callers.push_back(spec.name);
  return spec;
}

}  // namespace

absl::StatusOr<TenantsConfig> TenantsConfig::Parse(absl::string_view text,
                                                   absl::string_view source) {
  TenantsConfig config;
  std::string default_name;
  int default_line = 0;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    auto at_line = [&](absl::string_view message) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", message));
    };
    auto words = Words(line);
    if (!words.ok()) return at_line(words.status().message());
    if (words->empty()) continue;
    const std::string& directive = (*words)[0];
    if (directive == "tenant") {
      auto spec = ParseTenantLine(*words);
      if (!spec.ok()) return at_line(spec.status().message());
      spec->line = line_no;
      if (config.by_name_.contains(spec->name))
        return at_line(absl::StrCat("tenant ", spec->name, " is defined twice (first on line ",
                                    config.tenants_[config.by_name_[spec->name]].line, ")"));
      const size_t index = config.tenants_.size();
      for (const std::string& caller : spec->callers) {
        auto [it, inserted] = config.by_caller_.emplace(caller, index);
        if (!inserted)
          return at_line(absl::StrCat("tenant ", spec->name, ": caller \"", caller,
                                      "\" already belongs to tenant ",
                                      it->second == index ? spec->name
                                                          : config.tenants_[it->second].name));
      }
      config.by_name_.emplace(spec->name, index);
      config.tenants_.push_back(*std::move(spec));
    } else if (directive == "default") {
      if (words->size() != 2) return at_line("default: expected exactly one tenant name");
      if (default_line != 0)
        return at_line(absl::StrCat("default is given twice (first on line ", default_line, ")"));
      default_name = (*words)[1];
      default_line = line_no;
    } else {
      return at_line(
          absl::StrCat("unknown directive \"", directive, "\" (known: tenant, default)"));
    }
  }
  if (default_line != 0) {
    auto it = config.by_name_.find(default_name);
    if (it == config.by_name_.end())
      return absl::InvalidArgumentError(absl::StrCat(source, ":", default_line,
                                                     ": default: no tenant is named \"",
                                                     default_name, "\""));
    config.default_ = it->second;
  } else {
    auto it = config.by_name_.find(kOtherTenant);
    if (it == config.by_name_.end()) {
      TenantSpec other;
      other.name = kOtherTenant;
      it = config.by_name_.emplace(other.name, config.tenants_.size()).first;
      config.tenants_.push_back(std::move(other));
    }
    config.default_ = it->second;
  }
  return config;
}

absl::StatusOr<TenantsConfig> TenantsConfig::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the tenants file ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading the tenants file ", path));
  return Parse(text.str(), path);
}

std::string TenantsConfig::Summary() const {
  std::string out;
  for (const TenantSpec& t : tenants_)
    absl::StrAppend(&out, out.empty() ? "" : " ", t.name, "(weight ", t.weight, ")");
  absl::StrAppend(&out, "; unlisted callers: ", default_tenant());
  return out;
}

const TenantSpec& TenantsConfig::Resolve(absl::string_view caller) const {
  auto it = by_caller_.find(caller);
  return tenants_[it == by_caller_.end() ? default_ : it->second];
}

const TenantSpec* TenantsConfig::Find(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tenants_[it->second];
}

}  // namespace gemm
