// Hopper GEMM: TMA + wgmma, warp-specialized, persistent.
//
// One CTA per SM walks work units (a tile and a k-range) from the stream-K
// or grouped scheduler (kernels/scheduler/); the ping-pong variant walks
// whole tiles from PersistentTileScheduler, the same order the producer's
// data-parallel stream-K walk produces. Warpgroup 0
// is the producer: one thread issues TMA loads of A and B k-blocks into a ring
// of kStages shared-memory stages, each guarded by a "full" mbarrier (TMA
// transaction bytes) and an "empty" mbarrier (one arrival per consumer warp).
// The other warpgroups are consumers (two for BM = 128, three for the square
// 192x192 tile): each owns 64 rows of the tile and issues m64nBNk(16|8)
// wgmma with fp32 accumulators in registers, then runs the epilogue (alpha,
// beta * C, conversion, predicated stores) while the producer already
// streams the next tile's k-blocks.
//
// Operand smem layouts (128-byte swizzle, matching the TMA box):
//   K-major:  [rows][BK] with 128-byte rows (BK * sizeof(In) == 128).
//   MN-major: chunks of 64 MN elements: [chunk][BK][64], 8 KB each (16-bit only).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/scheduler/column_pairs.h"
#include "kernels/scheduler/grouped_tile_scheduler.h"
#include "kernels/scheduler/stream_k_scheduler.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/sm90/epilogue_values.cuh"
#include "kernels/sm90/ptx.cuh"
#include "kernels/sm90/split_sums.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

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
  // Split-K with a separate reduction kernel: every stream-K unit stores its
  // partial (StreamKScheduler::partials_only); flags is nullptr.
  int partials_only;
  // Split-K whose partials the GEMM grid sums itself (SumPartialsInGrid;
  // Sm90LaunchChoice::reduce_in_grid), else nullptr: [0] counts the CTAs
  // whose partials are stored, [1] those done summing; both 0 between
  // launches. Set only with partials_only and one CTA per (tile, split).
  int* grid_counters;
  // Paired split-K (128-wide kernels, launched as 2-CTA clusters): CTA 2t
  // holds tile t's first k-range, 2t + 1 its second and the epilogue; the
  // partial goes through distributed shared memory (PairStorePartial /
  // PairReducePartial); partials and flags are nullptr.
  int cluster_pairs;
  // A multicast (data-parallel, cooperative tiles, 192x192 with K-major A;
  // launched as 2-CTA clusters): the two CTAs of a cluster take
  // neighbouring n-tiles of one m-tile, and each loads half of the A rows
  // of every k-block into both CTAs' rings (KernelScheduler<false>,
  // LoadAHalfMulticast).
  int multicast_a;
  // Experiments only (Sm90LaunchChoice::cta_clock; nullptr otherwise):
  // kCtaClockWords words per CTA.
  unsigned long long* cta_clock;
  // Grouped launches (kGrouped kernels) only.
  const GroupedProblemShape* group_shapes;
  const GroupedProblem* group;
  int num_problems;
  int64_t group_tiles;
};

// ---------------------------------------------------------------- stamps

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned SmId() {
  unsigned id;
  asm volatile("mov.u32 %0, %smid;" : "=r"(id));
  return id;
}

// KernelParams::cta_clock: word `slot` of this CTA's record.
__device__ __forceinline__ void StampCta(const KernelParams& p, int slot,
                                         unsigned long long value) {
  if (p.cta_clock != nullptr) p.cta_clock[blockIdx.x * kCtaClockWords + slot] = value;
}

// One schedule loop for every kernel: stream-K (data-parallel when
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
      : StreamKScheduler(p.tiles_m, p.multicast_a ? PairColumns(p.tiles_n) : p.tiles_n, p.batch,
                         p.group_m, p.k_blocks, p.sk_tiles,
                         p.multicast_a ? gridDim.x / 2 : gridDim.x,
                         p.multicast_a ? blockIdx.x / 2 : blockIdx.x, p.partials_only != 0),
        pair_rank_(p.multicast_a ? MulticastRank() : -1) {}
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

// kPingPong: each consumer warpgroup takes whole 128 x kBN tiles in turn
// (tiles 0, 2, 4, ... and 1, 3, 5, ... of this CTA), so one consumer's
// epilogue overlaps the other's MMAs. Otherwise both consumers share each tile
// (64 rows each: "cooperative").
// kStagedStore: a staging buffer for the whole output tile follows the ring
// (one stage fewer pays for it), for the staged TileEpilogue; see KernelConfigFor.
// kBN == 192 is the square 192x192 tile on three consumer warpgroups.
// NOTES: cuBLAS runs 192x192 on 3072^3 and 4224^3 (round 7 call 1): 96 MMA
// columns per operand byte against 85 for 128x256, and 3072^3 falls into
// two nearly full waves (256 tiles on 132 SMs) where 128x256 needs stream-K.
template <typename In, int kBN, bool kAKMajor, bool kBKMajor, bool kPingPong = false,
          bool kStagedStore = false>
