// Sums of split-K partials, shared by the two ways a split-K launch with
// every split's partial in the workspace is finished: the reduction kernel
// (split_k_reduce.cuh) and the GEMM grid itself (SumPartialsInGrid in
// gemm_kernel.cuh). Each output float4 ("quad" of the wgmma fragment order,
// scheduler/split_k_reduce.h) sums the `splits` slots of its tile, split
// group by split group in ascending order, then the group sums in ascending
// group order: the order is fixed, so results are bit-identical across runs.
// Then the epilogue (alpha, beta * C, conversion, store) for every output
// dtype. Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/scheduler/split_k_reduce.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/sm90/epilogue_values.cuh"

namespace gemm_kernels::sm90 {

// What the sums read and where they store.
struct SplitSumArgs {
  EpilogueParams epi;
  const float* partials;  // tiles x splits slots of BM x BN floats, slot t * splits + s
  int tiles_m, tiles_n, batch, group_m;  // the GEMM's tile order
  int splits;
  int64_t quads;  // float4s of output in all: tiles * BM * BN / 4
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

// acc += src[s * stride], ..., src[(s + kN - 1) * stride] in that order, with
// all kN loads issued before the first add.
template <int kN>
__device__ __forceinline__ void AddSplits(float4& acc, const float4* src, int s, int64_t stride) {
  float4 v[kN];
#pragma unroll
  for (int u = 0; u < kN; ++u) v[u] = __ldcg(src + (s + u) * stride);
#pragma unroll
  for (int u = 0; u < kN; ++u) AddTo(acc, v[u]);
}

// One pass over the quads [first, min(first + per_pass, end)): thread
// `thread` (of groups x per_pass) sums split group thread / per_pass of
// quad first + thread % per_pass; after sync(), a barrier over those
// threads, group 0 adds the other groups' sums (through `group_sums`, one
// float4 per thread) and stores the quad. A caller making several passes
// syncs again before the next one reuses `group_sums`. Quads wholly
// outside D (rows past M, e.g. 121 of 128 rows of a skinny M = 7 tile, or
// columns past N) were never stored by the GEMM and are not read.
template <int kBM, int kBN, class Sync>
__device__ __forceinline__ void SumSplitQuads(const SplitSumArgs& a, int64_t first, int64_t end,
                                              int groups, int per_pass, float4* group_sums,
                                              int thread, Sync sync) {
  constexpr int kQuadsPerTile = kBM * kBN / 4;
  const int x = thread % per_pass;
  const int g = thread / per_pass;
  const int64_t q = first + x;
  const int64_t tile = q / kQuadsPerTile;
  const int f = static_cast<int>(q - tile * kQuadsPerTile);
  const PersistentTileScheduler order(a.tiles_m, a.tiles_n, a.batch, a.group_m, 0, 1);
  const TileCoord t = order.TileAt(tile);
  const FragmentQuad fq = FragmentQuadAt(f, kBN);
  const int row = t.m_block * kBM + fq.row;
  const int col = t.n_block * kBN + fq.col;
  const bool inside = q < end && row < a.epi.m && col < a.epi.n;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (inside) {
    const float4* src =
        reinterpret_cast<const float4*>(a.partials) + tile * a.splits * kQuadsPerTile + f;
    // NOTES: loads in batches of up to 16, summed in ascending split order
    // as one at a time would be. With 4 in flight (#pragma unroll 4), the
    // grid's own sums of 128 x 128 x 65536 (16 splits per thread) took 5 us
    // of round trips to L2 (per-CTA stamps).
    int s = SplitGroupBegin(g, groups, a.splits);
    const int s_end = SplitGroupBegin(g + 1, groups, a.splits);
    for (; s + 16 <= s_end; s += 16) AddSplits<16>(acc, src, s, kQuadsPerTile);
    if (s + 8 <= s_end) {
      AddSplits<8>(acc, src, s, kQuadsPerTile);
      s += 8;
    }
    if (s + 4 <= s_end) {
      AddSplits<4>(acc, src, s, kQuadsPerTile);
      s += 4;
    }
    for (; s < s_end; ++s) AddTo(acc, __ldcg(src + int64_t(s) * kQuadsPerTile));
  }
  if (groups > 1) {
    group_sums[thread] = acc;
    sync();
    if (g != 0) return;
    for (int j = 1; j < groups; ++j) AddTo(acc, group_sums[j * per_pass + x]);
  }
  if (!inside) return;
  switch (a.epi.out_dtype) {
    case DataType::kBf16:
      StoreQuad<__nv_bfloat16>(a.epi, acc, row, col, t.batch);
      break;
    case DataType::kFp16:
      StoreQuad<__half>(a.epi, acc, row, col, t.batch);
      break;
    case DataType::kFp32:
      StoreQuad<float>(a.epi, acc, row, col, t.batch);
      break;
  }
}

}  // namespace gemm_kernels::sm90
