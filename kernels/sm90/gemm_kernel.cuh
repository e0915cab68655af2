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
//
// The kernel's parts, by role: kernel_params.cuh (what a launch passes),
// kernel_config.cuh (per-instance constants, shared storage),
// kernel_scheduler.cuh (the work-unit walk), producer.cuh (TMA loads),
// mma.cuh and consumer.cuh (the k-loop), epilogue.cuh (stores of D),
// fixup.cuh (partial tiles of stream-K and split-K), instrumentation.cuh
// (per-CTA stamps); this file is the kernel entry.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/sm90/consumer.cuh"
#include "kernels/sm90/instrumentation.cuh"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_params.cuh"
#include "kernels/sm90/kernel_scheduler.cuh"
#include "kernels/sm90/producer.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

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
    StampTime(p, 0);
    StampSmId(p, 4);
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::MbarInit(&ss.full[s], 1);
      // With A multicast both CTAs' consumers free each stage (ReleaseStage).
      ptx::MbarInit(&ss.empty[s],
                    Cfg::kEmptyArrivals * (p.mode == LaunchMode::kMulticastA ? 2 : 1));
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
  if (LaunchedAsPairs(p.mode)) ptx::ClusterSync();
  // NOTES: launched with programmatic stream serialization, this grid's CTAs
  // may start while the previous kernel in the stream drains; the setup above
  // overlaps its tail. Before the wait nothing reads memory that a kernel may
  // write: the operands, C and the workspace only after it. A grouped launch
  // also reads its problem descriptors and shapes here and fetches its first
  // problem's tensor maps (measured 1.0 us and 1.1 us of a one-tile CTA's
  // 8.9 us): the plan's contract (sm90_gemm.h) is that they
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
  if (threadIdx.x == 0) StampTime(p, 5);
  // The producer gives registers to the consumers (KernelConfig::kConsumerRegs).
  if (warpgroup == 0) {
    ptx::SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      ProducerLoop<Cfg, kAKMajor, kBKMajor, kGrouped>(p, ss, first_problem);
      StampTime(p, 1);
    } else if (threadIdx.x == 32 && StampsOn(p)) {
      // An idle producer warp watches the first stage land (word 7). It
      // starts polling long before the first load is issued, so phase 0 is
      // the one it sees complete; a CTA without units loads nothing.
      KernelScheduler<kGrouped> sched(p, ScheduleShapes<Cfg, kGrouped>(p, ss));
      WorkUnit w;
      if (sched.Next(&w)) {
        ptx::MbarWait(&ss.full[0], 0);
        StampTime(p, 7);
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
    if (threadIdx.x % 128 == 0) StampTime(p, 1 + warpgroup);
  }
  // A multicast: the peer's consumers arrive on this CTA's empty barriers
  // up to their last stage, so neither CTA exits before both are done. The
  // cluster barrier is .aligned: each warp reconverges first (the producer
  // warp's lanes took different roles above).
  if (p.mode == LaunchMode::kMulticastA) {
    __syncwarp();
    ptx::ClusterSync();
  }
#endif
}

}  // namespace gemm_kernels::sm90