struct KernelConfig {
  static constexpr int kBM = kBN == 192 ? 192 : 128;
  static constexpr int kBN_ = kBN;
  static constexpr int kElemBytes = sizeof(In);
  static constexpr int kBK = 128 / kElemBytes;      // one 128-byte swizzle row
  static constexpr int kMmaK = 32 / kElemBytes;     // k per wgmma: 16 (16-bit), 8 (tf32)
  static constexpr int kKSteps = kBK / kMmaK;
  static constexpr int kABytes = kBM * kBK * kElemBytes;
  static constexpr int kBBytes = kBN * kBK * kElemBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // A 192 KB ring of stages (4 of 48 KB for 128x256 and 192x192, 6 of 32 KB,
  // 8 of 24 KB); with a staging buffer (KernelConfigFor: 32 KB in the
  // 128-wide kernels) one stage fewer.
  static constexpr int kStages = 192 * 1024 / kStageBytes - (kStagedStore ? 1 : 0);
  static constexpr bool kStagedStore_ = kStagedStore;
  // A 16-bit output tile, 64 x 64 boxes (8 KB, 128-byte rows) side by side.
  static constexpr int kStagingBytes = kStagedStore ? kBM * kBN * 2 : 0;
  static constexpr int kChunkBytes = 64 * kBK * kElemBytes;  // one MN-major chunk
  static constexpr int kConsumers = kBM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // setmaxnreg budgets. setmaxnreg moves registers between the warpgroups
  // of a CTA only within what the CTA got at launch: kThreads x
  // kLaunchRegs, the most the launch bounds allow (168 for 384 threads,
  // 128 for 512), which is 504 per thread slot beside two consumers and
  // 512 beside three. The producer needs few, so the consumers share the
  // rest (multiples of 8: 224 each for two, 152 for three) and hold their
  // accumulators (128 per thread in the 128x256 kernels, 96 in the 192x192
  // ones) without spilling. The producer gets 48: at 40 the A-multicast
  // kernels spilled 4 bytes. NOTES: a producer at 48 beside two consumers at
  // 232 (512 of 504) hung every launch, and in each CTA only one consumer
  // warpgroup was seen waiting (round 12 call 2): the other sat in
  // setmaxnreg.inc for registers the CTA did not have (round 13 call 1: a
  // probe of the protocol alone hangs at 48 + 2 x 232 and passes at 40 +
  // 2 x 232; the kernels at 48 + 2 x 224 pass every test).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kRegisterBudget = kLaunchRegs * kThreads / 128;
  static constexpr int kProducerRegs = 48;
  static constexpr int kConsumerRegs = (kRegisterBudget - kProducerRegs) / kConsumers / 8 * 8;
  static_assert(kConsumerRegs <= 256, "setmaxnreg allows at most 256 registers");
  // Rows past M are checked per row in the epilogue's vector paths and
  // skipped in the finalizer's partial reads; not in the 128x256 kernels,
  // where either check made ptxas spill (232 and 300 bytes; the 192x192
  // ones have room with 152 registers).
  static constexpr bool kRowChecks = kBN != 256;
  static constexpr int kAccRegs = kBN / 2;  // m64nBN fp32 accumulators per thread
  static constexpr bool kPingPong_ = kPingPong;
  // Arrivals that free a stage: every warp of the consumer(s) that read it.
  static constexpr int kEmptyArrivals = kPingPong ? 4 : 4 * kConsumers;

  static_assert(kBM == 64 * kConsumers, "each consumer warpgroup owns 64 rows");
  static_assert(!kPingPong || kBN == 128,
                "a ping-pong consumer holds a whole tile: 2 x m64n128 accumulators");
  static_assert(kBN == 64 || kBN == 128 || kBN == 192 || kBN == 256,
                "wgmma wrappers exist for N = 64, 128, 192 and 256");
  static_assert(kElemBytes == 4 ? (kAKMajor && kBKMajor) : true,
                "tf32 wgmma reads only K-major operands");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0,
                "stages must keep the 1024-byte alignment of the 128B swizzle");
  static_assert(!kStagedStore || (!kPingPong && kBN % 64 == 0),
                "staged stores: cooperative consumers, whole 64-column boxes");
};

// KernelConfig::kStagingBytes of shared memory, none when 0.
template <int kBytes>
struct StagingArea {
  alignas(1024) uint8_t d[kBytes];
};
template <>
struct StagingArea<0> {};

// The configuration of each kernel instance (dense and grouped alike).
// Staged stores exist in the 128-wide cooperative kernels with 16-bit
// inputs, where a 32 KB buffer costs one of six stages. NOTES: the 128x256
// kernels would give up one of four stages for 64 KB: grouped 128 problems
// (memory-bound) lost 3-4% with it, grouped 32 (K = 2048) gained 3% (round 9
// calls 1-2), so they keep the register path.
template <typename In, int kBN, bool kAKMajor, bool kBKMajor, bool kPingPong>
using KernelConfigFor = KernelConfig<In, kBN, kAKMajor, kBKMajor, kPingPong,
                                     kBN == 128 && !kPingPong && sizeof(In) == 2>;

template <class Cfg>
struct SharedStorage {
  alignas(1024) uint8_t a[Cfg::kStages][Cfg::kABytes];
  alignas(1024) uint8_t b[Cfg::kStages][Cfg::kBBytes];
  StagingArea<Cfg::kStagingBytes> staging;
  alignas(8) uint64_t full[Cfg::kStages];
  uint64_t empty[Cfg::kStages];
  uint64_t mainloop_done[2];  // ping-pong: consumer c finished a tile's k-loop
  // Paired split-K, one per consumer: pair_ready (on the finalizer) completes
  // when the peer's half-partial is in the peer's ring; pair_done (on the
  // peer) when the finalizer has read it, so the peer may exit.
  uint64_t pair_ready[2];
  uint64_t pair_done[2];
  // Grouped kernels: each consumer's copy of its unit's EpilogueParams,
  // double-buffered by unit (see ConsumerLoop).
  alignas(16) EpilogueParams unit_epi[Cfg::kConsumers][2];
};

// Grouped kernels copy the problem shapes of groups up to this size into
// shared memory behind the ring (12 KB): the tile scheduler's binary search
// then probes shared memory instead of global memory, several dependent
// loads per tile. Larger groups search the global copy.
constexpr int kSmemGroupShapes = 512;

template <class Cfg>
constexpr size_t SmemBytes() {
  return sizeof(SharedStorage<Cfg>) + 1024;  // slack to align the dynamic base
}

template <class Cfg, bool kGrouped>
constexpr size_t KernelSmemBytes() {
  return SmemBytes<Cfg>() + (kGrouped ? kSmemGroupShapes * sizeof(GroupedProblemShape) : 0);
}

