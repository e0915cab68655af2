// Per-CTA timing stamps of the Hopper GEMM kernel (Sm90LaunchChoice::cta_clock,
// kCtaClockWords words per CTA; the word layout is in kernels/config/heuristic.h).
//
// The stamps compile in only when GEMM_KERNEL_STAMPS is defined: by the
// generated kernels/sm90/build_options.h under
// `bazel build --define=gemm_kernel_stamps=1`, or by -DGEMM_KERNEL_STAMPS.
// Otherwise every Stamp* call is empty (no %globaltimer reads, no test of
// cta_clock), and MakeSm90Plan refuses a launch that asks for stamps.
#pragma once

#include <cstdint>

#include "kernels/config/heuristic.h"
#include "kernels/sm90/build_options.h"
#include "kernels/sm90/kernel_params.cuh"

namespace gemm_kernels::sm90 {

#if defined(GEMM_KERNEL_STAMPS)
constexpr bool kKernelStamps = true;
#else
constexpr bool kKernelStamps = false;
#endif

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

// Word `slot` := %globaltimer (ns); nothing without GEMM_KERNEL_STAMPS.
__device__ __forceinline__ void StampTime(const KernelParams& p, int slot) {
  if constexpr (kKernelStamps) StampCta(p, slot, GlobalTimer());
}

// Words `slot` and `slot2` := one %globaltimer reading.
__device__ __forceinline__ void StampTime2(const KernelParams& p, int slot, int slot2) {
  if constexpr (kKernelStamps) {
    const unsigned long long t = GlobalTimer();
    StampCta(p, slot, t);
    StampCta(p, slot2, t);
  }
}

// Word `slot` := the SM id.
__device__ __forceinline__ void StampSmId(const KernelParams& p, int slot) {
  if constexpr (kKernelStamps) StampCta(p, slot, SmId());
}

// Whether the stamps are compiled in and this launch asked for them.
__device__ __forceinline__ bool StampsOn(const KernelParams& p) {
  return kKernelStamps && p.cta_clock != nullptr;
}

}  // namespace gemm_kernels::sm90
