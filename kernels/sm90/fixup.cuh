// Partial tiles of the Hopper GEMM kernel's reducing schedules: the stream-K
// (and in-kernel split-K) fixup through the workspace, split-K partials
// summed by the GEMM grid itself, and paired split-K through distributed
// shared memory.
#pragma once

#include <cstdint>

#include "kernels/config/heuristic.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/scheduler/work_unit.h"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_params.cuh"
#include "kernels/sm90/ptx.cuh"
#include "kernels/sm90/split_sums.cuh"

namespace gemm_kernels::sm90 {

// ---------------------------------------------------------------- stream-K fixup
//
// A partial tile is stored in the accumulator fragment's own order: thread
// t of a consumer writes float4 i at [i][t], so both the store and the
// finalizer's read are fully coalesced and need no index arithmetic. Each
// consumer warpgroup owns its 64-row part of a slot and its own flag word
// (kFlagWordsPerSlot per slot), so the consumers never wait on each other.

template <class Cfg>
__device__ __forceinline__ float4* ConsumerPartial(const KernelParams& p, int slot,
                                                   int consumer) {
  const int64_t part = int64_t(slot) * Cfg::kConsumers + consumer;
  return reinterpret_cast<float4*>(p.partials + part * (64 * Cfg::kBN_));
}

// True when every row of this warp's fragments (16 of its consumer's 64
// rows) lies below the problem's last row: the warp stores no partials (and
// with KernelConfig::kRowChecks reads none), since nothing of them reaches D.
// Warp-uniform, so the branch costs no divergence. NOTES: for skinny
// problems (M = 7) this drops 7 of 8 warps' partial traffic.
template <class Cfg>
__device__ __forceinline__ bool WarpRowsOutside(const KernelParams& p, const TileCoord& t,
                                                int consumer) {
  const int warp = (threadIdx.x % 128) / 32;
  return t.m_block * Cfg::kBM + 64 * consumer + 16 * warp >= p.epi.m;
}

// The slot's flag tells an in-kernel finalizer; with a separate reduction
// kernel (p.flags == nullptr) there is none to tell.
template <class Cfg>
__device__ __forceinline__ void StorePartial(const KernelParams& p, const float (&acc)[Cfg::kAccRegs],
                                             const WorkUnit& w, int consumer) {
  const int tid = threadIdx.x % 128;
  float4* dst = ConsumerPartial<Cfg>(p, w.slot, consumer);
  if (!WarpRowsOutside<Cfg>(p, w.tile, consumer)) {
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs / 4; ++i) {
      __stcg(dst + i * 128 + tid,
             make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    }
  }
  if (p.flags == nullptr) return;
  const int slot = w.slot;
  ptx::NamedBarrierSync(1 + consumer, 128);
  if (tid == 0) ptx::SignalFlag(&p.flags[slot * kFlagWordsPerSlot + consumer]);
}

// acc += a partial in the fragment order StorePartial writes: load(j) gives
// this thread's float4 j (accumulators 4j .. 4j + 3).
template <int kRegs, class Load>
__device__ __forceinline__ void AddPartial(float (&acc)[kRegs], Load load) {
#pragma unroll
  for (int j = 0; j < kRegs / 4; ++j) {
    const float4 v = load(j);
    acc[4 * j] += v.x;
    acc[4 * j + 1] += v.y;
    acc[4 * j + 2] += v.z;
    acc[4 * j + 3] += v.w;
  }
}

// Adds the partials of slots first_peer, first_peer + 1, ... in that order
// (fixed: results do not depend on arrival order), resetting each flag for
// the next launch.
template <class Cfg>
__device__ __forceinline__ void ReducePartials(const KernelParams& p, float (&acc)[Cfg::kAccRegs],
                                               const WorkUnit& w, int consumer) {
  const int tid = threadIdx.x % 128;
  // Without KernelConfig::kRowChecks the finalizer reads whole partials
  // (the unread rows are never stored to D).
  const bool outside = Cfg::kRowChecks && WarpRowsOutside<Cfg>(p, w.tile, consumer);
#pragma unroll 1
  for (int i = 0; i < w.num_peers; ++i) {
    const int slot = w.first_peer + i;
    if (tid == 0) {
      ptx::WaitFlag(&p.flags[slot * kFlagWordsPerSlot + consumer]);
      p.flags[slot * kFlagWordsPerSlot + consumer] = 0;
    }
    ptx::NamedBarrierSync(1 + consumer, 128);
    if (outside) continue;
    const float4* src = ConsumerPartial<Cfg>(p, slot, consumer);
    AddPartial(acc, [&](int j) { return __ldcg(src + j * 128 + tid); });
  }
}

// ---------------------------------------------------------------- split-K summed in the grid
//
// NOTES: with the separate reduction kernel, 128 x 128 x 65536 (split-K 128)
// took 18.8 us back to back where its GEMM grid's CTAs ran ~11.7 us (round
// 14: per-CTA stamps); the rest went to the second launch, which can take an
// SM only once the GEMM's CTA there has exited, waits for the whole grid to
// complete and flush, and then holds SMs the next GEMM waits for. Here the
// same CTAs, all resident at once (grid <= SMs, as for the stream-K fixup),
// sum the partials after a grid-wide count: no second launch. Measured
//: 0-1.5 us faster where each CTA's share is one pass
// of its threads, not the 2-4 us predicted, since the partials still drain
// to L2 before the count and come back for the sums; 7-8 us slower with
// many passes, so the heuristic takes it only with one (kernels/DESIGN.md).

// Named barrier over all consumer warpgroups (ids 1-3 are per consumer).
constexpr int kAllConsumersBarrier = 4;

// After this CTA's consumers have stored their partial (StorePartial): once
// every CTA has, each CTA sums an equal share of the output's quads over
// all splits and stores them (SumSplitQuads), with every consumer thread.
template <class Cfg>
__device__ void SumPartialsInGrid(const KernelParams& p, SharedStorage<Cfg>& ss) {
  constexpr int kThreads = 128 * Cfg::kConsumers;
  const int thread = threadIdx.x - 128;  // consumer threads follow the producer warpgroup
  auto sync = [] { ptx::NamedBarrierSync(kAllConsumersBarrier, kThreads); };
  sync();
  if (thread == 0) {
    ptx::ArriveCounter(&p.grid_counters[0]);
    ptx::WaitCounter(&p.grid_counters[0], gridDim.x);
  }
  sync();
  const int64_t tiles = int64_t(p.tiles_m) * p.tiles_n * p.batch;
  SplitSumArgs args;
  args.epi = p.epi;
  args.partials = p.partials;
  args.tiles_m = p.tiles_m;
  args.tiles_n = p.tiles_n;
  args.batch = p.batch;
  args.group_m = p.group_m;
  args.splits = static_cast<int>(gridDim.x / tiles);  // one CTA per (tile, split)
  args.quads = tiles * Cfg::kBM * Cfg::kBN_ / 4;
  const int64_t first = blockIdx.x * args.quads / gridDim.x;
  const int64_t end = (blockIdx.x + 1) * args.quads / gridDim.x;
  // Split groups multiply the threads per quad while the CTA's quads leave
  // threads idle (one tile of 128 splits: 32 quads per CTA, 8 groups).
  int groups = 1;
  while (2 * groups <= 32 && 2 * groups <= args.splits && (end - first) * 2 * groups <= kThreads) {
    groups *= 2;
  }
  const int per_pass = kThreads / groups;
  // The ring is free: every stage was consumed and the producer is done.
  float4* group_sums = reinterpret_cast<float4*>(&ss.a[0][0]);
  for (int64_t q = first; q < end; q += per_pass) {
    SumSplitQuads<Cfg::kBM, Cfg::kBN_>(args, q, end, groups, per_pass, group_sums, thread, sync);
    if (groups > 1) sync();
  }
  // The last CTA to finish resets the counters: every CTA has passed the
  // wait by then, and the next launch reads them only after this grid has
  // completed (griddepcontrol.wait).
  if (thread == 0 && atomicAdd(&p.grid_counters[1], 1) == int(gridDim.x) - 1) {
    p.grid_counters[0] = 0;
    p.grid_counters[1] = 0;
  }
}

// ---------------------------------------------------------------- paired split-K
//
// NOTES: in a 2-CTA cluster the partial stays in the partial CTA's shared
// memory, in the ring its k-loop no longer needs, and the finalizer reads it
// over the SM-to-SM network: no workspace and no flags, and each CTA waits
// only on its cluster peer, which the hardware schedules with it. Built to
// remove what split-K 2 costs beyond its halved k-loop, it measured 0.35-0.9
// us slower than the workspace fixup (kernels/DESIGN.md), so the
// heuristic uses it only where there is no workspace.

// Where consumer `consumer`'s half-partial sits in the partial CTA's ring:
// 32 KB per consumer, float4 i of thread t at [i][t] as in the workspace.
template <class Cfg>
__device__ __forceinline__ float4* PairBuffer(SharedStorage<Cfg>& ss, int consumer) {
  static_assert(Cfg::kStages * Cfg::kABytes >= 2 * 64 * Cfg::kBN_ * 4, "partial fits the A ring");
  return reinterpret_cast<float4*>(&ss.a[0][0]) + consumer * (64 * Cfg::kBN_ / 4);
}

// The partial CTA (cluster rank 0). Both consumers must be done with the ring
// before either overwrites it (their last wgmma read it), hence the barrier
// over both; the producer has no more loads (one unit per CTA).
template <class Cfg>
__device__ __forceinline__ void PairStorePartial(const KernelParams& p, SharedStorage<Cfg>& ss,
                                                 const float (&acc)[Cfg::kAccRegs],
                                                 const WorkUnit& w, int consumer) {
  static_assert(Cfg::kConsumers == 2, "barrier 3 is the third consumer's in 192-row kernels");
  const int tid = threadIdx.x % 128;
  ptx::NamedBarrierSync(3, 256);
  if (!WarpRowsOutside<Cfg>(p, w.tile, consumer)) {
    float4* dst = PairBuffer(ss, consumer);
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs / 4; ++i)
      dst[i * 128 + tid] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
  }
  ptx::NamedBarrierSync(1 + consumer, 128);
  if (tid == 0) {
    ptx::MbarArriveRemote(ptx::MapToRank(&ss.pair_ready[consumer], 1));
    // Stay resident (with this shared memory) until the finalizer has read it.
    ptx::MbarWait<true>(&ss.pair_done[consumer], 0);
  }
}