// Where a grouped kernel's tile schedulers read the problem shapes: the
// shared-memory copy behind the ring when the group fits, else global memory.
template <class Cfg>
__device__ __forceinline__ GroupedProblemShape* SmemGroupShapes(SharedStorage<Cfg>& ss) {
  return reinterpret_cast<GroupedProblemShape*>(reinterpret_cast<uint8_t*>(&ss) +
                                                sizeof(SharedStorage<Cfg>));
}

template <class Cfg, bool kGrouped>
__device__ __forceinline__ const GroupedProblemShape* ScheduleShapes(const KernelParams& p,
                                                                     SharedStorage<Cfg>& ss) {
  if constexpr (kGrouped) {
    if (p.num_problems <= kSmemGroupShapes) return SmemGroupShapes(ss);
  }
  return p.group_shapes;
}

// ---------------------------------------------------------------- producer

// The ring position n stages on: the parity of the barrier phases to wait
// for flips at each wrap.
template <class Cfg>
__device__ __forceinline__ void AdvanceStage(int& stage, uint32_t& phase, int n) {
  for (int i = 0; i < n; ++i) {
    if (++stage == Cfg::kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
}

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
  const int multicast_rank = !kGrouped && p.multicast_a ? MulticastRank() : -1;
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
    if (!issued) StampCta(p, 6, GlobalTimer());
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

// ---------------------------------------------------------------- consumer

template <typename In, int kN, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void Mma(float (&acc)[kN / 2], uint64_t da, uint64_t db) {
  constexpr int tA = kAKMajor ? 0 : 1;  // wgmma "transpose" = MN-major operand
  constexpr int tB = kBKMajor ? 0 : 1;
  if constexpr (std::is_same_v<In, __nv_bfloat16>) {
    if constexpr (kN == 256) WgmmaBf16_m64n256k16<tA, tB>(acc, da, db, 1);
    else if constexpr (kN == 192) WgmmaBf16_m64n192k16<tA, tB>(acc, da, db, 1);
    else if constexpr (kN == 128) WgmmaBf16_m64n128k16<tA, tB>(acc, da, db, 1);
    else WgmmaBf16_m64n64k16<tA, tB>(acc, da, db, 1);
  } else if constexpr (std::is_same_v<In, __half>) {
    if constexpr (kN == 256) WgmmaF16_m64n256k16<tA, tB>(acc, da, db, 1);
    else if constexpr (kN == 192) WgmmaF16_m64n192k16<tA, tB>(acc, da, db, 1);
    else if constexpr (kN == 128) WgmmaF16_m64n128k16<tA, tB>(acc, da, db, 1);
    else WgmmaF16_m64n64k16<tA, tB>(acc, da, db, 1);
  } else {
    if constexpr (kN == 256) WgmmaTf32_m64n256k8(acc, da, db, 1);
    else if constexpr (kN == 192) WgmmaTf32_m64n192k8(acc, da, db, 1);
    else if constexpr (kN == 128) WgmmaTf32_m64n128k8(acc, da, db, 1);
    else WgmmaTf32_m64n64k8(acc, da, db, 1);
  }
}

// Descriptor of this consumer's 64 A rows for k-step kk of a stage.
template <class Cfg, bool kKMajor>
__device__ __forceinline__ uint64_t DescA(const uint8_t* stage, int consumer, int kk) {
  const uint32_t base = ptx::SmemAddr(stage);
  if constexpr (kKMajor) {
    return ptx::MakeSmemDesc(base + consumer * 64 * 128 + kk * 32, 16, 1024);
  } else {
    return ptx::MakeSmemDesc(base + consumer * Cfg::kChunkBytes + kk * Cfg::kMmaK * 128,
                             Cfg::kChunkBytes, 1024);
  }
}

template <class Cfg, bool kKMajor>
__device__ __forceinline__ uint64_t DescB(const uint8_t* stage, int kk) {
  const uint32_t base = ptx::SmemAddr(stage);
  if constexpr (kKMajor) {
    return ptx::MakeSmemDesc(base + kk * 32, 16, 1024);
  } else {
    return ptx::MakeSmemDesc(base + kk * Cfg::kMmaK * 128, Cfg::kChunkBytes, 1024);
  }
}

// A descriptor moved by `units` 16-byte units: a stage or a k-step of the
// same operand changes only the start-address field (bits 0-13), which never
// carries (shared memory ends below 256 KB), so only the low word is added.
__device__ __forceinline__ uint64_t DescPlus(uint64_t desc, uint32_t units) {
  const uint32_t lo = static_cast<uint32_t>(desc) + units;
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

// Descriptor steps in 16-byte units: one ring stage of A or B, and one wgmma
// k-step within a stage (K-major: 32 bytes along a 128-byte swizzled row;
// MN-major: kMmaK rows of 128 bytes).
template <class Cfg>
struct DescSteps {
  static constexpr uint32_t kStageA = Cfg::kABytes / 16;
  static constexpr uint32_t kStageB = Cfg::kBBytes / 16;
  template <bool kKMajor>
  static constexpr uint32_t KStep() {
    return kKMajor ? 32 / 16 : Cfg::kMmaK * 128 / 16;
  }
};

// The wgmma accumulator fragment gives each thread, in every 8-column block
// j, the column pair (2c, 2c+1) of rows r (acc[4j], acc[4j+1]) and r + 8
// (acc[4j+2], acc[4j+3]); r = 16 * warp + lane / 4, c = lane % 4.
//
// NOTES: the epilogue is most of the kernel's code. A first version unrolled
// predicated, dtype-switched stores for every element and spent ~45% of its
// cycles on instruction-fetch stalls (ncu). Now interior slices take a
// predicate-free unrolled path per output dtype, and edge slices go through a
// compact rolled loop. kColPredicates: column pairs at or past `col_end`
// are skipped (N-ragged tiles with an even N).
template <typename Out, int kBN, bool kHasC, bool kColPredicates = false>
__device__ __forceinline__ void StoreInterior(const EpilogueParams& p, const float (&acc)[kBN / 2],
                                              int row, int col, int batch, bool r0, bool r8,
                                              int col_end = 0) {
  using T = OutTraits<Out>;
  using Pair = typename T::Pair;
  Pair* d0 = reinterpret_cast<Pair*>(static_cast<Out*>(p.d) + batch * p.batch_stride_d +
                                     int64_t(row) * p.ldd + col);
  Pair* d8 = reinterpret_cast<Pair*>(reinterpret_cast<Out*>(d0) + 8 * p.ldd);
  const Pair* c0 = nullptr;
  const Pair* c8 = nullptr;
  if constexpr (kHasC) {
    c0 = reinterpret_cast<const Pair*>(static_cast<const Out*>(p.c) + batch * p.batch_stride_c +
                                       int64_t(row) * p.ldc + col);
    c8 = reinterpret_cast<const Pair*>(reinterpret_cast<const Out*>(c0) + 8 * p.ldc);
  }
  const float alpha = p.alpha, beta = p.beta;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const bool in0 = kColPredicates ? r0 && col + 8 * j < col_end : r0;
    const bool in8 = kColPredicates ? r8 && col + 8 * j < col_end : r8;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = alpha * acc[4 * j + e];
    if constexpr (kHasC) {
      const float2 x = in0 ? T::Unpack(c0[4 * j]) : make_float2(0.f, 0.f);
      const float2 y = in8 ? T::Unpack(c8[4 * j]) : make_float2(0.f, 0.f);
      v[0] += beta * x.x;
      v[1] += beta * x.y;
      v[2] += beta * y.x;
      v[3] += beta * y.y;
    }
    if (in0) d0[4 * j] = T::Pack(v[0], v[1]);
    if (in8) d8[4 * j] = T::Pack(v[2], v[3]);
  }
}

// StoreInterior for the output dtype of `p`, with C when it has one.
// kColPredicates: N-ragged slice with an even N, pairs past N skipped.
template <int kBN, bool kColPredicates>
__device__ __forceinline__ void StorePairs(const EpilogueParams& p, const float (&acc)[kBN / 2],
                                           int row, int col, int batch, bool r0, bool r8) {
  const bool has_c = p.c != nullptr;
  const int col_end = kColPredicates ? p.n : 0;
  switch (p.out_dtype) {
    case DataType::kBF16:
      if (has_c)
        StoreInterior<__nv_bfloat16, kBN, true, kColPredicates>(p, acc, row, col, batch, r0, r8,
                                                                col_end);
      else
        StoreInterior<__nv_bfloat16, kBN, false, kColPredicates>(p, acc, row, col, batch, r0, r8,
                                                                 col_end);
      break;
    case DataType::kF16:
      if (has_c)
        StoreInterior<__half, kBN, true, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      else
        StoreInterior<__half, kBN, false, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      break;
    case DataType::kF32:
      if (has_c)
        StoreInterior<float, kBN, true, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      else
        StoreInterior<float, kBN, false, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      break;
  }
}

// 4x4 transpose of 32-bit values across the 4 lanes of a quad: lane q ends
// with u[i] = (lane i's u[q]). Two butterfly steps, 4 shuffles in all.
__device__ __forceinline__ void TransposeQuad(uint32_t (&u)[4], int q) {
  const bool hi = q & 2;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint32_t recv = __shfl_xor_sync(0xffffffffu, hi ? u[j] : u[j + 2], 2);
    if (hi) u[j] = recv;
    else u[j + 2] = recv;
  }
  const bool odd = q & 1;
#pragma unroll
  for (int j = 0; j < 4; j += 2) {
    const uint32_t recv = __shfl_xor_sync(0xffffffffu, odd ? u[j] : u[j + 1], 1);
    if (odd) u[j] = recv;
    else u[j + 1] = recv;
  }
}

template <typename Out>
__device__ __forceinline__ uint32_t PackBits(float a, float b) {
  const typename OutTraits<Out>::Pair v = OutTraits<Out>::Pack(a, b);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Interior slice, 16-byte aligned D (and C): lanes of a quad exchange
// fragments so each thread writes 16 contiguous bytes (8 x 16-bit or 4 x
// fp32) per store, and with kHasC reads C's matching 16 bytes in one load.
// NOTES: the pair-wise stores of StoreInterior write 16 bytes per row per
// instruction; ncu showed the consumers stalled on lg_throttle (store queue
// full) for most of their cycles in small-K problems. With C, 16-bit outputs
// exchange the fp32 values (twice the shuffles) rather than packed pairs, so
// that alpha * acc + beta * c is rounded once, as on every other path.
template <typename Out, int kBN, bool kHasC>
__device__ __forceinline__ void StoreInteriorWide(const EpilogueParams& p, const float (&acc)[kBN / 2],
                                                  int row, int tile_col, int batch, int q, bool r0,
                                                  bool r8) {
  Out* d0 = static_cast<Out*>(p.d) + batch * p.batch_stride_d + int64_t(row) * p.ldd + tile_col;
  Out* d8 = d0 + 8 * p.ldd;
  const Out* c0 = nullptr;
  const Out* c8 = nullptr;
  if constexpr (kHasC) {
    c0 = static_cast<const Out*>(p.c) + batch * p.batch_stride_c + int64_t(row) * p.ldc + tile_col;
    c8 = c0 + 8 * p.ldc;
  }
  const float alpha = p.alpha;
  if constexpr (sizeof(Out) == 2 && kHasC) {
    using T = OutTraits<Out>;
    const float beta = p.beta;
#pragma unroll
    for (int g = 0; g < kBN / 32; ++g) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // lo[i] / hi[i] end up as columns 32g + 8q + 2i and + 1.
        uint32_t lo[4], hi[4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * g + jj;
          lo[jj] = __float_as_uint(alpha * acc[4 * j + 2 * h]);
          hi[jj] = __float_as_uint(alpha * acc[4 * j + 2 * h + 1]);
        }
        TransposeQuad(lo, q);
        TransposeQuad(hi, q);
        if (h ? r8 : r0) {
          const uint4 cv = *reinterpret_cast<const uint4*>((h ? c8 : c0) + 32 * g + 8 * q);
          const uint32_t cw[4] = {cv.x, cv.y, cv.z, cv.w};
          uint32_t u[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 cf = T::Unpack(*reinterpret_cast<const typename T::Pair*>(&cw[i]));
            u[i] = PackBits<Out>(__uint_as_float(lo[i]) + beta * cf.x,
                                 __uint_as_float(hi[i]) + beta * cf.y);
          }
          *reinterpret_cast<uint4*>((h ? d8 : d0) + 32 * g + 8 * q) = make_uint4(u[0], u[1], u[2], u[3]);
        }
      }
    }
  } else if constexpr (sizeof(Out) == 2) {
#pragma unroll
    for (int g = 0; g < kBN / 32; ++g) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t u[4];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * g + jj;
          u[jj] = PackBits<Out>(alpha * acc[4 * j + 2 * h], alpha * acc[4 * j + 2 * h + 1]);
        }
        TransposeQuad(u, q);
        if (h ? r8 : r0) {
          *reinterpret_cast<uint4*>((h ? d8 : d0) + 32 * g + 8 * q) = make_uint4(u[0], u[1], u[2], u[3]);
        }
      }
    }
  } else {
    const bool odd = q & 1;
#pragma unroll
    for (int jp = 0; jp < kBN / 16; ++jp) {
      const int j0 = 2 * jp, j1 = 2 * jp + 1;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 a = make_float2(alpha * acc[4 * j0 + 2 * h], alpha * acc[4 * j0 + 2 * h + 1]);
        float2 b = make_float2(alpha * acc[4 * j1 + 2 * h], alpha * acc[4 * j1 + 2 * h + 1]);
        float2 send = odd ? a : b;
        float2 recv;
        recv.x = __shfl_xor_sync(0xffffffffu, send.x, 1);
        recv.y = __shfl_xor_sync(0xffffffffu, send.y, 1);
        if (odd) a = recv;
        else b = recv;
        const int col = odd ? 8 * j1 + 2 * (q - 1) : 8 * j0 + 2 * q;
        if (h ? r8 : r0) {
          float4 v = make_float4(a.x, a.y, b.x, b.y);
          if constexpr (kHasC) {
            const float4 cv = *reinterpret_cast<const float4*>((h ? c8 : c0) + col);
            const float beta = p.beta;
            v = make_float4(v.x + beta * cv.x, v.y + beta * cv.y, v.z + beta * cv.z,
                            v.w + beta * cv.w);
          }
          *reinterpret_cast<float4*>((h ? d8 : d0) + col) = v;
        }
      }
    }
  }
}

