// Interleaved timing for the kernel benchmarks: several implementations are
// sampled in turn (A, B, C, A, B, C, ...) so that slow drifts of clock or
// power affect them alike. Each sample is `runs_per_sample` back-to-back
// launches timed with CUDA events, rotating over `sets` input sets so that
// repeated runs do not measure the L2.
#ifndef GEMM_BENCH_INTERLEAVED_TIMING_H_
#define GEMM_BENCH_INTERLEAVED_TIMING_H_

#include <functional>
#include <vector>

namespace gemm_bench {

// Launches one implementation on input set `set`; false on failure.
using Launcher = std::function<bool(int set)>;

struct TimingPlan {
  int warmup = 5;  // launches per implementation before sampling
  int samples = 25;
  int runs_per_sample = 8;
};

// Fills `ms` with each implementation's median sample, in milliseconds per
// launch. Returns false (after printing the CUDA error) on any failure.
bool TimeInterleaved(const std::vector<Launcher>& impls, int sets, const TimingPlan& plan,
                     std::vector<double>* ms);

}  // namespace gemm_bench

#endif  // GEMM_BENCH_INTERLEAVED_TIMING_H_
