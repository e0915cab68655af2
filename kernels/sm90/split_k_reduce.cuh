// Split-K reduction kernel: sums the fp32 partial tiles that the GEMM grid
// stored (one slot per (tile, split), fragment order) and runs the epilogue
// (alpha, beta * C, conversion, store) for every output dtype. Launched on
// the GEMM's stream with programmatic dependent launch; see
// kernels/scheduler/split_k_reduce.h for the slot layout and the fixed
// summation order.
#pragma once

#include <cstdint>

#include "kernels/scheduler/split_k_reduce.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/sm90/gemm_kernel.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

struct SplitKReduceParams {
  EpilogueParams epi;
  const float* partials;  // tiles x splits slots of BM x BN floats
  int tiles_m, tiles_n, batch, group_m;  // the GEMM's tile order
  int splits;
  int groups;           // SplitKReducePlan
  int quads_per_block;  // SplitKReducePlan
  int64_t quads;        // SplitKReducePlan
};

// Two adjacent outputs (row, col) and (row, col + 1), either of which may lie
// past N; pairs go out as one store when D (and C) allow it.
template <typename Out>
__device__ __forceinline__ void StorePairAt(const EpilogueParams& p, int64_t d_off, int64_t c_off,
                                            float x, float y, bool second) {
  using T = OutTraits<Out>;
  Out* d = static_cast<Out*>(p.d) + d_off;
  const Out* c = p.c ? static_cast<const Out*>(p.c) + c_off : nullptr;
  if (second && p.vec2_ok) {
    if (c) {
      const float2 cv = T::Unpack(*reinterpret_cast<const typename T::Pair*>(c));
      x += p.beta * cv.x;
      y += p.beta * cv.y;
    }
    *reinterpret_cast<typename T::Pair*>(d) = T::Pack(x, y);
    return;
  }
  if (c) x += p.beta * ToFloat(c[0]);
  d[0] = FromFloat<Out>(x);
  if (second) {
    if (c) y += p.beta * ToFloat(c[1]);
    d[1] = FromFloat<Out>(y);
  }
}

// The 2 x 2 outputs of one fragment quad at (row, col) of the whole problem.
template <typename Out>
__device__ __forceinline__ void StoreQuad(const EpilogueParams& p, float4 v, int row, int col,
                                          int batch) {
  if (col >= p.n) return;
  const bool second = col + 1 < p.n;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row + 8 * h;
    if (r >= p.m) continue;
    const int64_t d_off = batch * p.batch_stride_d + int64_t(r) * p.ldd + col;
    const int64_t c_off = batch * p.batch_stride_c + int64_t(r) * p.ldc + col;
    StorePairAt<Out>(p, d_off, c_off, p.alpha * (h ? v.z : v.x), p.alpha * (h ? v.w : v.y),
                     second);
  }
}

__device__ __forceinline__ void AddTo(float4& a, const float4& b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// Thread (g, x) of a block sums splits of group g for output quad
// blockIdx.x * quads_per_block + x; group 0 then adds the other groups' sums
// in ascending order and stores.
template <int kBM, int kBN>
__global__ void __launch_bounds__(kSplitKReduceThreads)
    SplitKReduceKernel(const __grid_constant__ SplitKReduceParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kQuadsPerTile = kBM * kBN / 4;
  __shared__ float4 group_sums[kSplitKReduceThreads];
  // NOTES: the GEMM grid lets this grid launch early (it triggers right after
  // its own setup); nothing here may read the partials before the GEMM has
  // completed and flushed them.
  ptx::GridDependencyWait();
  ptx::LaunchDependents();
  const int x = threadIdx.x % p.quads_per_block;
  const int g = threadIdx.x / p.quads_per_block;
  const int64_t q = int64_t(blockIdx.x) * p.quads_per_block + x;
  const int64_t tile = q / kQuadsPerTile;
  const int f = static_cast<int>(q - tile * kQuadsPerTile);
  // The quad's place in D; quads wholly outside it (rows past M, e.g. 121
  // of 128 rows of a skinny M = 7 tile, or columns past N) were never
  // stored by the GEMM and are not read.
  const PersistentTileScheduler order(p.tiles_m, p.tiles_n, p.batch, p.group_m, 0, 1);
  const TileCoord t = order.TileAt(tile);
  const FragmentQuad fq = FragmentQuadAt(f, kBN);
  const int row = t.m_block * kBM + fq.row;
  const int col = t.n_block * kBN + fq.col;
  const bool inside = q < p.quads && row < p.epi.m && col < p.epi.n;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (inside) {
    const float4* src =
        reinterpret_cast<const float4*>(p.partials) + tile * p.splits * kQuadsPerTile + f;
    const int s_end = SplitGroupBegin(g + 1, p.groups, p.splits);
#pragma unroll 4
    for (int s = SplitGroupBegin(g, p.groups, p.splits); s < s_end; ++s) {
      AddTo(acc, __ldcg(src + int64_t(s) * kQuadsPerTile));
    }
  }
  if (p.groups > 1) {
    group_sums[threadIdx.x] = acc;
    __syncthreads();
    if (g != 0) return;
    for (int j = 1; j < p.groups; ++j) AddTo(acc, group_sums[j * p.quads_per_block + x]);
  }
  if (!inside) return;
  switch (p.epi.out_dtype) {
    case DataType::kBF16:
      StoreQuad<__nv_bfloat16>(p.epi, acc, row, col, t.batch);
      break;
    case DataType::kF16:
      StoreQuad<__half>(p.epi, acc, row, col, t.batch);
      break;
    case DataType::kF32:
      StoreQuad<float>(p.epi, acc, row, col, t.batch);
      break;
  }
#endif
}

}  // namespace gemm_kernels::sm90