// Values of `vals` read ahead per group in StoreEdge.
constexpr int kEdgeGroup = 16;

// NOTES: the loop is rolled over groups of kEdgeGroup elements whose values
// are all loaded before any is stored. `vals` is a local-memory copy; the
// compiler cannot move a load above a store to D (both generic pointers), so
// with one element per iteration every element waited a full local-memory
// round trip. With ~200 KB of shared memory per CTA the L1 keeps little of a
// CTA's 64-128 KB of such copies, so that trip often went to L2: counted,
// 64 x ~300-600 cycles, ~10-20 us for a 128-wide tile (1000^3's last tile
// column), twice that for a 256-wide one.
template <typename Out, int kBN>
__device__ __forceinline__ void StoreEdgeAs(void* d_base, const void* c_base, const float* vals,
                                            int row, int col, int m, int n, int64_t ldc,
                                            int64_t ldd, float alpha, float beta) {
  static_assert((kBN / 2) % kEdgeGroup == 0, "whole groups of elements");
  Out* d = static_cast<Out*>(d_base);
  const Out* c = static_cast<const Out*>(c_base);
#pragma unroll 1
  for (int i0 = 0; i0 < kBN / 2; i0 += kEdgeGroup) {
    float x[kEdgeGroup];
#pragma unroll
    for (int u = 0; u < kEdgeGroup; ++u) x[u] = vals[i0 + u];
#pragma unroll
    for (int u = 0; u < kEdgeGroup; ++u) {
      const int i = i0 + u;
      const int r = row + 8 * ((i >> 1) & 1);
      const int cc = col + 8 * (i >> 2) + (i & 1);
      if (r >= m || cc >= n) continue;
      float v = alpha * x[u];
      if (c) v += beta * ToFloat(c[int64_t(r) * ldc + cc]);
      d[int64_t(r) * ldd + cc] = FromFloat<Out>(v);
    }
  }
}

