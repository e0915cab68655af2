#include "bench/kernel_path_mix.h"

#include <algorithm>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"

namespace gemm {
namespace bench {
std::string RandomBytes(size_t elements, DType type, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(elements);
  for (float& v : values) v = dist(*rng);
  std::string out(elements * SizeOf(type), '\0');
  FromFloat(type, values.data(), out.data(), elements);
  return out;
}

namespace {

v1::Layout RandomLayout(std::mt19937* rng) {
  return (*rng)() % 2 ? v1::LAYOUT_ROW_MAJOR : v1::LAYOUT_COL_MAJOR;
}

void FillProblem(const MixOptions& options, std::mt19937* rng, v1::GemmProblem* p) {
  std::uniform_int_distribution<int> size(1, std::max(1, options.max_size));
  const uint64_t m = size(*rng), n = size(*rng), k = size(*rng);
  p->set_m(m);
  p->set_n(n);
  p->set_k(k);
  const std::string& name = options.dtypes[(*rng)() % options.dtypes.size()];
  DType type = DType::kFp32;
  if (name == "bf16") {
    type = DType::kBf16;
    p->set_input_dtype(v1::DATA_TYPE_BF16);
  } else if (name == "fp16") {
    type = DType::kFp16;
    p->set_input_dtype(v1::DATA_TYPE_FP16);
  } else {
    p->set_input_dtype(v1::DATA_TYPE_FP32);
    p->set_allow_tf32(name == "tf32");
  }
  p->set_transpose_a((*rng)() % 2);
  p->set_transpose_b((*rng)() % 2);
  p->set_output_layout(RandomLayout(rng));
  p->mutable_a()->set_layout(RandomLayout(rng));
  p->mutable_b()->set_layout(RandomLayout(rng));
  *p->mutable_a()->mutable_data() = RandomBytes(m * k, type, rng);
  *p->mutable_b()->mutable_data() = RandomBytes(k * n, type, rng);
}

}  // namespace

std::vector<v1::GemmRequest> RandomMixRequests(const MixOptions& options) {
  std::mt19937 rng(options.seed);
  std::uniform_int_distribution<int> per_request(1, std::max(1, options.max_problems_per_request));
  std::vector<v1::GemmRequest> requests;
  for (int made = 0; made < options.problems;) {
    v1::GemmRequest& r = requests.emplace_back();
    const int count = std::min(per_request(rng), options.problems - made);
    for (int i = 0; i < count; ++i) FillProblem(options, &rng, r.add_problems());
    made += count;
  }
  return requests;
}

std::map<std::string, PathTotals> LaunchTotalsByKind(const std::string& scrape) {
  std::map<std::string, PathTotals> out;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    const bool launches = absl::StartsWith(line, "gemm_launches_total{");
    const bool flops = absl::StartsWith(line, "gemm_launch_floating_point_operations_total{");
    if (!launches && !flops) continue;
    constexpr absl::string_view kKey = "kernel_kind=\"";
    const size_t at = line.find(kKey);
    const size_t close = line.rfind('}');
    if (at == absl::string_view::npos || close == absl::string_view::npos) continue;
    const size_t start = at + kKey.size();
    const size_t end = line.find('"', start);
    double value = 0;
    if (end == absl::string_view::npos ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close + 1)), &value))
      continue;
    PathTotals& t = out[std::string(line.substr(start, end - start))];
    (launches ? t.launches : t.flops) += value;
  }
  return out;
}

std::map<std::string, PathTotals> Difference(const std::map<std::string, PathTotals>& after,
                                             const std::map<std::string, PathTotals>& before) {
  std::map<std::string, PathTotals> out;
  for (const auto& [kind, a] : after) {
    PathTotals d = a;
    auto b = before.find(kind);
    if (b != before.end()) {
      d.launches -= b->second.launches;
      d.flops -= b->second.flops;
    }
    if (d.launches > 0 || d.flops > 0) out[kind] = d;
  }
  return out;
}

std::string PathTable(const std::map<std::string, PathTotals>& totals) {
  PathTotals all, portable;
  for (const auto& [kind, t] : totals) {
    all.launches += t.launches;
    all.flops += t.flops;
    if (absl::EndsWith(kind, "portable_simt")) {
      portable.launches += t.launches;
      portable.flops += t.flops;
    }
  }
  auto share = [](double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; };
  std::string out = "| kernel kind | launches | share | GFLOP | share |\n|---|---|---|---|---|\n";
  for (const auto& [kind, t] : totals)
    absl::StrAppend(&out, absl::StrFormat("| %s | %.0f | %.1f%% | %.3f | %.1f%% |\n", kind,
                                          t.launches, share(t.launches, all.launches),
                                          t.flops / 1e9, share(t.flops, all.flops)));
  absl::StrAppend(&out, absl::StrFormat("| all | %.0f | | %.3f | |\n", all.launches, all.flops / 1e9));
  absl::StrAppend(&out, absl::StrFormat(
                            "on the portable SIMT kernel: %.1f%% of launches, %.1f%% of FLOPs\n",
                            share(portable.launches, all.launches), share(portable.flops, all.flops)));
  return out;
}

}  // namespace bench
}  // namespace gemm
