// Real launches of the kernel portfolio's members on one shape, timed the
// way the tuner's selection logic asks (kernels/tuning/selection.h): short
// bursts and back-to-back sustained runs, on random inputs rotated over
// enough sets to exceed the L2 four times, into outputs poisoned with 0xFF.
// Prepare also runs the member once and compares its output with
// cuBLAS's, so a member that computes wrong results is skipped, not chosen.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/tuning_shapes.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/tuning/selection.h"
#include "kernels/tuning/shape_class.h"
#include "kernels/tuning/tuning_table.h"

namespace gemm_bench {

class PortfolioRunner : public gemm_kernels::tuning::CandidateRunner {
 public:
  // Allocates the shape's rotating sets on the current device; the context
  // gives the stream every member runs on.
  static absl::StatusOr<std::unique_ptr<PortfolioRunner>> Create(
      const TuningShape& shape, gemm_kernels::cublas::CublasContext* ctx);
  ~PortfolioRunner() override;

  // The shape's class at `buckets_per_octave`.
  gemm_kernels::tuning::ShapeClass Class(int buckets_per_octave) const;
  // BasePortfolio plus up to `lt_algorithms` cuBLASLt algorithms (single
  // launches only).
  std::vector<gemm_kernels::tuning::CandidateId> Candidates(int lt_algorithms) const;
  // Floating-point operations of one launch.
  double Flops() const;

  absl::Status Prepare(const gemm_kernels::tuning::CandidateId& c) override;
  absl::StatusOr<double> RunBurst(const gemm_kernels::tuning::CandidateId& c,
                                  int launches) override;
  absl::StatusOr<double> RunSustained(const gemm_kernels::tuning::CandidateId& c,
                                      double seconds) override;
  // What the member launched (our kernel's name, cuBLAS's call), after Prepare.
  std::string KernelName(const gemm_kernels::tuning::CandidateId& c) const;

  struct Data;
  struct Member;

 private:
  // Microseconds per launch of `launches` back-to-back launches of `c`.
  absl::StatusOr<double> TimeBackToBack(const gemm_kernels::tuning::CandidateId& c,
                                        int64_t launches);
  PortfolioRunner() = default;
  absl::StatusOr<Member*> Find(const gemm_kernels::tuning::CandidateId& c);
  absl::Status Launch(Member& m, int set);

  std::unique_ptr<Data> data_;
  gemm_kernels::cublas::CublasContext* ctx_ = nullptr;
  std::map<std::string, std::unique_ptr<Member>> members_;
};

// The key of tables made on the current device with `ctx`'s cuBLAS.
absl::StatusOr<gemm_kernels::tuning::TableKey> CurrentTableKey(
    const gemm_kernels::cublas::CublasContext& ctx);

}  // namespace gemm_bench