// Ragged or unaligned slices: element-wise, bounds-checked. The copy into
// `vals` keeps the dynamic indexing off the accumulator registers.
template <int kBN>
__device__ __noinline__ void StoreEdge(const EpilogueParams& p, const float* vals, int row, int col,
                                       int batch) {
  // NOTES: the fields are copied to registers first; read through `p` inside
  // the loop they were reloaded after every store (p may alias d), which for
  // grouped launches, whose `p` lives in global memory, meant several
  // dependent loads per element.
  const DataType out_dtype = p.out_dtype;
  const int m = p.m, n = p.n;
  const int64_t ldc = p.ldc, ldd = p.ldd;
  const float alpha = p.alpha, beta = p.beta;
  const int64_t es = out_dtype == DataType::kF32 ? 4 : 2;
  void* d = static_cast<uint8_t*>(p.d) + batch * p.batch_stride_d * es;
  const void* c = p.c ? static_cast<const uint8_t*>(p.c) + batch * p.batch_stride_c * es : nullptr;
  switch (out_dtype) {
    case DataType::kBF16:
      StoreEdgeAs<__nv_bfloat16, kBN>(d, c, vals, row, col, m, n, ldc, ldd, alpha, beta);
      break;
    case DataType::kF16:
      StoreEdgeAs<__half, kBN>(d, c, vals, row, col, m, n, ldc, ldd, alpha, beta);
      break;
    case DataType::kF32:
      StoreEdgeAs<float, kBN>(d, c, vals, row, col, m, n, ldc, ldd, alpha, beta);
      break;
  }
}

