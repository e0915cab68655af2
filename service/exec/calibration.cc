#include "service/exec/calibration.h"

#include <cmath>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gemm {
namespace {

// Above any machine this service could run on (an H200 is about 2 PFLOP/s
// dense fp8, 5 TB/s): a figure beyond it is a typo in the units.
constexpr double kMaxTflops = 1e5;
constexpr double kMaxMemoryGbps = 1e6;

absl::StatusOr<double> PositiveNumber(absl::string_view text, double max,
                                      absl::string_view flag_name, absl::string_view what) {
  double v;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(text), &v) || !std::isfinite(v) || v <= 0 ||
      v > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag_name, ": ", what, " \"", text,
                                                   "\" is not a number in (0, ", max, "]"));
  }
  return v;
}

}  // namespace

absl::StatusOr<std::vector<PeakRate>> ParsePeakTflops(absl::string_view text,
                                                      absl::string_view flag_name) {
  std::vector<PeakRate> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag_name, ": \"", item, "\" is not dtype=TFLOPS (e.g. bf16=700,fp32=60)"));
    }
    const std::string kind(absl::StripAsciiWhitespace(kv[0]));
    if (kind != "fp32" && kind != "tf32" && kind != "fp16" && kind != "bf16" && kind != "fp8") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag_name, ": unknown dtype \"", kind, "\" (fp32, tf32, fp16, bf16 or fp8)"));
    }
    if (!seen.insert(kind).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag_name, ": dtype ", kind, " given twice"));
    }
    auto tflops = PositiveNumber(kv[1], kMaxTflops, flag_name, kind);
    if (!tflops.ok()) return tflops.status();
    out.push_back({kind, *tflops * 1e12, kPeakMethodFlag});
  }
  return out;
}

absl::StatusOr<std::vector<PeakRate>> ParsePeakMemoryGbps(absl::string_view text,
                                                          absl::string_view flag_name) {
  std::vector<PeakRate> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  auto gbps = PositiveNumber(text, kMaxMemoryGbps, flag_name, "bandwidth");
  if (!gbps.ok()) return gbps.status();
  out.push_back({"memory", *gbps * 1e9, kPeakMethodFlag});
  return out;
}

void ApplyPeakOverrides(const std::vector<PeakRate>& overrides, std::vector<PeakRate>* rates) {
  for (const PeakRate& o : overrides) {
    bool replaced = false;
    for (PeakRate& r : *rates) {
      if (r.kind == o.kind) {
        r = o;
        replaced = true;
      }
    }
    if (!replaced) rates->push_back(o);
  }
}

}  // namespace gemm
