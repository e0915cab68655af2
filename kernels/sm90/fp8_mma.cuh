// The MMA side of the FP8 kernel: format tags, the wgmma for each pair of
// formats and tile width, and the operand fence that pins accumulator
// registers around asynchronous wgmma. Device code only.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/wgmma_fp8_ops.cuh"

namespace gemm_kernels::sm90 {

struct E4m3 {
  static constexpr const char* kName = "e4m3";
};
struct E5m2 {
  static constexpr const char* kName = "e5m2";
};

// The kernels' "input type" for a pair of FP8 formats: one byte per
// element, so KernelConfig derives 128-element k-blocks and k = 32 steps.
template <class FA, class FB>
struct Fp8In {
  uint8_t bits;
};

// One m64nNk32 wgmma; scale_d 0 overwrites `acc`.
template <class FA, class FB, int kN>
__device__ __forceinline__ void Fp8Mma(float (&acc)[kN / 2], uint64_t da, uint64_t db,
                                       int scale_d) {
  static_assert(kN == 128 || kN == 256, "FP8 wgmma wrappers exist for N = 128 and 256");
  constexpr bool a4 = std::is_same_v<FA, E4m3>;
  constexpr bool b4 = std::is_same_v<FB, E4m3>;
  if constexpr (kN == 256) {
    if constexpr (a4 && b4) WgmmaE4m3E4m3_m64n256k32(acc, da, db, scale_d);
    else if constexpr (a4) WgmmaE4m3E5m2_m64n256k32(acc, da, db, scale_d);
    else if constexpr (b4) WgmmaE5m2E4m3_m64n256k32(acc, da, db, scale_d);
    else WgmmaE5m2E5m2_m64n256k32(acc, da, db, scale_d);
  } else {
    if constexpr (a4 && b4) WgmmaE4m3E4m3_m64n128k32(acc, da, db, scale_d);
    else if constexpr (a4) WgmmaE4m3E5m2_m64n128k32(acc, da, db, scale_d);
    else if constexpr (b4) WgmmaE5m2E4m3_m64n128k32(acc, da, db, scale_d);
    else WgmmaE5m2E5m2_m64n128k32(acc, da, db, scale_d);
  }
}

// Keeps the compiler from moving reads or writes of `acc` across this point:
// wgmma writes its accumulators asynchronously, and nothing else ties a
// register's later use to the wgmma.wait_group that completes it.
template <int kRegs>
__device__ __forceinline__ void FenceAccumulators(float (&acc)[kRegs]) {
#pragma unroll
  for (int i = 0; i < kRegs; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

}  // namespace gemm_kernels::sm90
