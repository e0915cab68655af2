// Hopper GEMM: TMA + wgmma, warp-specialized, persistent.
//
// One CTA per SM walks output tiles from PersistentTileScheduler. Warpgroup 0
// is the producer: one thread issues TMA loads of A and B k-blocks into a ring
// of kStages shared-memory stages, each guarded by a "full" mbarrier (TMA
// transaction bytes) and an "empty" mbarrier (one arrival per consumer warp).
// Warpgroups 1 and 2 are consumers: each owns 64 rows of the BM=128 tile and
// issues m64nBNk(16|8) wgmma with fp32 accumulators in registers, then runs
// the epilogue (alpha, beta * C, conversion, predicated stores) while the
// producer already streams the next tile's k-blocks.
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

#include "kernels/gemm.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/sm90/ptx.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace gemm_kernels::sm90 {

// Everything the kernel reads, passed as one __grid_constant__ parameter so
// the tensor maps stay in parameter space (TMA reads them from there).
struct KernelParams {  // 64-byte aligned through its CUtensorMap members
  CUtensorMap tma_a;
  CUtensorMap tma_b;
  int m, n, k;
  int tiles_m, tiles_n, batch, group_m;
  int k_blocks;
  int a_batch_step, b_batch_step;  // 0 when the operand is broadcast
  void* d;
  const void* c;  // nullptr when beta == 0
  int64_t ldd, ldc, batch_stride_d, batch_stride_c;
  float alpha, beta;
  DataType out_dtype;
  int vec2_ok;  // column pairs of C and D are 2-element aligned
};

template <typename In, int kBN, bool kAKMajor, bool kBKMajor>
struct KernelConfig {
  static constexpr int kBM = 128;
  static constexpr int kBN_ = kBN;
  static constexpr int kElemBytes = sizeof(In);
  static constexpr int kBK = 128 / kElemBytes;      // one 128-byte swizzle row
  static constexpr int kMmaK = 32 / kElemBytes;     // k per wgmma: 16 (16-bit), 8 (tf32)
  static constexpr int kKSteps = kBK / kMmaK;
  static constexpr int kStages = kBN == 256 ? 4 : 6;
  static constexpr int kABytes = kBM * kBK * kElemBytes;
  static constexpr int kBBytes = kBN * kBK * kElemBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kChunkBytes = 64 * kBK * kElemBytes;  // one MN-major chunk
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kAccRegs = kBN / 2;  // m64nBN fp32 accumulators per thread

  static_assert(kBM == 64 * kConsumers, "each consumer warpgroup owns 64 rows");
  static_assert(kBN == 128 || kBN == 256, "wgmma wrappers exist for N = 128 and 256");
  static_assert(kElemBytes == 4 ? (kAKMajor && kBKMajor) : true,
                "tf32 wgmma reads only K-major operands");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0,
                "stages must keep the 1024-byte alignment of the 128B swizzle");
};

template <class Cfg>
struct SharedStorage {
  alignas(1024) uint8_t a[Cfg::kStages][Cfg::kABytes];
  alignas(1024) uint8_t b[Cfg::kStages][Cfg::kBBytes];
  alignas(8) uint64_t full[Cfg::kStages];
  uint64_t empty[Cfg::kStages];
};

template <class Cfg>
constexpr size_t SmemBytes() {
  return sizeof(SharedStorage<Cfg>) + 1024;  // slack to align the dynamic base
}

// ---------------------------------------------------------------- producer

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

