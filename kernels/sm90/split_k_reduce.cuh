// Split-K reduction kernel: sums the fp32 partial tiles that the GEMM grid
// stored (one slot per (tile, split), fragment order) and runs the epilogue
// (split_sums.cuh). Launched on the GEMM's stream with programmatic
// dependent launch; see kernels/scheduler/split_k_reduce.h for the slot
// layout and the fixed summation order.
#pragma once

#include <cstdint>

#include "kernels/scheduler/split_k_reduce.h"
#include "kernels/sm90/ptx.cuh"
#include "kernels/sm90/split_sums.cuh"

namespace gemm_kernels::sm90 {

struct SplitKReduceParams {
  SplitSumArgs sums;
  int groups;           // SplitKReducePlan
  int quads_per_block;  // SplitKReducePlan
};

// Block b sums quads [b * quads_per_block, ...) in one pass of
// SumSplitQuads over all its threads.
template <int kBM, int kBN>
__global__ void __launch_bounds__(kSplitKReduceThreads)
    SplitKReduceKernel(const __grid_constant__ SplitKReduceParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ float4 group_sums[kSplitKReduceThreads];
  // NOTES: the GEMM grid lets this grid launch early (it triggers right after
  // its own setup); nothing here may read the partials before the GEMM has
  // completed and flushed them.
  ptx::GridDependencyWait();
  ptx::LaunchDependents();
  SumSplitQuads<kBM, kBN>(p.sums, int64_t(blockIdx.x) * p.quads_per_block, p.sums.quads,
                          p.groups, p.quads_per_block, group_sums, threadIdx.x,
                          [] { __syncthreads(); });
#endif
}

}  // namespace gemm_kernels::sm90
