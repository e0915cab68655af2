// Host-side normalization of a GemmArguments into the one shape the kernels
// implement: a row-major D. A column-major D is the row-major D^T = B^T A^T, so
// the operands swap and every layout flips. Plain C++, tested on the CPU.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace gemm_kernels {

// An operand as the kernel sees it: "k-major" means the reduction dimension is
// contiguous (row-major A, column-major B).
struct NormalizedOperand {
  const void* ptr = nullptr;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  bool k_major = true;
};

struct NormalizedProblem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  DataType in_dtype = DataType::kBF16;
  DataType out_dtype = DataType::kBF16;
  NormalizedOperand a;  // m x k
  NormalizedOperand b;  // k x n
  const void* c = nullptr;  // row-major m x n, out_dtype; nullptr when beta == 0
  int64_t ldc = 0, batch_stride_c = 0;
  void* d = nullptr;  // row-major m x n, out_dtype
  int64_t ldd = 0, batch_stride_d = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool allow_tf32 = false;
  bool swapped = false;  // true when D was column-major and A/B were exchanged
};

// Requires Gemm::CanImplement(args) to have succeeded.
NormalizedProblem Normalize(const GemmArguments& args);

}  // namespace gemm_kernels
