// The parts of one request measured alone on the GPU, as baselines for the
// serving benchmarks: a pinned host<->device copy of the request's bytes and
// our kernel on the request's shape. Each is timed with CUDA events through
// bench/interleaved_timing (warm-up, then the median of samples), on random
// data.
#ifndef GEMM_BENCH_DEVICE_ALONE_H_
#define GEMM_BENCH_DEVICE_ALONE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "bench/interleaved_timing.h"

namespace gemm_bench {

// Milliseconds of one cudaMemcpyAsync of `bytes` from pinned host memory to
// device memory (`to_device`) or back.
bool CopyAloneMs(size_t bytes, bool to_device, const TimingPlan& plan, double* ms);

// Our kernel (kernels/gemm.h, the heuristic's choice, no workspace:
// data-parallel) for D (m x n, bf16, row-major) = A (m x k, row-major) * B
// (k x n, column-major): both operands K-major, the layout the serving
// benchmarks send (transpose_b). Random inputs, in as many sets as together
// exceed the L2 twice, used in turn.
class KernelAlone {
 public:
  KernelAlone() = default;
  ~KernelAlone();
  KernelAlone(const KernelAlone&) = delete;
  KernelAlone& operator=(const KernelAlone&) = delete;

  // Allocates and fills the sets and sets the kernel up; false (after
  // printing why) on failure.
  bool Init(int64_t m, int64_t n, int64_t k);
  // Milliseconds of one launch.
  bool Time(const TimingPlan& plan, double* ms);
  const std::string& kernel() const { return kernel_; }

 private:
  struct Sets;
  Sets* sets_ = nullptr;
  std::string kernel_;
};

// KernelAlone set up, timed once and freed.
bool KernelAloneMs(int64_t m, int64_t n, int64_t k, const TimingPlan& plan, double* ms,
                   std::string* kernel);

}  // namespace gemm_bench

#endif  // GEMM_BENCH_DEVICE_ALONE_H_
