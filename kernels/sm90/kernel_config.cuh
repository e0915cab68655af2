// Compile-time configuration of each Hopper GEMM kernel instance (tile,
// stages, warpgroups, register budgets), its shared storage, and the ring
// position arithmetic the producer and the consumers share.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/scheduler/grouped_tile_scheduler.h"
#include "kernels/sm90/epilogue_values.cuh"
#include "kernels/sm90/kernel_params.cuh"

namespace gemm_kernels::sm90 {

// kPingPong: each consumer warpgroup takes whole 128 x kBN tiles in turn
// (tiles 0, 2, 4, ... and 1, 3, 5, ... of this CTA), so one consumer's
// epilogue overlaps the other's MMAs. Otherwise both consumers share each tile
// (64 rows each: "cooperative").
// kStagedStore: a staging buffer for the whole output tile follows the ring
// (one stage fewer pays for it), for the staged TileEpilogue; see KernelConfigFor.
// kBN == 192 is the square 192x192 tile on three consumer warpgroups.
// NOTES: cuBLAS runs 192x192 on 3072^3 and 4224^3: 96 MMA
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
  // warpgroup was seen waiting: the other sat in
  // setmaxnreg.inc for registers the CTA did not have (a
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
// (memory-bound) lost 3-4% with it, grouped 32 (K = 2048) gained 3%
// (H200), so they keep the register path.
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

}  // namespace gemm_kernels::sm90
