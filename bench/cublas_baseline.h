// cuBLAS as the benchmark's baseline, behind a plain C++ header (the .cu side
// includes cublas_v2.h, which host-compiled code here cannot: see BUILD).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/gemm.h"

namespace gemm_bench {

class CublasBaseline {
 public:
  CublasBaseline();
  ~CublasBaseline();
  bool ok() const { return handle_ != nullptr; }
  int version() const;

  // D (row-major m x n, ld n) = A (row-major m x k, ld k) * B (column-major
  // k x n, ld k), strided-batched with packed strides. Returns "" or the error.
  std::string Gemm(gemm_kernels::DataType dtype, bool tf32, int64_t batch, int64_t m, int64_t n,
                   int64_t k, const void* a, const void* b, void* d) const;

 private:
  void* handle_ = nullptr;
};

}  // namespace gemm_bench