// The finalizer (cluster rank 1): adds the peer's half-partial, then frees
// the peer.
template <class Cfg>
__device__ __forceinline__ void PairReducePartial(const KernelParams& p, SharedStorage<Cfg>& ss,
                                                  float (&acc)[Cfg::kAccRegs], const WorkUnit& w,
                                                  int consumer) {
  const int tid = threadIdx.x % 128;
  ptx::MbarWait<true>(&ss.pair_ready[consumer], 0);
  if (!WarpRowsOutside<Cfg>(p, w.tile, consumer)) {
    const uint32_t src = ptx::MapToRank(PairBuffer(ss, consumer), 0) + tid * 16;
    AddPartial(acc, [&](int j) { return ptx::LdSharedCluster(src + j * 128 * 16); });
  }
  ptx::NamedBarrierSync(1 + consumer, 128);
  if (tid == 0) ptx::MbarArriveRemote(ptx::MapToRank(&ss.pair_done[consumer], 0));
}

// A kPartial unit's fixup: the partial to the workspace, or, launched as
// paired split-K, to this CTA's ring for its cluster peer. Pairs exist in
// the 128-wide kernels only (the 128x256 ones have no registers to spare
// for a second fixup path, and their partial would not fit the A ring).
template <class Cfg>
__device__ __forceinline__ void StoreUnitPartial(const KernelParams& p, SharedStorage<Cfg>& ss,
                                                 const float (&acc)[Cfg::kAccRegs],
                                                 const WorkUnit& w, int consumer) {
  if constexpr (Cfg::kBN_ == 128) {
    if (p.mode == LaunchMode::kSplitKPaired) {
      PairStorePartial<Cfg>(p, ss, acc, w, consumer);
      return;
    }
  }
  StorePartial<Cfg>(p, acc, w, consumer);
}

// A kFinalize unit's fixup: the peers' partials added, from the workspace
// or from the cluster peer's ring (see StoreUnitPartial).
template <class Cfg>
__device__ __forceinline__ void AddUnitPartials(const KernelParams& p, SharedStorage<Cfg>& ss,
                                                float (&acc)[Cfg::kAccRegs], const WorkUnit& w,
                                                int consumer) {
  if constexpr (Cfg::kBN_ == 128) {
    if (p.mode == LaunchMode::kSplitKPaired) {
      PairReducePartial<Cfg>(p, ss, acc, w, consumer);
      return;
    }
  }
  ReducePartials<Cfg>(p, acc, w, consumer);
}

}  // namespace gemm_kernels::sm90