// StoreInteriorWide for the output dtype of `p`.
template <int kBN, bool kHasC>
__device__ __forceinline__ void StoreWide(const EpilogueParams& p, const float (&acc)[kBN / 2],
                                          int row, int tile_col, int batch, int q, bool r0,
                                          bool r8) {
  switch (p.out_dtype) {
    case DataType::kBF16:
      StoreInteriorWide<__nv_bfloat16, kBN, kHasC>(p, acc, row, tile_col, batch, q, r0, r8);
      break;
    case DataType::kF16:
      StoreInteriorWide<__half, kBN, kHasC>(p, acc, row, tile_col, batch, q, r0, r8);
      break;
    case DataType::kF32:
      StoreInteriorWide<float, kBN, kHasC>(p, acc, row, tile_col, batch, q, r0, r8);
      break;
  }
}

// kRowPredicates: M-ragged tiles with full columns take the vector paths
// with per-row predicates. Dense launches pass KernelConfig::kRowChecks
// (off for 128x256, where the predicates plus the stream-K fixup code made
// ptxas spill 232 bytes).
template <class Cfg, int kBN, bool kRowPredicates = true>
__device__ __forceinline__ void Epilogue(const EpilogueParams& p, const float (&acc)[kBN / 2],
                                         const TileCoord& t, int consumer) {
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int slice_row = t.m_block * Cfg::kBM + consumer * 64;
  const int row = slice_row + warp * 16 + lane / 4;
  const int col = t.n_block * kBN + (lane % 4) * 2;
  // Full column range: the vector paths, with rows past M predicated off
  // (M-ragged tiles are common: grouped members, small M). Otherwise the
  // rolled element-wise path.
  // NOTES: N-ragged tiles with an even N (1000^3: the whole last tile
  // column) take pair stores with column predicates, in every kernel; in
  // the rolled loop each of a thread's kBN / 2 elements costs a
  // local-memory load, a dtype switch and a 2- or 4-byte store, and those
  // tiles finish last in a single-wave launch (per-CTA stamps, round 7 call
  // 9: the 8 N-ragged 128x256 tiles of 1920 x 1920 x 8192 ended ~9 us after
  // the other 112).
  const bool full_cols = (t.n_block + 1) * kBN <= p.n;
  const bool column_pairs = !full_cols && p.n % 2 == 0;
  const bool interior =
      p.vec2_ok && (full_cols || column_pairs) && (kRowPredicates || slice_row + 64 <= p.m);
  if (interior) {
    const bool r0 = !kRowPredicates || row < p.m;
    const bool r8 = !kRowPredicates || row + 8 < p.m;
    const bool has_c = p.c != nullptr;
    const int tile_col = t.n_block * kBN;
    if (column_pairs) {
      StorePairs<kBN, true>(p, acc, row, col, t.batch, r0, r8);
      return;
    }
    // NOTES: with C, the 16-byte path needs ~10 more registers; in the
    // 128 x 256 kernels (128 accumulators per thread) ptxas then spilled 292
    // bytes, so those keep the pair path below for C.
    constexpr bool kWideC = kBN <= 128;
    if (p.vec16_ok && (!has_c || kWideC)) {
      const int q = lane % 4;
      if (has_c) {
        if constexpr (kWideC) StoreWide<kBN, true>(p, acc, row, tile_col, t.batch, q, r0, r8);
      } else {
        StoreWide<kBN, false>(p, acc, row, tile_col, t.batch, q, r0, r8);
      }
      return;
    }
    StorePairs<kBN, false>(p, acc, row, col, t.batch, r0, r8);
  } else {
    float vals[kBN / 2];
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) vals[i] = acc[i];
    StoreEdge<kBN>(p, vals, row, col, t.batch);
  }
}

// ---------------------------------------------------------------- staged epilogue
//
// Tiles with 16-bit D and no C (EpilogueParams::tma_store) in kernels with a
// staging buffer (KernelConfigFor). Each consumer converts its 64 x kBN
// half of the tile into its own part of the staging buffer, as kBN / 64
// boxes of 64 x 64 with the TMA's 128-byte swizzle, and one thread hands
// the boxes to TMA stores, which skip whatever lies outside D (ragged tiles
// take this path too). The consumer then starts its next k-loop while the
// stores drain; before it writes the buffer again it waits until they have
// read it.
// NOTES: a consumer spends the conversions and shared-memory writes (kBN / 4
// per thread, conflict-free: a warp's 8 rows have 8 distinct row % 8 and so
// 8 distinct swizzled 16-byte units), two barriers and, on one thread, the
// store issue. Measured (round 9): a 128x128 tile's epilogue 0.45-0.8 us
// against 1.0-1.4 us on the register path; a 128x256 one (tried with three
// stages) 1.25-1.6 us, of which 0.86 us conversions and writes, 0.29 us
// the four store issues, 0.10 us fence and barrier.

// 16-byte pieces of an EpilogueParams (grouped kernels copy it per unit).
constexpr int kEpiChunks = sizeof(EpilogueParams) / 16;

template <class Cfg>
__device__ __forceinline__ uint8_t* ConsumerStaging(SharedStorage<Cfg>& ss, int consumer) {
  return ss.staging.d + consumer * (64 * Cfg::kBN_ * 2);
}

