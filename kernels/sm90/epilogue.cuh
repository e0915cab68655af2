// The epilogue of the Hopper GEMM kernel: alpha * acc + beta * C converted
// to the output dtype and stored, from the accumulator registers (vector
// paths for interior slices, a rolled element-wise path for the edges) or
// through a shared-memory staging buffer and TMA stores.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/gemm.h"
#include "kernels/scheduler/tile_scheduler.h"
#include "kernels/sm90/epilogue_values.cuh"
#include "kernels/sm90/kernel_config.cuh"
#include "kernels/sm90/ptx.cuh"

namespace gemm_kernels::sm90 {

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
    case DataType::kBf16:
      if (has_c)
        StoreInterior<__nv_bfloat16, kBN, true, kColPredicates>(p, acc, row, col, batch, r0, r8,
                                                                col_end);
      else
        StoreInterior<__nv_bfloat16, kBN, false, kColPredicates>(p, acc, row, col, batch, r0, r8,
                                                                 col_end);
      break;
    case DataType::kFp16:
      if (has_c)
        StoreInterior<__half, kBN, true, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      else
        StoreInterior<__half, kBN, false, kColPredicates>(p, acc, row, col, batch, r0, r8, col_end);
      break;
    case DataType::kFp32:
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
  const int64_t es = out_dtype == DataType::kFp32 ? 4 : 2;
  void* d = static_cast<uint8_t*>(p.d) + batch * p.batch_stride_d * es;
  const void* c = p.c ? static_cast<const uint8_t*>(p.c) + batch * p.batch_stride_c * es : nullptr;
  switch (out_dtype) {
    case DataType::kBf16:
      StoreEdgeAs<__nv_bfloat16, kBN>(d, c, vals, row, col, m, n, ldc, ldd, alpha, beta);
      break;
    case DataType::kFp16:
      StoreEdgeAs<__half, kBN>(d, c, vals, row, col, m, n, ldc, ldd, alpha, beta);
      break;
    case DataType::kFp32:
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
    case DataType::kBf16:
      StoreInteriorWide<__nv_bfloat16, kBN, kHasC>(p, acc, row, tile_col, batch, q, r0, r8);
      break;
    case DataType::kFp16:
      StoreInteriorWide<__half, kBN, kHasC>(p, acc, row, tile_col, batch, q, r0, r8);
      break;
    case DataType::kFp32:
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
  // tiles finish last in a single-wave launch (per-CTA stamps: the 8
  // N-ragged 128x256 tiles of 1920 x 1920 x 8192 ended ~9 us after the
  // other 112).
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
// store issue. Measured: a 128x128 tile's epilogue 0.45-0.8 us
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
      if (e.out_dtype == DataType::kBf16) {
        StoreStagedAs<__nv_bfloat16, Cfg>(tma_d, e.alpha, acc, t, consumer, buf);
      } else {
        StoreStagedAs<__half, Cfg>(tma_d, e.alpha, acc, t, consumer, buf);
      }
      return;
    }
  }
  Epilogue<Cfg, Cfg::kBN_, kRowPredicates>(e, acc, t, consumer);
}

}  // namespace gemm_kernels::sm90
