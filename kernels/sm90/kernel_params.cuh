// Launch parameters of the Hopper GEMM kernel (gemm_kernel.cuh): the one
// __grid_constant__ struct a dense launch passes, and the per-member
// descriptors of a grouped launch. Device and host (sm90_gemm.cu) code.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/scheduler/grouped_tile_scheduler.h"
#include "kernels/sm90/epilogue_values.cuh"
#include "kernels/sm90/launch_mode.h"

namespace gemm_kernels::sm90 {

// One member of a grouped launch, in device memory (an array built on the
// host and copied there before the launch).
struct GroupedProblem {  // 64-byte aligned through its CUtensorMap members
  CUtensorMap tma_a;
  CUtensorMap tma_b;
  // 64 x 64 boxes of D when epi.tma_store; otherwise a copy of tma_a, never
  // stored through, so the kernel may fence and prefetch it unconditionally.
  CUtensorMap tma_d;
  EpilogueParams epi;  // 16-byte aligned: behind three 128-byte maps
};

// Everything the kernel reads, passed as one __grid_constant__ parameter so
// the tensor maps stay in parameter space (TMA reads them from there).
struct KernelParams {  // 64-byte aligned through its CUtensorMap members
  CUtensorMap tma_a;
  CUtensorMap tma_b;
  // 64 x 64 boxes of D (batch the third dimension) when epi.tma_store, else
  // a copy of tma_a that is never stored through.
  CUtensorMap tma_d;
  int m, n, k;
  int tiles_m, tiles_n, batch, group_m;
  int k_blocks;
  int a_batch_step, b_batch_step;  // 0 when the operand is broadcast
  EpilogueParams epi;
  // Stream-K (and split-K, which is stream-K over tiles x splits CTAs): the
  // last sk_tiles tiles are shared out by k-ranges; 0 = data-parallel.
  int64_t sk_tiles;
  float* partials;  // workspace: one BM x BN fp32 tile per slot
  int* flags;       // workspace: kFlagWordsPerSlot per slot (one per consumer); 0 between launches
  // How this launch walks and reduces its tiles (launch_mode.h). Paired
  // split-K: the partial goes through distributed shared memory
  // (PairStorePartial / PairReducePartial). A multicast: the cluster's two
  // CTAs take neighbouring n-tiles of one m-tile (KernelScheduler<false>,
  // LoadAHalfMulticast). Stored partials (kSplitKReduceKernel,
  // kSplitKGridSum): every stream-K unit stores its partial
  // (StreamKScheduler::partials_only) and flags is nullptr.
  LaunchMode mode;
  // kSplitKGridSum (SumPartialsInGrid), else nullptr: [0] counts the CTAs
  // whose partials are stored, [1] those done summing; both 0 between
  // launches. One CTA per (tile, split).
  int* grid_counters;
  // Experiments only (Sm90LaunchChoice::cta_clock; nullptr otherwise):
  // kCtaClockWords words per CTA.
  unsigned long long* cta_clock;
  // Grouped launches (kGrouped kernels) only.
  const GroupedProblemShape* group_shapes;
  const GroupedProblem* group;
  int num_problems;
  int64_t group_tiles;
};

}  // namespace gemm_kernels::sm90