template <class Cfg, bool kAKMajor, bool kBKMajor>
__device__ void ProducerLoop(const KernelParams& p, SharedStorage<Cfg>& ss) {
  PersistentTileScheduler sched(p.tiles_m, p.tiles_n, p.batch, p.group_m, blockIdx.x, gridDim.x);
  int stage = 0;
  uint32_t phase = 0;
  for (; sched.is_valid(); sched.advance()) {
    const TileCoord t = sched.get();
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      // The first pass over the ring finds every stage free: waiting on the
      // parity before a fresh barrier's first phase returns at once.
      ptx::MbarWait(&ss.empty[stage], phase ^ 1);
      ptx::MbarArriveExpectTx(&ss.full[stage], Cfg::kStageBytes);
      LoadOperand<Cfg, kAKMajor>(&p.tma_a, ss.a[stage], &ss.full[stage], t.m_block * Cfg::kBM,
                                 kb * Cfg::kBK, t.batch * p.a_batch_step, Cfg::kBM);
      LoadOperand<Cfg, kBKMajor>(&p.tma_b, ss.b[stage], &ss.full[stage], t.n_block * Cfg::kBN_,
                                 kb * Cfg::kBK, t.batch * p.b_batch_step, Cfg::kBN_);
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
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
    else WgmmaBf16_m64n128k16<tA, tB>(acc, da, db, 1);
  } else if constexpr (std::is_same_v<In, __half>) {
    if constexpr (kN == 256) WgmmaF16_m64n256k16<tA, tB>(acc, da, db, 1);
    else WgmmaF16_m64n128k16<tA, tB>(acc, da, db, 1);
  } else {
    if constexpr (kN == 256) WgmmaTf32_m64n256k8(acc, da, db, 1);
    else WgmmaTf32_m64n128k8(acc, da, db, 1);
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

template <typename Out>
struct OutTraits;
template <>
struct OutTraits<float> {
  using Pair = float2;
  __device__ static float2 Pack(float a, float b) { return make_float2(a, b); }
  __device__ static float2 Unpack(float2 v) { return v; }
  __device__ static float ToFloat(float v) { return v; }
  __device__ static float FromFloat(float v) { return v; }
};
template <>
struct OutTraits<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  __device__ static __nv_bfloat162 Pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
  __device__ static float2 Unpack(__nv_bfloat162 v) { return __bfloat1622float2(v); }
  __device__ static float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 FromFloat(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct OutTraits<__half> {
  using Pair = __half2;
  __device__ static __half2 Pack(float a, float b) { return __floats2half2_rn(a, b); }
  __device__ static float2 Unpack(__half2 v) { return __half22float2(v); }
  __device__ static float ToFloat(__half v) { return __half2float(v); }
  __device__ static __half FromFloat(float v) { return __float2half_rn(v); }
};

// Writes this consumer's 64 x BN slice of the tile. The wgmma accumulator
// fragment gives each thread column pairs (2c, 2c+1) of rows r and r+8 in
// every 8-column block; pairs go out as one vector store when aligned.
template <typename Out, int kBN>
__device__ __forceinline__ void StoreTile(const KernelParams& p, const float (&acc)[kBN / 2],
                                          int row_base, int col_base, int batch) {
  using T = OutTraits<Out>;
  Out* d = static_cast<Out*>(p.d) + batch * p.batch_stride_d;
  const Out* c = p.c ? static_cast<const Out*>(p.c) + batch * p.batch_stride_c : nullptr;
  const bool vec = p.vec2_ok != 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row_base + 8 * h;
      const int col = col_base + 8 * j;
      if (row >= p.m || col >= p.n) continue;
      float v0 = p.alpha * acc[4 * j + 2 * h];
      float v1 = p.alpha * acc[4 * j + 2 * h + 1];
      Out* dp = d + int64_t(row) * p.ldd + col;
      const Out* cp = c ? c + int64_t(row) * p.ldc + col : nullptr;
      if (vec && col + 1 < p.n) {
        if (cp) {
          const float2 cv = T::Unpack(*reinterpret_cast<const typename T::Pair*>(cp));
          v0 += p.beta * cv.x;
          v1 += p.beta * cv.y;
        }
        *reinterpret_cast<typename T::Pair*>(dp) = T::Pack(v0, v1);
      } else {
        if (cp) v0 += p.beta * T::ToFloat(cp[0]);
        dp[0] = T::FromFloat(v0);
        if (col + 1 < p.n) {
          if (cp) v1 += p.beta * T::ToFloat(cp[1]);
          dp[1] = T::FromFloat(v1);
        }
      }
    }
  }
}

template <class Cfg, int kBN>
__device__ __forceinline__ void Epilogue(const KernelParams& p, const float (&acc)[kBN / 2],
                                         const TileCoord& t, int consumer) {
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int row_base = t.m_block * Cfg::kBM + consumer * 64 + warp * 16 + lane / 4;
  const int col_base = t.n_block * kBN + (lane % 4) * 2;
  switch (p.out_dtype) {
    case DataType::kBF16:
      StoreTile<__nv_bfloat16, kBN>(p, acc, row_base, col_base, t.batch);
      break;
    case DataType::kF16:
      StoreTile<__half, kBN>(p, acc, row_base, col_base, t.batch);
      break;
    case DataType::kF32:
      StoreTile<float, kBN>(p, acc, row_base, col_base, t.batch);
      break;
  }
}

template <typename In, class Cfg, bool kAKMajor, bool kBKMajor>
__device__ void ConsumerLoop(const KernelParams& p, SharedStorage<Cfg>& ss, int consumer) {
  constexpr int kBN = Cfg::kBN_;
  PersistentTileScheduler sched(p.tiles_m, p.tiles_n, p.batch, p.group_m, blockIdx.x, gridDim.x);
  const bool warp_leader = threadIdx.x % 32 == 0;
  int stage = 0;
  uint32_t phase = 0;
  for (; sched.is_valid(); sched.advance()) {
    const TileCoord t = sched.get();
    float acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = 0.0f;
    int prev_stage = -1;
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      ptx::MbarWait(&ss.full[stage], phase);
      ptx::WgmmaFence();
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
        Mma<In, kBN, kAKMajor, kBKMajor>(acc, DescA<Cfg, kAKMajor>(ss.a[stage], consumer, kk),
                                         DescB<Cfg, kBKMajor>(ss.b[stage], kk));
      }
      ptx::WgmmaCommit();
      // Keep one k-block of wgmma in flight; the one before it is done, so
      // its stage goes back to the producer.
      if (prev_stage >= 0) {
        ptx::WgmmaWait<1>();
        if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
      }
      prev_stage = stage;
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    ptx::WgmmaWait<0>();
    if (warp_leader) ptx::MbarArrive(&ss.empty[prev_stage]);
    Epilogue<Cfg, kBN>(p, acc, t, consumer);
  }
}

