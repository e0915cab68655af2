// Launch parameters of the Hopper FP8 GEMM kernel (fp8_gemm_kernel.cuh):
// the dense kernel's KernelParams plus the operands' scales. Device and
// host (sm90_fp8_gemm.cu) code.
#pragma once

#include <cstdint>

#include "kernels/sm90/kernel_params.cuh"

namespace gemm_kernels::sm90 {

// The scales of the normalized problem's A and B (gemm.h ScaleDesc layouts;
// after a column-major D's swap, A's are the caller's B's and back).
struct Fp8Scales {
  const float* a;
  const float* b;
  int a_mode;  // ScaleMode
  int b_mode;
  // fp32 values per batch member (0 when batch == 1).
  int64_t a_member;
  int64_t b_member;
  int k_blocks;  // ceil(K / 128): the row length of A's block layout, rows of B's
  int n_blocks;  // ceil(N / 128): the row length of B's block layout
  // Scaled kernels: k-blocks whose wgmma results one temporary accumulator
  // collects before it is scaled and added to the fp32 accumulator (1 with
  // block scales).
  int promote_every;
};

struct Fp8KernelParams {  // 64-byte aligned through KernelParams' tensor maps
  KernelParams base;
  Fp8Scales s;
};

}  // namespace gemm_kernels::sm90
