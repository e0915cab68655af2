// Checks the deterministic contract on a real executor: every problem's
// result bytes, computed alone, inside strided batches with random partners,
// inside grouped launches of random lists and under concurrent load on all
// of the executor's batch slots (lanes), must be identical. Shared by the
// CPU test (CI) and the GPU test (tests/determinism_gpu_test.cc).
#ifndef GEMM_TESTS_DETERMINISM_HARNESS_H_
#define GEMM_TESTS_DETERMINISM_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/gemm_problem.h"
#include "service/exec/executor.h"

namespace gemm {
namespace test {

struct DeterminismOptions {
  // Distinct random problems, and the seed of everything random.
  int problems = 200;
  uint64_t seed = 33;
  // Input dtypes drawn from; with `allow_tf32`, half the fp32 problems allow
  // tf32 (the others are strict fp32).
  std::vector<DType> dtypes = {DType::kBf16, DType::kFp16, DType::kFp32};
  bool allow_tf32 = true;
  // Shape ranges: most problems M, N, K in [1, max_dim]; every fourth K-heavy
  // (M, N in [1, max_skinny], K in [deep_k_min, deep_k_max]), the shapes
  // where the heuristic picks split-K or stream-K.
  uint64_t max_dim = 512;
  uint64_t max_skinny = 256;
  uint64_t deep_k_min = 2048;
  uint64_t deep_k_max = 8192;
  // Partners of each problem in its strided batches (random data, same
  // shape), and members of a grouped list (distinct problems).
  int max_strided_partners = 5;
  int max_group = 12;
  // Threads submitting batches at once in the concurrent phase.
  int threads = 4;
  // Run with GemmRequest.deterministic set (false: the control run, which
  // shows whether the default path differs).
  bool deterministic = true;
  // Whether the plan forms grouped launches (LaunchPlanOptions; its other
  // fields keep their defaults). The CPU executor runs them as it runs any
  // launch; a CUDA executor sets it from supports_grouped().
  bool grouped_supported = true;
};

struct DeterminismResult {
  int compared = 0;    // results compared against their lone run
  int mismatched = 0;  // of those, not bitwise identical (errors included)
  int errors = 0;      // runs, lone ones included, that did not succeed
  // Per phase ("strided", "grouped", "concurrent"), the mismatches.
  std::vector<std::pair<std::string, int>> by_phase;
  // Up to 20 descriptions of mismatching problems.
  std::vector<std::string> examples;
  // FNV-1a 64 of every lone result in problem order, and per problem, for
  // comparing two runs or two GPUs.
  uint64_t digest = 0;
  std::vector<uint64_t> problem_digests;
  std::vector<std::string> problem_names;
  // Launch kinds the phases produced ("single", "strided_batched",
  // "grouped") with their counts, so a run shows it exercised each.
  std::vector<std::pair<std::string, int>> launch_kinds;
};

// Runs the phases on `executor` (which must be idle and stay so: the check
// feeds it batches directly, as the batcher would).
DeterminismResult RunDeterminismCheck(Executor* executor, const DeterminismOptions& options);

// Writes "name digest" lines and the overall digest to `path`.
bool WriteDigests(const DeterminismResult& result, const std::string& path);

}  // namespace test
}  // namespace gemm

#endif  // GEMM_TESTS_DETERMINISM_HARNESS_H_
