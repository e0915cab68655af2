// Which member of the kernel portfolio (kernels/tuning/candidate.h) a CUDA
// launch runs: the executor's policy, its tuning table and the process's
// table key turned into one choice per launch. Plain C++, tested on the CPU.
//
// Policies:
//   table      the tuning table's choice for the launch's shape class, our
//              heuristic where the table has no entry (or no table is in
//              use); the default
//   heuristic  our kernels with the heuristic's own choice; the table is not
//              consulted
//   cublas     every launch through cuBLAS: strided-batched for batch > 1,
//              GemmEx otherwise, the grouped form for grouped launches (for
//              comparing against the library alone, and as an escape hatch)
//
// Deterministic launches never consult the table or cuBLAS: their bits must
// depend only on the problem, our build and the GPU model, and a table is
// made by timing, differs between machines and changes with the driver and
// cuBLAS. They keep their deterministic plan (kernels/config/
// deterministic_plan.h) under every policy.
#ifndef GEMM_SERVICE_CUDA_PORTFOLIO_POLICY_H_
#define GEMM_SERVICE_CUDA_PORTFOLIO_POLICY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/tuning/candidate.h"
#include "kernels/tuning/shape_class.h"
#include "kernels/tuning/tuning_table.h"

namespace gemm {
namespace gpu {

enum class KernelPolicy { kTable, kHeuristic, kCublas };

// "table", "heuristic", "cublas", in that order.
const std::vector<std::string>& KernelPolicyNames();
const char* KernelPolicyName(KernelPolicy p);
// InvalidArgument naming `field` and the allowed values.
absl::StatusOr<KernelPolicy> ParseKernelPolicy(absl::string_view text, absl::string_view field);

// The metrics' family label of a cuBLAS member ("cublas_gemm_ex",
// "cublas_strided_batched", "cublas_grouped", "cublaslt"); our own members'
// label comes from the kernel that ran (KernelFamily).
const char* CublasFamilyLabel(gemm_kernels::tuning::CandidateFamily family);

struct PortfolioSettings {
  KernelPolicy policy = KernelPolicy::kTable;
  // A parsed table (tuning_table.h ReadTuningTable), or null for none.
  std::shared_ptr<const gemm_kernels::tuning::TuningTable> table;
  // Where it came from, for the log line and GetServerInfo.
  std::string table_path;
  // Every table given, with its path, `table` the first: a host's
  // executors may see different GPU models, and each keeps the table made
  // for its own (ForDevice).
  std::vector<std::pair<std::string, std::shared_ptr<const gemm_kernels::tuning::TuningTable>>>
      tables;
  // The cuBLAS library cuBLAS members open (a name the dynamic loader
  // resolves, or a path); empty: the one the build is made against. Opened
  // only where the policy or the table names a cuBLAS member.
  std::string cublas_library;
};

// `settings` with `table` and `table_path` set to the first of `tables`
// made for the GPU model `gpu` (its key's gpu field), or unchanged where
// none is (the LaunchPolicy then logs the first table's mismatch).
PortfolioSettings ForDevice(const PortfolioSettings& settings, const std::string& gpu);

// The executor's choice of portfolio member per launch. Immutable once made
// except for the fallback count; shared by the executor's lanes, which call
// it from their own threads.
class LaunchPolicy {
 public:
  // `current` is this process's key (GPU name, driver, CUDA runtime, cuBLAS,
  // build). A table made under another key is not used: one WARN line names
  // the first field that differs, and launches take the heuristic.
  // A non-empty `table_unusable` says why the table cannot be used at all
  // (cuBLAS, which it names, did not load; the caller has logged it):
  // launches take the heuristic, with no further WARN.
  LaunchPolicy(const PortfolioSettings& settings,
               const gemm_kernels::tuning::TableKey& current,
               const std::string& table_unusable = "");

  KernelPolicy policy() const { return policy_; }
  // The table consulted, or null (none given, its key differs, or the
  // policy does not consult one).
  const gemm_kernels::tuning::TuningTable* table() const { return table_.get(); }
  // Why a given table is not used ("" when it is, or when none was given).
  const std::string& table_ignored_reason() const { return ignored_reason_; }

  // Whether launches need a shape class at all (the heuristic policy, or a
  // table policy with no table, plans exactly as before the portfolio).
  bool consults_classes() const;
  // Whether any launch may run a cuBLAS member, so lanes need a cuBLAS
  // context.
  bool may_use_cublas() const;
  // Whether `settings` can lead to a cuBLAS launch under a process whose
  // key, but for the cuBLAS version, is `current`: the cublas policy, or the
  // table policy with a table made for this GPU, driver, CUDA runtime and
  // build that chooses a cuBLAS member for some class. Decides whether the
  // executor loads cuBLAS at all.
  static bool NeedsCublas(const PortfolioSettings& settings,
                          const gemm_kernels::tuning::TableKey& current);
  // The bucket scheme shape classes are computed with.
  int buckets_per_octave() const;

  // The member for a launch of class `shape`. Deterministic launches get
  // the class's default (DefaultCandidate).
  gemm_kernels::tuning::CandidateId Choose(const gemm_kernels::tuning::ShapeClass& shape,
                                           bool deterministic) const;

  // Counts a launch whose chosen member could not run its concrete problem
  // (CanImplement or set-up failed) and ran the heuristic instead. Logs a
  // WARN on the 1st, 2nd, 4th, 8th, ... such launch, so the log stays
  // bounded under a steady stream of them.
  void CountFallback(const gemm_kernels::tuning::CandidateId& chosen,
                     const absl::Status& why) const;
  uint64_t fallbacks() const { return fallbacks_.load(std::memory_order_relaxed); }

  // One line for the start-up log and GetServerInfo's kernels: the policy
  // and which table is in use (path, key, entries) or why none is.
  std::string Describe() const;

 private:
  const KernelPolicy policy_;
  const std::string table_path_;
  std::shared_ptr<const gemm_kernels::tuning::TuningTable> table_;
  std::string ignored_reason_;
  mutable std::atomic<uint64_t> fallbacks_{0};
};

}  // namespace gpu
}  // namespace gemm

#endif  // GEMM_SERVICE_CUDA_PORTFOLIO_POLICY_H_
