// The producer of the Hopper GEMM kernel: one thread of warpgroup 0 issues
// the TMA loads of A and B k-blocks into the ring of shared-memory stages.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/sm90/instrumentation.cuh"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_params.cuh"
#include "kernels/sm90/kernel_scheduler.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

template <class Cfg, bool kKMajor>
__device__ __forceinline__ void LoadOperand(const CUtensorMap* tmap, uint8_t* dst, uint64_t* bar,
                                            int mn0, int k0, int batch, int rows) {
  if constexpr (kKMajor) {
    ptx::TmaLoad3d(dst, tmap, bar, k0, mn0, batch);
  } else {
#pragma unroll
    for (int j = 0; j < rows / 64; ++j) {
      ptx::TmaLoad3d(dst + j * Cfg::kChunkBytes, tmap, bar, mn0 + 64 * j, k0, batch);
    }
  }
}

// A multicast: cluster rank `rank` loads rows kBM / 2 * rank .. of the
// tile's A k-block into both CTAs' stage, where the peer's TMA brings the
// other half: with 128 rows a 64-row box (8 KB: one K-major half or one
// MN-major chunk), with 192 rows a 96-row K-major box (12 KB, a multiple of
// the 1 KB swizzle atom, so the half lands swizzled as the whole would).
template <class Cfg, bool kKMajor>
__device__ __forceinline__ void LoadAHalfMulticast(const CUtensorMap* tmap, uint8_t* dst,
                                                   uint64_t* bar, int m0, int k0, int batch,
                                                   int rank) {
  constexpr int kHalfRows = Cfg::kBM / 2;
  static_assert(kKMajor ? kHalfRows * 128 % 1024 == 0 : kHalfRows == 64,
                "each CTA's half of A is whole swizzle atoms (K-major) or one chunk (MN-major)");
  if constexpr (kKMajor) {
    ptx::TmaLoad3dMulticast(dst + rank * kHalfRows * 128, tmap, bar, k0, m0 + kHalfRows * rank,
                            batch, 0x3);
  } else {
    ptx::TmaLoad3dMulticast(dst + rank * Cfg::kChunkBytes, tmap, bar, m0 + 64 * rank, k0, batch,
                            0x3);
  }
}

// A grouped problem's tensor maps, before their first use in a launch.
// NOTES: the maps were written to global memory by a copy from the host; the
// acquire fence keeps the TMA unit from using a stale cached descriptor of
// an earlier launch at the same address.
__device__ __forceinline__ void AcquireProblemMaps(const GroupedProblem& g) {
  ptx::FenceTensorMapAcquire(&g.tma_a);
  ptx::FenceTensorMapAcquire(&g.tma_b);
  ptx::PrefetchTensorMap(&g.tma_a);
  ptx::PrefetchTensorMap(&g.tma_b);
}

// Grouped launches: the problem of this CTA's first tile (-1: none), whose
// tensor maps the producer thread fences and prefetches before the grid
// dependency wait (see the kernel). Shapes as ScheduleShapes gives them.
template <class Cfg, bool kGrouped>
__device__ __forceinline__ int PrefetchFirstProblem(const KernelParams& p,
                                                    SharedStorage<Cfg>& ss) {
  if constexpr (kGrouped) {
    KernelScheduler<true> sched(p, ScheduleShapes<Cfg, true>(p, ss));
    WorkUnit w;
    if (!sched.Next(&w)) return -1;
    AcquireProblemMaps(p.group[w.tile.batch]);
    return w.tile.batch;
  }
  return -1;
}

// `loaded_problem`: the grouped problem whose tensor maps are already
// fenced and prefetched (PrefetchFirstProblem), or -1.
template <class Cfg, bool kAKMajor, bool kBKMajor, bool kGrouped>
__device__ void ProducerLoop(const KernelParams& p, SharedStorage<Cfg>& ss, int loaded_problem) {
  KernelScheduler<kGrouped> sched(p, ScheduleShapes<Cfg, kGrouped>(p, ss));
  WorkUnit w;
  int stage = 0;
  uint32_t phase = 0;
  bool issued = false;  // cta_clock word 6: the first load
  const int multicast_rank =
      !kGrouped && p.mode == LaunchMode::kMulticastA ? MulticastRank() : -1;
  while (sched.Next(&w)) {
    const TileCoord& t = w.tile;
    const CUtensorMap* tma_a = &p.tma_a;
    const CUtensorMap* tma_b = &p.tma_b;
    int a_batch = t.batch * p.a_batch_step;
    int b_batch = t.batch * p.b_batch_step;
    if constexpr (kGrouped) {
      tma_a = &p.group[t.batch].tma_a;
      tma_b = &p.group[t.batch].tma_b;
      a_batch = b_batch = 0;
      if (t.batch != loaded_problem) {
        AcquireProblemMaps(p.group[t.batch]);
        loaded_problem = t.batch;
      }
    }
    if (!issued) StampTime(p, 6);
    issued = true;
    for (int kb = w.k_begin; kb < w.k_end; ++kb) {
      // The first pass over the ring finds every stage free: waiting on the
      // parity before a fresh barrier's first phase returns at once.
      ptx::MbarWait(&ss.empty[stage], phase ^ 1);
      ptx::MbarArriveExpectTx(&ss.full[stage], Cfg::kStageBytes);
      if (multicast_rank >= 0) {
        // MakeSm90Plan admits MN-major A only on 128-row tiles.
        if constexpr (kAKMajor || Cfg::kBM == 128) {
          LoadAHalfMulticast<Cfg, kAKMajor>(tma_a, ss.a[stage], &ss.full[stage],
                                            t.m_block * Cfg::kBM, kb * Cfg::kBK, a_batch,
                                            multicast_rank);
        }
      } else {
        LoadOperand<Cfg, kAKMajor>(tma_a, ss.a[stage], &ss.full[stage], t.m_block * Cfg::kBM,
                                   kb * Cfg::kBK, a_batch, Cfg::kBM);
      }
      LoadOperand<Cfg, kBKMajor>(tma_b, ss.b[stage], &ss.full[stage], t.n_block * Cfg::kBN_,
                                 kb * Cfg::kBK, b_batch, Cfg::kBN_);
      AdvanceStage<Cfg>(stage, phase, 1);
    }
  }
}

}  // namespace gemm_kernels::sm90
