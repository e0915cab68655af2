// The MMA side of the Hopper GEMM kernel's consumers: the wgmma for each
// input type and tile width, and the shared-memory descriptors of the ring.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/sm90/ptx.cuh"
#include "kernels/sm90/wgmma_ops.cuh"

namespace gemm_kernels::sm90 {

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


}  // namespace gemm_kernels::sm90