// ---------------------------------------------------------------- kernel

template <typename In, int kBN, bool kAKMajor, bool kBKMajor>
__global__ void __launch_bounds__(384, 1) Sm90GemmKernel(const __grid_constant__ KernelParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = KernelConfig<In, kBN, kAKMajor, kBKMajor>;
  static_assert(Cfg::kThreads == 384, "launch bounds assume 3 warpgroups");
  extern __shared__ uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage<Cfg>*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::MbarInit(&ss.full[s], 1);
      ptx::MbarInit(&ss.empty[s], Cfg::kConsumers * 4);  // one arrival per consumer warp
    }
    ptx::FenceBarrierInit();
    ptx::PrefetchTensorMap(&p.tma_a);
    ptx::PrefetchTensorMap(&p.tma_b);
  }
  __syncthreads();
  // NOTES: the producer needs few registers; giving them to the consumers
  // lets each hold a 64 x 256 fp32 accumulator tile without spilling.
  if (warpgroup == 0) {
    ptx::SetMaxNRegDec<40>();
    if (threadIdx.x == 0) ProducerLoop<Cfg, kAKMajor, kBKMajor>(p, ss);
  } else {
    ptx::SetMaxNRegInc<232>();
    ConsumerLoop<In, Cfg, kAKMajor, kBKMajor>(p, ss, warpgroup - 1);
  }
#endif
}

}  // namespace gemm_kernels::sm90
