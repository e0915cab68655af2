// What every epilogue of the Hopper kernels works with: the output
// problem's parameters and the conversions between fp32 accumulators and the
// output dtypes. Shared by the GEMM kernel (gemm_kernel.cuh) and the split-K
// sums (split_sums.cuh). Device code only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/gemm.h"

namespace gemm_kernels::sm90 {

// What the epilogue of one problem reads.
struct EpilogueParams {
  int m, n;
  void* d;
  const void* c;  // nullptr when beta == 0
  int64_t ldd, ldc, batch_stride_d, batch_stride_c;
  float alpha, beta;
  DataType out_dtype;
  int vec2_ok;   // column pairs of C and D are 2-element aligned
  int vec16_ok;  // D (and C when read): rows and batch members 16-byte aligned
  // D is 16-bit, there is no C, and tma_d (KernelParams' or GroupedProblem's)
  // maps D: kernels with a staging buffer take the staged TileEpilogue.
  int tma_store;
};

static_assert(sizeof(EpilogueParams) % 16 == 0, "copied to shared memory in 16-byte pieces");

template <typename Out>
struct OutTraits;
template <>
struct OutTraits<float> {
  using Pair = float2;
  __device__ static float2 Pack(float a, float b) { return make_float2(a, b); }
  __device__ static float2 Unpack(float2 v) { return v; }
};
template <>
struct OutTraits<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  __device__ static __nv_bfloat162 Pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
  __device__ static float2 Unpack(__nv_bfloat162 v) { return __bfloat1622float2(v); }
};
template <>
struct OutTraits<__half> {
  using Pair = __half2;
  __device__ static __half2 Pack(float a, float b) { return __floats2half2_rn(a, b); }
  __device__ static float2 Unpack(__half2 v) { return __half22float2(v); }
};

// Element conversions of the epilogue's rolled loops (the vector paths
// convert pairs through OutTraits).
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
template <typename Out>
__device__ __forceinline__ Out FromFloat(float v) {
  if constexpr (std::is_same_v<Out, float>) return v;
  else if constexpr (std::is_same_v<Out, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

}  // namespace gemm_kernels::sm90
