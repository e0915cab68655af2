#include "service/cuda/portfolio_policy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace gemm {
namespace gpu {

namespace gt = gemm_kernels::tuning;

namespace {
// Classes computed under the cublas policy, where no table gives a scheme:
// only the launch kind and batch count matter there, which every scheme
// keeps exactly (batch 1 is its own bucket).
constexpr int kUntabledBucketsPerOctave = 4;
}  // namespace

const std::vector<std::string>& KernelPolicyNames() {
  static const std::vector<std::string> names = {"table", "heuristic", "cublas"};
  return names;
}

const char* KernelPolicyName(KernelPolicy p) {
  switch (p) {
    case KernelPolicy::kTable:
      return "table";
    case KernelPolicy::kHeuristic:
      return "heuristic";
    case KernelPolicy::kCublas:
      return "cublas";
  }
  return "unknown";
}

absl::StatusOr<KernelPolicy> ParseKernelPolicy(absl::string_view text, absl::string_view field) {
  for (KernelPolicy p : {KernelPolicy::kTable, KernelPolicy::kHeuristic, KernelPolicy::kCublas}) {
    if (text == KernelPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", text, "\" is not one of ",
                                                 absl::StrJoin(KernelPolicyNames(), ", ")));
}

const char* CublasFamilyLabel(gt::CandidateFamily family) {
  switch (family) {
    case gt::CandidateFamily::kCublasGemmEx:
      return "cublas_gemm_ex";
    case gt::CandidateFamily::kCublasStridedBatched:
      return "cublas_strided_batched";
    case gt::CandidateFamily::kCublasGrouped:
      return "cublas_grouped";
    case gt::CandidateFamily::kCublasLt:
      return "cublaslt";
    case gt::CandidateFamily::kOurs:
    case gt::CandidateFamily::kOursGrouped:
      break;
  }
  return "none";
}

namespace {
bool NamesCublasMember(const gt::TuningTable& table) {
  for (const gt::TableEntry& e : table.entries()) {
    if (e.choice.family != gt::CandidateFamily::kOurs &&
        e.choice.family != gt::CandidateFamily::kOursGrouped)
      return true;
  }
  return false;
}
}  // namespace

PortfolioSettings ForDevice(const PortfolioSettings& settings, const std::string& gpu) {
  PortfolioSettings out = settings;
  for (const auto& [path, table] : settings.tables) {
    if (table != nullptr && table->key().gpu == gpu) {
      out.table = table;
      out.table_path = path;
      break;
    }
  }
  return out;
}

LaunchPolicy::LaunchPolicy(const PortfolioSettings& settings, const gt::TableKey& current,
                           const std::string& table_unusable)
    : policy_(settings.policy), table_path_(settings.table_path) {
  if (settings.table == nullptr) return;
  if (!table_unusable.empty()) {
    ignored_reason_ = table_unusable;
    return;
  }
  const std::string mismatch = gt::KeyMismatch(settings.table->key(), current);
  if (!mismatch.empty()) {
    ignored_reason_ = absl::StrCat("made for ", mismatch);
    spdlog::warn("tuning table {} ignored: {}; launches take the heuristic", table_path_,
                 ignored_reason_);
    return;
  }
  table_ = settings.table;
}

bool LaunchPolicy::consults_classes() const {
  switch (policy_) {
    case KernelPolicy::kTable:
      return table_ != nullptr && table_->size() > 0;
    case KernelPolicy::kCublas:
      return true;
    case KernelPolicy::kHeuristic:
      break;
  }
  return false;
}

bool LaunchPolicy::may_use_cublas() const {
  if (policy_ == KernelPolicy::kCublas) return true;
  if (policy_ != KernelPolicy::kTable || table_ == nullptr) return false;
  return NamesCublasMember(*table_);
}

bool LaunchPolicy::NeedsCublas(const PortfolioSettings& settings, const gt::TableKey& current) {
  if (settings.policy == KernelPolicy::kCublas) return true;
  if (settings.policy != KernelPolicy::kTable || settings.table == nullptr) return false;
  gt::TableKey but_cublas = current;
  but_cublas.cublas = settings.table->key().cublas;
  return gt::KeyMismatch(settings.table->key(), but_cublas).empty() &&
         NamesCublasMember(*settings.table);
}

int LaunchPolicy::buckets_per_octave() const {
  return table_ != nullptr ? table_->buckets_per_octave() : kUntabledBucketsPerOctave;
}

gt::CandidateId LaunchPolicy::Choose(const gt::ShapeClass& shape, bool deterministic) const {
  if (deterministic) return gt::DefaultCandidate(shape.kind);
  switch (policy_) {
    case KernelPolicy::kTable:
      if (table_ != nullptr) return table_->Choose(shape);
      break;
    case KernelPolicy::kCublas: {
      gt::CandidateId c;
      c.family = shape.kind == gt::LaunchKind::kGrouped ? gt::CandidateFamily::kCublasGrouped
                 : shape.batch > 1                     ? gt::CandidateFamily::kCublasStridedBatched
                                                       : gt::CandidateFamily::kCublasGemmEx;
      return c;
    }
    case KernelPolicy::kHeuristic:
      break;
  }
  return gt::DefaultCandidate(shape.kind);
}

void LaunchPolicy::CountFallback(const gt::CandidateId& chosen, const absl::Status& why) const {
  const uint64_t n = fallbacks_.fetch_add(1, std::memory_order_relaxed) + 1;
  if ((n & (n - 1)) != 0) return;  // not a power of two
  spdlog::warn(
      "kernel portfolio: {} cannot run a launch of its class ({}); it ran the heuristic's "
      "choice instead ({} such launch(es) so far)",
      gt::CandidateToString(chosen), std::string(why.message()), n);
}

std::string LaunchPolicy::Describe() const {
  std::string line = absl::StrCat("kernel policy ", KernelPolicyName(policy_));
  if (table_ != nullptr) {
    const gt::TableKey& k = table_->key();
    absl::StrAppend(&line, "; tuning table ", table_path_, " (gpu \"", k.gpu, "\", driver ",
                    k.driver, ", cuda_runtime ", k.cuda_runtime, ", cublas ", k.cublas,
                    ", build ", k.build, "; ", table_->size(), " entries)");
    if (policy_ != KernelPolicy::kTable) absl::StrAppend(&line, ", not consulted under this policy");
  } else if (!ignored_reason_.empty()) {
    absl::StrAppend(&line, "; tuning table ", table_path_, " ignored: ", ignored_reason_,
                    "; the heuristic runs");
  } else {
    absl::StrAppend(&line, "; no tuning table");
  }
  return line;
}

}  // namespace gpu
}  // namespace gemm
