// Per-CTA timing stamps of the Hopper GEMM kernel (Sm90LaunchChoice::cta_clock,
// kCtaClockWords words per CTA; the word layout is in kernels/config/heuristic.h).
#pragma once

#include <cstdint>

#include "kernels/config/heuristic.h"
#include "kernels/sm90/kernel_params.cuh"

namespace gemm_kernels::sm90 {

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned SmId() {
  unsigned id;
  asm volatile("mov.u32 %0, %smid;" : "=r"(id));
  return id;
}

// KernelParams::cta_clock: word `slot` of this CTA's record.
__device__ __forceinline__ void StampCta(const KernelParams& p, int slot,
                                         unsigned long long value) {
  if (p.cta_clock != nullptr) p.cta_clock[blockIdx.x * kCtaClockWords + slot] = value;
}


}  // namespace gemm_kernels::sm90
