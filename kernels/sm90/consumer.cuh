// The consumer warpgroups of the Hopper GEMM kernel: the k-loop over the
// ring (wgmma), then the unit's fixup and epilogue; cooperative (the
// consumers share each tile) and ping-pong (they take alternate tiles).
#pragma once

#include <cstdint>

#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/scheduler/work_unit.h"
#include "kernels/sm90/epilogue.cuh"
#include "kernels/sm90/fixup.cuh"
#include "kernels/sm90/instrumentation.cuh"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_params.cuh"
#include "kernels/sm90/kernel_scheduler.cuh"
#include "kernels/sm90/mma.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

// True when all 64 rows of this consumer's part of tile t lie past M
// (skinny and small-M problems): it then issues no MMAs, so its peers have
// the SM's tensor cores alone, and runs no epilogue. Dense launches only.
// NOTES: skinny 7 x 8192 x 8192 (split-K 4, 128x256) went from 3.05-3.07 to
// 3.14-3.16 TB/s. In grouped launches (the last tile-row of members with
// M % 128 in [1, 64]) the same skip cost 2-3% and raised DRAM reads by 9%
//; a likely cause is that CTAs drawing such tiles run
// ahead of the round-robin walk, so the tiles in flight span more problems
// than the L2 keeps.
template <class Cfg, bool kGrouped>
__device__ __forceinline__ bool ConsumerRowsOutside(const KernelParams& p, const TileCoord& t,
                                                    int consumer) {
  return !kGrouped && t.m_block * Cfg::kBM + 64 * consumer >= p.epi.m;
}

// A consumer warp hands a ring stage back: to its own producer, and with A
// multicast (`peer` >= 0) to the cluster peer's too, whose TMA writes half
// of this CTA's stage.
template <class Cfg>
__device__ __forceinline__ void ReleaseStage(SharedStorage<Cfg>& ss, int stage, int peer) {
  ptx::MbarArrive(&ss.empty[stage]);
  if (peer >= 0) ptx::MbarArriveRemoteCta(ptx::MapToRank(&ss.empty[stage], peer));
}

