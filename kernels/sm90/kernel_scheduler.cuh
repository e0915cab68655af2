// The work-unit walk of every cooperative Hopper GEMM kernel: stream-K
// (data-parallel when sk_tiles == 0, split-K as stream-K over tiles x splits
// CTAs) for dense launches, the grouped walk for grouped ones.
#pragma once

#include "kernels/scheduler/column_pairs.h"
#include "kernels/scheduler/grouped_tile_scheduler.h"
#include "kernels/scheduler/stream_k_scheduler.h"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_params.cuh"

namespace gemm_kernels::sm90 {

// sk_tiles == 0) for dense launches, the grouped walk for grouped ones.
template <bool kGrouped>
struct KernelScheduler;

// This CTA's rank in its A-multicast cluster: the launch's clusters are
// consecutive pairs of a 1-D grid, so blockIdx.x % 2 is %cluster_ctarank.
__device__ __forceinline__ int MulticastRank() { return int(blockIdx.x % 2); }

// With A multicast the cluster walks pairs of n-tiles (scheduler/column_pairs.h).
template <>
struct KernelScheduler<false> : StreamKScheduler {
  __device__ KernelScheduler(const KernelParams& p, const GroupedProblemShape*)
      : StreamKScheduler(p.tiles_m, Multicast(p) ? PairColumns(p.tiles_n) : p.tiles_n, p.batch,
                         p.group_m, p.k_blocks, p.sk_tiles,
                         Multicast(p) ? gridDim.x / 2 : gridDim.x,
                         Multicast(p) ? blockIdx.x / 2 : blockIdx.x, StoresEveryPartial(p.mode)),
        pair_rank_(Multicast(p) ? MulticastRank() : -1) {}
  static __device__ bool Multicast(const KernelParams& p) {
    return p.mode == LaunchMode::kMulticastA;
  }
  __device__ bool Next(WorkUnit* w) {
    if (!StreamKScheduler::Next(w)) return false;
    if (pair_rank_ >= 0) w->tile = PairMember(w->tile, pair_rank_);
    return true;
  }
  int pair_rank_;  // -1 without A multicast
};

// `shapes`: p.group_shapes or its shared-memory copy.
template <>
struct KernelScheduler<true> : GroupedTileScheduler {
  __device__ KernelScheduler(const KernelParams& p, const GroupedProblemShape* shapes)
      : GroupedTileScheduler(shapes, p.num_problems, p.group_tiles, gridDim.x, blockIdx.x) {}
};

}  // namespace gemm_kernels::sm90