// Waits until this consumer's previous stores have read its staging buffer.
__device__ __forceinline__ void AcquireStaging(int consumer) {
  if (threadIdx.x % 128 == 0) ptx::BulkWaitGroupRead<0>();
  ptx::NamedBarrierSync(1 + consumer, 128);
}

// After AcquireStaging. `t`: the tile; t.batch is D's third coordinate.
template <typename Out, class Cfg>
__device__ __forceinline__ void StoreStagedAs(const CUtensorMap* tma_d, float alpha,
                                              const float (&acc)[Cfg::kAccRegs], const TileCoord& t,
                                              int consumer, uint8_t* buf) {
  constexpr int kBN = Cfg::kBN_;
  constexpr int kBoxBytes = 64 * 128;
  const int tid = threadIdx.x % 128;
  // Fragment rows r and r + 8 (see the accumulator layout above); both have
  // the same row % 8, which selects the swizzle.
  const int row = (tid / 32) * 16 + (tid % 32) / 4;
  uint8_t* const row_base = buf + row * 128 + (tid % 4) * 4;
  const int swizzle = (row & 7) * 16;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    uint8_t* unit = row_base + (j / 8) * kBoxBytes + (((j % 8) * 16) ^ swizzle);
    *reinterpret_cast<uint32_t*>(unit) = PackBits<Out>(alpha * acc[4 * j], alpha * acc[4 * j + 1]);
    *reinterpret_cast<uint32_t*>(unit + 8 * 128) =
        PackBits<Out>(alpha * acc[4 * j + 2], alpha * acc[4 * j + 3]);
  }
  ptx::FenceProxyAsyncShared();
  ptx::NamedBarrierSync(1 + consumer, 128);
  if (tid == 0) {
#pragma unroll
    for (int box = 0; box < kBN / 64; ++box) {
      ptx::TmaStore3d(tma_d, buf + box * kBoxBytes, t.n_block * kBN + 64 * box,
                      t.m_block * Cfg::kBM + 64 * consumer, t.batch);
    }
    ptx::BulkCommitGroup();
  }
}

// One tile's epilogue: staged where the kernel has a staging buffer and `e`
// allows it (after AcquireStaging), else the register path.
template <class Cfg, bool kRowPredicates = true>
__device__ __forceinline__ void TileEpilogue(const EpilogueParams& e, const CUtensorMap* tma_d,
                                             const float (&acc)[Cfg::kAccRegs], const TileCoord& t,
                                             int consumer, SharedStorage<Cfg>& ss) {
  if constexpr (Cfg::kStagedStore_) {
    if (e.tma_store) {
      uint8_t* buf = ConsumerStaging(ss, consumer);
      if (e.out_dtype == DataType::kBF16) {
        StoreStagedAs<__nv_bfloat16, Cfg>(tma_d, e.alpha, acc, t, consumer, buf);
      } else {
        StoreStagedAs<__half, Cfg>(tma_d, e.alpha, acc, t, consumer, buf);
      }
      return;
    }
  }
  Epilogue<Cfg, Cfg::kBN_, kRowPredicates>(e, acc, t, consumer);
}

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
// (round 14 calls 5-6): 0-1.5 us faster where each CTA's share is one pass
// of its threads, not the 2-4 us predicted, since the partials still drain
// to L2 before the count and come back for the sums; 7-8 us slower with
// many passes, so the heuristic takes it only with one (KERNEL_NOTES v15).

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
// us slower than the workspace fixup (bench/KERNEL_NOTES.md v7), so the
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
    if (p.cluster_pairs) {
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
    if (p.cluster_pairs) {
      PairReducePartial<Cfg>(p, ss, acc, w, consumer);
      return;
    }
  }
  ReducePartials<Cfg>(p, acc, w, consumer);
}