template <typename In, class Cfg, bool kAKMajor, bool kBKMajor, bool kGrouped>
__device__ void ConsumerLoop(const KernelParams& p, SharedStorage<Cfg>& ss, int consumer) {
  constexpr int kBN = Cfg::kBN_;
  KernelScheduler<kGrouped> sched(p, ScheduleShapes<Cfg, kGrouped>(p, ss));
  WorkUnit w;
  const bool warp_leader = threadIdx.x % 32 == 0;
  const int peer = !kGrouped && p.mode == LaunchMode::kMulticastA ? MulticastRank() ^ 1 : -1;
  int stage = 0;
  uint32_t phase = 0;
  int unit = 0;  // cta_clock words of the first kCtaClockUnits units
  int store_problem = -1;  // staged stores: the problem whose tma_d is fenced
  // Descriptors of stage 0, k-step 0; the k-loop only adds the stage's and
  // the k-step's offsets. NOTES: built from the stage address in every
  // k-step, the descriptors took ~60 of the k-loop's ~100 instructions per
  // warp and k-block (128x256 SASS, 2026-12-02; ncu: 34.6 M instructions
  // per 4096^3 launch against cuBLAS's 16.6 M, 25.1 M now). The lane-0
  // shuffle of the consumer index was meant to mark it warp-uniform; the
  // SASS still moves each descriptor from a per-thread register to a
  // uniform one before every wgmma, and shuffling the k-range as well did
  // not change that.
  const int consumer_u = __shfl_sync(0xffffffffu, consumer, 0);
  const uint64_t desc_a0 = DescA<Cfg, kAKMajor>(ss.a[0], consumer_u, 0);
  const uint64_t desc_b0 = DescB<Cfg, kBKMajor>(ss.b[0], 0);
  using Steps = DescSteps<Cfg>;
  while (sched.Next(&w)) {
    const bool stamp =
        kKernelStamps && unit < kCtaClockUnits && consumer == 0 && threadIdx.x % 128 == 0;
    if (stamp) StampTime(p, CtaClockUnitWord(unit, 0));
    if constexpr (kGrouped) {
      // The member's EpilogueParams go to shared memory by cp.async while
      // the k-loop runs. NOTES: read from global memory after the k-loop,
      // they cost the epilogue a round trip with the tensor cores idle
      // (~0.3 us in a one-tile CTA), and the compiler sinks
      // loads hoisted into registers back to their use.
      const int tid = threadIdx.x % 128;
      if (tid < kEpiChunks) {
        ptx::CpAsync16(reinterpret_cast<uint8_t*>(&ss.unit_epi[consumer][unit & 1]) + 16 * tid,
                       reinterpret_cast<const uint8_t*>(&p.group[w.tile.batch].epi) + 16 * tid);
      }
    }
    if constexpr (Cfg::kStagedStore_ && kGrouped) {
      const GroupedProblem& g = p.group[w.tile.batch];
      // The storing thread fences and prefetches D's tensor map (always a
      // valid map) before the k-loop, so its first store does not wait for
      // the descriptor (see AcquireProblemMaps).
      if (threadIdx.x % 128 == 0 && w.tile.batch != store_problem) {
        ptx::FenceTensorMapAcquire(&g.tma_d);
        ptx::PrefetchTensorMap(&g.tma_d);
        store_problem = w.tile.batch;
      }
    }
    float acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = 0.0f;
    // An idle consumer issues no MMAs: it hands each stage back once it has
    // landed (the empty barriers count its warps too) and keeps its zeros.
    const bool idle = ConsumerRowsOutside<Cfg, kGrouped>(p, w.tile, consumer);
    const int mma_end = idle ? w.k_begin : w.k_end;
    int prev_stage = -1;
    int kb = w.k_begin;
    for (; kb < mma_end; ++kb) {
      ptx::MbarWait(&ss.full[stage], phase);
      ptx::WgmmaFence();
      const uint64_t da = DescPlus(desc_a0, stage * Steps::kStageA);
      const uint64_t db = DescPlus(desc_b0, stage * Steps::kStageB);
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
        Mma<In, kBN, kAKMajor, kBKMajor>(
            acc, DescPlus(da, kk * Steps::template KStep<kAKMajor>()),
            DescPlus(db, kk * Steps::template KStep<kBKMajor>()));
      }
      ptx::WgmmaCommit();
      // Keep one k-block of wgmma in flight; the one before it is done, so
      // its stage goes back to the producer.
      if (prev_stage >= 0) {
        ptx::WgmmaWait<1>();
        if (warp_leader) ReleaseStage(ss, prev_stage, peer);
      }
      prev_stage = stage;
      AdvanceStage<Cfg>(stage, phase, 1);
    }
    ptx::WgmmaWait<0>();
    if (warp_leader && prev_stage >= 0) ReleaseStage(ss, prev_stage, peer);
    for (; kb < w.k_end; ++kb) {
      ptx::MbarWait(&ss.full[stage], phase);
      if (warp_leader) ReleaseStage(ss, stage, peer);
      AdvanceStage<Cfg>(stage, phase, 1);
    }
    if (stamp) StampTime(p, CtaClockUnitWord(unit, 1));
    if constexpr (!kGrouped) {
      if (w.role == UnitRole::kPartial) {
        StoreUnitPartial<Cfg>(p, ss, acc, w, consumer);
        if (stamp) StampTime2(p, CtaClockUnitWord(unit, 2), CtaClockUnitWord(unit, 3));
        ++unit;
        continue;
      }
      if (w.role == UnitRole::kFinalize) AddUnitPartials<Cfg>(p, ss, acc, w, consumer);
      if (Cfg::kStagedStore_ && p.epi.tma_store) AcquireStaging(consumer);
      if (stamp) StampTime(p, CtaClockUnitWord(unit, 2));
      if (!idle) TileEpilogue<Cfg, Cfg::kRowChecks>(p.epi, &p.tma_d, acc, w.tile, consumer, ss);
    } else {
      TileCoord t = w.tile;
      t.batch = 0;
      // The unit's EpilogueParams have landed in shared memory and, with
      // staged stores, the staging buffer is free: word 2 (a grouped unit's
      // "fixup").
      if (threadIdx.x % 128 < kEpiChunks) ptx::CpAsyncWaitAll();
      if constexpr (Cfg::kStagedStore_) {
        AcquireStaging(consumer);  // its barrier publishes the copy too
      } else {
        ptx::NamedBarrierSync(1 + consumer, 128);
      }
      if (stamp) StampTime(p, CtaClockUnitWord(unit, 2));
      TileEpilogue<Cfg>(ss.unit_epi[consumer][unit & 1], &p.group[w.tile.batch].tma_d, acc, t,
                        consumer, ss);
    }
    if (stamp) StampTime(p, CtaClockUnitWord(unit, 3));
    ++unit;
  }
  // The staging buffer stays ours until the last stores have read it.
  if constexpr (Cfg::kStagedStore_) {
    if (threadIdx.x % 128 == 0) ptx::BulkWaitGroupRead<0>();
  }
}

