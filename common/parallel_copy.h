// memcpy split over several threads for large buffers. One core copies into
// pinned staging at only 6-10 GB/s on the H200 host (bench/BASELINES.md,
// staging_bench), well below what the memory system and the PCIe link
// (55 GB/s) can take, so a large request's host copies, not its transfers or
// kernel, set its time.
#ifndef GEMM_COMMON_PARALLEL_COPY_H_
#define GEMM_COMMON_PARALLEL_COPY_H_

#include <cstddef>

namespace gemm {

// Copies `n` bytes like std::memcpy (the ranges must not overlap). Copies of
// at least kParallelCopyMinBytes use up to `max_threads` threads (0: up to
// 8, at most the hardware's), each on a slice of at least 4 MiB, when no
// other large copy is in progress (otherwise, and for smaller copies, on the
// caller's thread alone).
inline constexpr size_t kParallelCopyMinBytes = size_t{8} << 20;
void ParallelCopy(void* dst, const void* src, size_t n, int max_threads = 0);

}  // namespace gemm

#endif  // GEMM_COMMON_PARALLEL_COPY_H_