// True when all 64 rows of this consumer's part of tile t lie past M
// (skinny and small-M problems): it then issues no MMAs, so its peers have
// the SM's tensor cores alone, and runs no epilogue. Dense launches only.
// NOTES: skinny 7 x 8192 x 8192 (split-K 4, 128x256) went from 3.05-3.07 to
// 3.14-3.16 TB/s. In grouped launches (the last tile-row of members with
// M % 128 in [1, 64]) the same skip cost 2-3% and raised DRAM reads by 9%
// (round 10 call 1); a likely cause is that CTAs drawing such tiles run
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
  const int peer = !kGrouped && p.multicast_a ? MulticastRank() ^ 1 : -1;
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
  // not change that (round 16 call 7).
  const int consumer_u = __shfl_sync(0xffffffffu, consumer, 0);
  const uint64_t desc_a0 = DescA<Cfg, kAKMajor>(ss.a[0], consumer_u, 0);
  const uint64_t desc_b0 = DescB<Cfg, kBKMajor>(ss.b[0], 0);
  using Steps = DescSteps<Cfg>;
  while (sched.Next(&w)) {
    const bool stamp = unit < kCtaClockUnits && consumer == 0 && threadIdx.x % 128 == 0;
    if (stamp) StampCta(p, CtaClockUnitWord(unit, 0), GlobalTimer());
    if constexpr (kGrouped) {
      // The member's EpilogueParams go to shared memory by cp.async while
      // the k-loop runs. NOTES: read from global memory after the k-loop,
      // they cost the epilogue a round trip with the tensor cores idle
      // (~0.3 us in a one-tile CTA, round 9 call 3), and the compiler sinks
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
    if (stamp) StampCta(p, CtaClockUnitWord(unit, 1), GlobalTimer());
    if constexpr (!kGrouped) {
      if (w.role == UnitRole::kPartial) {
        StoreUnitPartial<Cfg>(p, ss, acc, w, consumer);
        if (stamp) {
          const unsigned long long t = GlobalTimer();
          StampCta(p, CtaClockUnitWord(unit, 2), t);
          StampCta(p, CtaClockUnitWord(unit, 3), t);
        }
        ++unit;
        continue;
      }
      if (w.role == UnitRole::kFinalize) AddUnitPartials<Cfg>(p, ss, acc, w, consumer);
      if (Cfg::kStagedStore_ && p.epi.tma_store) AcquireStaging(consumer);
      if (stamp) StampCta(p, CtaClockUnitWord(unit, 2), GlobalTimer());
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
      if (stamp) StampCta(p, CtaClockUnitWord(unit, 2), GlobalTimer());
      TileEpilogue<Cfg>(ss.unit_epi[consumer][unit & 1], &p.group[w.tile.batch].tma_d, acc, t,
                        consumer, ss);
    }
    if (stamp) StampCta(p, CtaClockUnitWord(unit, 3), GlobalTimer());
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

// ---------------------------------------------------------------- kernel

// kGrouped: the tiles of p.num_problems problems (descriptors in p.group),
// cooperative consumers only. Otherwise one strided-batched problem, stream-K
// when p.sk_tiles > 0 (cooperative only; ping-pong kernels are launched
// data-parallel).
template <typename In, int kBN, bool kAKMajor, bool kBKMajor, bool kPingPong, bool kGrouped = false>
__global__ void __launch_bounds__(
    KernelConfigFor<In, kBN, kAKMajor, kBKMajor, kPingPong>::kThreads, 1)
    Sm90GemmKernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = KernelConfigFor<In, kBN, kAKMajor, kBKMajor, kPingPong>;
  extern __shared__ uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage<Cfg>*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    StampCta(p, 0, GlobalTimer());
    StampCta(p, 4, SmId());
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::MbarInit(&ss.full[s], 1);
      // With A multicast both CTAs' consumers free each stage (ReleaseStage).
      ptx::MbarInit(&ss.empty[s], Cfg::kEmptyArrivals * (p.multicast_a ? 2 : 1));
    }
    ptx::MbarInit(&ss.mainloop_done[0], 4);
    ptx::MbarInit(&ss.mainloop_done[1], 4);
    for (int c = 0; c < 2; ++c) {
      ptx::MbarInit(&ss.pair_ready[c], 1);
      ptx::MbarInit(&ss.pair_done[c], 1);
    }
    ptx::FenceBarrierInit();
    if constexpr (!kGrouped) {
      ptx::PrefetchTensorMap(&p.tma_a);
      ptx::PrefetchTensorMap(&p.tma_b);
      if (Cfg::kStagedStore_ && p.epi.tma_store) ptx::PrefetchTensorMap(&p.tma_d);
    }
  }
  __syncthreads();
  // Paired split-K, A multicast: the peer's barriers are initialized before
  // anyone arrives on them remotely or multicasts into its ring.
  if (p.cluster_pairs || p.multicast_a) ptx::ClusterSync();
  // NOTES: launched with programmatic stream serialization, this grid's CTAs
  // may start while the previous kernel in the stream drains; the setup above
  // overlaps its tail. Before the wait nothing reads memory that a kernel may
  // write: the operands, C and the workspace only after it. A grouped launch
  // also reads its problem descriptors and shapes here and fetches its first
  // problem's tensor maps (measured 1.0 us and 1.1 us of a one-tile CTA's
  // 8.9 us, round 8 call 4): the plan's contract (sm90_gemm.h) is that they
  // are written by a copy, never a kernel, and a copy ahead of this launch
  // in the stream completes before the launch starts. The next grid may start
  // launching at once: it waits for our completion too, and can only take an
  // SM once our CTA there has exited.
  int first_problem = -1;
  if constexpr (kGrouped) {
    if (p.num_problems <= kSmemGroupShapes) {
      GroupedProblemShape* shapes = SmemGroupShapes(ss);
      for (int i = threadIdx.x; i < p.num_problems; i += blockDim.x) shapes[i] = p.group_shapes[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) first_problem = PrefetchFirstProblem<Cfg, true>(p, ss);
  }
  ptx::GridDependencyWait();
  ptx::LaunchDependents();
  if (threadIdx.x == 0) StampCta(p, 5, GlobalTimer());
  // The producer gives registers to the consumers (KernelConfig::kConsumerRegs).
  if (warpgroup == 0) {
    ptx::SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      ProducerLoop<Cfg, kAKMajor, kBKMajor, kGrouped>(p, ss, first_problem);
      StampCta(p, 1, GlobalTimer());
    } else if (threadIdx.x == 32 && p.cta_clock != nullptr) {
      // An idle producer warp watches the first stage land (word 7). It
      // starts polling long before the first load is issued, so phase 0 is
      // the one it sees complete; a CTA without units loads nothing.
      KernelScheduler<kGrouped> sched(p, ScheduleShapes<Cfg, kGrouped>(p, ss));
      WorkUnit w;
      if (sched.Next(&w)) {
        ptx::MbarWait(&ss.full[0], 0);
        StampCta(p, 7, GlobalTimer());
      }
    }
  } else {
    ptx::SetMaxNRegInc<Cfg::kConsumerRegs>();
    if constexpr (kPingPong) {
      static_assert(!kGrouped, "grouped launches use cooperative consumers");
      ConsumerLoopPingPong<In, Cfg, kAKMajor, kBKMajor>(p, ss, warpgroup - 1);
    } else {
      ConsumerLoop<In, Cfg, kAKMajor, kBKMajor, kGrouped>(p, ss, warpgroup - 1);
      if constexpr (!kGrouped) {
        if (p.grid_counters != nullptr) SumPartialsInGrid<Cfg>(p, ss);
      }
    }
    if (threadIdx.x % 128 == 0) StampCta(p, 1 + warpgroup, GlobalTimer());
  }
  // A multicast: the peer's consumers arrive on this CTA's empty barriers
  // up to their last stage, so neither CTA exits before both are done. The
  // cluster barrier is .aligned: each warp reconverges first (the producer
  // warp's lanes took different roles above).
  if (p.multicast_a) {
    __syncwarp();
    ptx::ClusterSync();
  }
#endif
}

}  // namespace gemm_kernels::sm90
