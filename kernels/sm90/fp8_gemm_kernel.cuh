// Hopper FP8 GEMM: the warp-specialized persistent kernel of gemm_kernel.cuh
// (the same producer, ring, tile walk and epilogue) with FP8 wgmma in the
// consumers and the operands' scales applied on the way.
//
// Both operands are K-major FP8 (a 128-element, 128-byte k-block per ring
// stage, four m64nNk32 wgmma per k-block). Scales:
//   - tensor and channel scales multiply the finished fp32 accumulator
//     before the epilogue (ApplyOutputScales): alpha * sa * sb * acc.
//   - block scales change along K, so they are applied in the k-loop of the
//     scaled kernels (kScaled): each k-block's wgmma results go to a
//     temporary accumulator, which is multiplied by sa(i, kb) * sb(kb, nb)
//     and added to the fp32 accumulator in registers ("promotion").
//   - the scaled kernels promote every Fp8Scales::promote_every k-blocks
//     without block scales too: Hopper's FP8 wgmma adds its products into
//     the accumulator with fewer mantissa bits than fp32 (see DESIGN.md for
//     the measured error), and a fresh temporary bounds what it loses.
// The temporary doubles the accumulator registers, so the scaled kernels
// use the 128x128 tile (64 + 64 per thread); 128x256 accumulates directly.
// Data-parallel launches only.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/sm90/consumer.cuh"
#include "kernels/sm90/epilogue.cuh"
#include "kernels/sm90/fp8_mma.cuh"
#include "kernels/sm90/fp8_params.cuh"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/kernel_scheduler.cuh"
#include "kernels/sm90/mma.cuh"
#include "kernels/sm90/producer.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

constexpr int kScaleTensor = static_cast<int>(ScaleMode::kTensor);
constexpr int kScaleChannel = static_cast<int>(ScaleMode::kChannel);
constexpr int kScaleBlock = static_cast<int>(ScaleMode::kBlock);

// The epilogue factor of A's row `row` (1 for block scales, applied in the
// k-loop; rows past M read nothing).
__device__ __forceinline__ float RowScale(const Fp8Scales& s, const float* a, int row, int m) {
  if (s.a_mode == kScaleTensor) return __ldg(a);
  if (s.a_mode == kScaleChannel) return row < m ? __ldg(a + row) : 0.0f;
  return 1.0f;
}

__device__ __forceinline__ float ColScale(const Fp8Scales& s, const float* b, int col, int n) {
  if (s.b_mode == kScaleTensor) return __ldg(b);
  if (s.b_mode == kScaleChannel) return col < n ? __ldg(b + col) : 0.0f;
  return 1.0f;
}

// Multiplies this thread's accumulators by the tensor and channel scales of
// their rows and columns (the wgmma m64nN fragment: register 4j + 2h + c
// holds row 16 * warp + lane / 4 + 8h, column 8j + 2 * (lane % 4) + c).
template <class Cfg>
__device__ __forceinline__ void ApplyOutputScales(const Fp8Scales& s, int m, int n,
                                                  float (&acc)[Cfg::kAccRegs], const TileCoord& t,
                                                  int consumer) {
  if (s.a_mode == kScaleBlock && s.b_mode == kScaleBlock) return;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int row = t.m_block * Cfg::kBM + consumer * 64 + warp * 16 + lane / 4;
  const int col = t.n_block * Cfg::kBN_ + 2 * (lane % 4);
  const float* a = s.a + t.batch * s.a_member;
  const float* b = s.b + t.batch * s.b_member;
  const float r0 = RowScale(s, a, row, m);
  const float r8 = RowScale(s, a, row + 8, m);
#pragma unroll
  for (int j = 0; j < Cfg::kAccRegs / 4; ++j) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float cs = ColScale(s, b, col + 8 * j + c, n);
      acc[4 * j + c] *= r0 * cs;
      acc[4 * j + 2 + c] *= r8 * cs;
    }
  }
}

// Block scales of k-block kb for this thread's two rows (r0, r8) and the
// tile's 128 columns (1 for an operand without block scales).
template <class Cfg>
__device__ __forceinline__ void BlockFactors(const Fp8Scales& s, int m, const TileCoord& t,
                                             int consumer, int kb, float* f0, float* f8) {
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int row = t.m_block * Cfg::kBM + consumer * 64 + warp * 16 + lane / 4;
  float a0 = 1.0f, a8 = 1.0f, b = 1.0f;
  if (s.a_mode == kScaleBlock) {
    const float* a = s.a + t.batch * s.a_member + kb;
    a0 = row < m ? __ldg(a + int64_t(row) * s.k_blocks) : 0.0f;
    a8 = row + 8 < m ? __ldg(a + int64_t(row + 8) * s.k_blocks) : 0.0f;
  }
  if (s.b_mode == kScaleBlock) {
    static_assert(Cfg::kBN_ == 128, "B's block scales cover 128 columns: one per 128-wide tile");
    b = __ldg(s.b + t.batch * s.b_member + int64_t(kb) * s.n_blocks + t.n_block);
  }
  *f0 = a0 * b;
  *f8 = a8 * b;
}