template <typename In, class Cfg, bool kAKMajor, bool kBKMajor>
__device__ void ConsumerLoopPingPong(const KernelParams& p, SharedStorage<Cfg>& ss, int consumer) {
  constexpr int kBN = Cfg::kBN_;
  PersistentTileScheduler sched(p.tiles_m, p.tiles_n, p.batch, p.group_m, blockIdx.x, gridDim.x);
  const bool warp_leader = threadIdx.x % 32 == 0;
  int stage = 0;
  uint32_t phase = 0;
  for (int local = 0; sched.is_valid(); sched.advance(), ++local) {
    if ((local & 1) != consumer) {
      // The other consumer's tile: its k-blocks pass through the ring unseen.
      AdvanceStage<Cfg>(stage, phase, p.k_blocks);
      continue;
    }
    const TileCoord t = sched.get();
    float acc0[Cfg::kAccRegs], acc1[Cfg::kAccRegs];  // rows 0-63 and 64-127
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc0[i] = acc1[i] = 0.0f;
    // NOTES: k-loops run in tile order, alternating consumers. Besides
    // putting one consumer's MMAs beside the other's epilogue, this keeps
    // parity waits sound: a consumer that skipped the other's tile could
    // otherwise wait on a full barrier two phases ahead of it, and a parity
    // wait cannot tell those apart.
    if (local > 0) ptx::MbarWait(&ss.mainloop_done[consumer ^ 1], ((local - 1) >> 1) & 1);
    int prev_stage = -1;
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      ptx::MbarWait(&ss.full[stage], phase);
      ptx::WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
        const uint64_t db = DescB<Cfg, kBKMajor>(ss.b[stage], kk);
        Mma<In, kBN, kAKMajor, kBKMajor>(acc0, DescA<Cfg, kAKMajor>(ss.a[stage], 0, kk), db);
        Mma<In, kBN, kAKMajor, kBKMajor>(acc1, DescA<Cfg, kAKMajor>(ss.a[stage], 1, kk), db);
      }
      ptx::WgmmaCommit();
      if (prev_stage >= 0) {
        ptx::WgmmaWait<1>();
        if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
      }
      prev_stage = stage;
      AdvanceStage<Cfg>(stage, phase, 1);
    }
    if (warp_leader) ptx::MbarArrive(&ss.mainloop_done[consumer]);
    ptx::WgmmaWait<0>();
    if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
    Epilogue<Cfg, kBN>(p.epi, acc0, t, 0);
    Epilogue<Cfg, kBN>(p.epi, acc1, t, 1);
  }
}

}  // namespace gemm_kernels::sm90
