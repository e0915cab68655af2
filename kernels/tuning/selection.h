// The tuner's choice among the portfolio members of one shape class, by
// measurement at the rate a loaded server runs them. Plain C++: the timing
// comes from an injected CandidateRunner (real launches on a GPU in the
// tuner binary, a fake in the tests).
//
// Method:
//  1. Prepare every candidate; one that fails (CanImplement, setup) is
//     skipped and its status recorded.
//  2. Interleaved bursts: `burst_rounds` rounds, each running every live
//     candidate for `burst_launches` launches in list order, so slow drifts
//     of clock and power hit all alike; each candidate's median is its
//     interleaved figure. A run that errors drops the candidate (recorded).
//  3. Finalists: the default (candidates[0]), the fastest cuBLAS/cuBLASLt
//     member and the `sustained_finalists` fastest by burst median.
//  4. Sustained: rounds in which each finalist runs alone, back to back,
//     for `sustained_seconds` (long enough to reach the card's power-capped
//     clock); at least `min_sustained_repeats` rounds, more while any
//     finalist's samples spread by more than `noise_limit` of their median,
//     up to `max_sustained_repeats`. The medians decide.
//  5. Choice: the fastest sustained median; finalists within `tie_margin`
//     of it tie and the earliest in list order wins (the default first);
//     a winner other than the default must beat the default's median by
//     `min_margin`, or the default stays.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tuning/candidate.h"

namespace gemm_kernels {
namespace tuning {

// Runs the candidates of one shape class's problem. Implementations keep
// the data (random inputs, rotated sets) and the plans between calls.
class CandidateRunner {
 public:
  virtual ~CandidateRunner() = default;
  // Sets `c` up for the class's problem: checks, plans, workspaces. An
  // error skips the candidate.
  virtual absl::Status Prepare(const CandidateId& c) = 0;
  // After Prepare: `launches` back-to-back launches; microseconds per launch.
  virtual absl::StatusOr<double> RunBurst(const CandidateId& c, int launches) = 0;
  // After Prepare: launches back to back for `seconds`; microseconds per
  // launch over that whole run.
  virtual absl::StatusOr<double> RunSustained(const CandidateId& c, double seconds) = 0;
};

struct SelectionOptions {
  int burst_rounds = 15;
  int burst_launches = 8;
  // Finalists by burst median besides the default and the best cuBLAS member.
  int sustained_finalists = 2;
  // Each sustained run. bench/power_probe counts the first 0.4 s of
  // back-to-back compute-bound launches as the clock settling to the power
  // cap, so 2 s is mostly steady state.
  double sustained_seconds = 2.0;
  int min_sustained_repeats = 3;
  int max_sustained_repeats = 5;
  // (max - min) / median of a finalist's sustained samples above which
  // another round is taken.
  double noise_limit = 0.02;
  // How much faster than the default's sustained median a winner must be.
  double min_margin = 0.01;
  // Medians within this fraction of the fastest count as tied.
  double tie_margin = 0.003;

  // InvalidArgument naming the field at fault.
  absl::Status Validate() const;
};

struct CandidateRecord {
  CandidateId id;
  // Not ok: skipped at Prepare or dropped when a run failed.
  absl::Status status;
  std::vector<double> burst_us;
  double burst_median_us = 0;
  bool finalist = false;
  std::vector<double> sustained_us;
  double sustained_median_us = 0;  // finalists that ran only
};

struct Selection {
  CandidateId choice;
  size_t choice_index = 0;               // into records (the candidates' order)
  std::vector<CandidateRecord> records;  // one per candidate, in order
  // A finalist's samples still spread past noise_limit after the last round.
  bool noisy = false;
  // Why the choice: "fastest", "tied with an earlier candidate", "within
  // the margin of the default", "the only finalist that ran".
  std::string reason;
};

// Chooses among `candidates` (candidates[0] is the class's default). Fails
// with InvalidArgument for bad options or an empty list, and
// FailedPrecondition when no candidate ran (the message lists why each
// failed). Ties and margins are applied to the sustained medians.
absl::StatusOr<Selection> SelectCandidate(const std::vector<CandidateId>& candidates,
                                          CandidateRunner& runner,
                                          const SelectionOptions& options);

// The median of `v` (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> v);

}  // namespace tuning
}  // namespace gemm_kernels