template <class FA, class FB, class Cfg, bool kScaled>
__device__ void Fp8ConsumerLoop(const Fp8KernelParams& fp, SharedStorage<Cfg>& ss, int consumer) {
  constexpr int kBN = Cfg::kBN_;
  const KernelParams& p = fp.base;
  const Fp8Scales& s = fp.s;
  KernelScheduler<false> sched(p, ScheduleShapes<Cfg, false>(p, ss));
  WorkUnit w;
  const bool warp_leader = threadIdx.x % 32 == 0;
  int stage = 0;
  uint32_t phase = 0;
  const int consumer_u = __shfl_sync(0xffffffffu, consumer, 0);
  const uint64_t desc_a0 = DescA<Cfg, true>(ss.a[0], consumer_u, 0);
  const uint64_t desc_b0 = DescB<Cfg, true>(ss.b[0], 0);
  using Steps = DescSteps<Cfg>;
  constexpr uint32_t kStep = Steps::template KStep<true>();
  const int every = kScaled ? (s.promote_every > 0 ? s.promote_every : 1) : 1;
  while (sched.Next(&w)) {
    float acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = 0.0f;
    const bool idle = ConsumerRowsOutside<Cfg, false>(p, w.tile, consumer);
    const int mma_end = idle ? w.k_begin : w.k_end;
    int prev_stage = -1;
    int kb = w.k_begin;
    if constexpr (!kScaled) {
      for (; kb < mma_end; ++kb) {
        ptx::MbarWait(&ss.full[stage], phase);
        ptx::WgmmaFence();
        const uint64_t da = DescPlus(desc_a0, stage * Steps::kStageA);
        const uint64_t db = DescPlus(desc_b0, stage * Steps::kStageB);
#pragma unroll
        for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
          Fp8Mma<FA, FB, kBN>(acc, DescPlus(da, kk * kStep), DescPlus(db, kk * kStep), 1);
        }
        ptx::WgmmaCommit();
        if (prev_stage >= 0) {
          ptx::WgmmaWait<1>();
          if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
        }
        prev_stage = stage;
        AdvanceStage<Cfg>(stage, phase, 1);
      }
      ptx::WgmmaWait<0>();
      FenceAccumulators(acc);
      if (warp_leader && prev_stage >= 0) ptx::MbarArrive(&ss.empty[prev_stage]);
    } else {
      float part[Cfg::kAccRegs];
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) part[i] = 0.0f;
      // One group of k-blocks per promotion; the first wgmma of a group
      // overwrites the temporary (scale_d 0).
      for (int group = w.k_begin; group < mma_end; group += every) {
        const int group_end = min(group + every, mma_end);
        for (kb = group; kb < group_end; ++kb) {
          ptx::MbarWait(&ss.full[stage], phase);
          FenceAccumulators(part);
          ptx::WgmmaFence();
          const uint64_t da = DescPlus(desc_a0, stage * Steps::kStageA);
          const uint64_t db = DescPlus(desc_b0, stage * Steps::kStageB);
#pragma unroll
          for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
            Fp8Mma<FA, FB, kBN>(part, DescPlus(da, kk * kStep), DescPlus(db, kk * kStep),
                                kk == 0 && kb == group ? 0 : 1);
          }
          ptx::WgmmaCommit();
          if (prev_stage >= 0) {
            ptx::WgmmaWait<1>();
            if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
          }
          prev_stage = stage;
          AdvanceStage<Cfg>(stage, phase, 1);
        }
        // Block scales (a group is one k-block then): their loads go out
        // before the wait for the tensor cores.
        float f0 = 1.0f, f8 = 1.0f;
        BlockFactors<Cfg>(s, p.m, w.tile, consumer, group, &f0, &f8);
        ptx::WgmmaWait<0>();
        FenceAccumulators(part);
        if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
        prev_stage = -1;
#pragma unroll
        for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] += part[i] * ((i & 2) ? f8 : f0);
      }
      kb = mma_end;
    }
    // An idle consumer hands each stage back once it has landed.
    for (; kb < w.k_end; ++kb) {
      ptx::MbarWait(&ss.full[stage], phase);
      if (warp_leader) ptx::MbarArrive(&ss.empty[stage]);
      AdvanceStage<Cfg>(stage, phase, 1);
    }
    if (!idle) {
      ApplyOutputScales<Cfg>(s, p.m, p.n, acc, w.tile, consumer);
      TileEpilogue<Cfg, Cfg::kRowChecks>(p.epi, &p.tma_d, acc, w.tile, consumer, ss);
    }
  }
}

template <class FA, class FB, int kBN, bool kScaled>
__global__ void __launch_bounds__(KernelConfigFor<Fp8In<FA, FB>, kBN, true, true, false>::kThreads,
                                  1) Sm90Fp8GemmKernel(const __grid_constant__ Fp8KernelParams fp) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = KernelConfigFor<Fp8In<FA, FB>, kBN, true, true, false>;
  const KernelParams& p = fp.base;
  extern __shared__ uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage<Cfg>*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int st = 0; st < Cfg::kStages; ++st) {
      ptx::MbarInit(&ss.full[st], 1);
      ptx::MbarInit(&ss.empty[st], Cfg::kEmptyArrivals);
    }
    ptx::FenceBarrierInit();
    ptx::PrefetchTensorMap(&p.tma_a);
    ptx::PrefetchTensorMap(&p.tma_b);
  }
  __syncthreads();
  // Programmatic serialization: nothing above read memory a previous
  // kernel may write (see Sm90GemmKernel).
  ptx::GridDependencyWait();
  ptx::LaunchDependents();
  if (warpgroup == 0) {
    ptx::SetMaxNRegDec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) ProducerLoop<Cfg, true, true, false>(p, ss, -1);
  } else {
    ptx::SetMaxNRegInc<Cfg::kConsumerRegs>();
    Fp8ConsumerLoop<FA, FB, Cfg, kScaled>(fp, ss, warpgroup - 1);
  }
#endif
}

}  // namespace gemm_kernels::sm90
