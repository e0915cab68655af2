// cuBLASLt FP8 GEMMs as fp8_bench's baseline, behind a plain C++ header.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/gemm.h"

namespace gemm_bench {

// D (row-major m x n, ld n) = (A * sa) (row-major m x k, FP8) * (B * sb)
// (column-major k x n, FP8), computed as cuBLASLt's D^T = B^T A^T.
// `block`: cuBLASLt's block scales (A: one fp32 per 128 elements along K,
// B: per 128 x 128 block), else one fp32 per tensor. `fast_accum`:
// CUBLASLT_MATMUL_DESC_FAST_ACCUM (no promotion of partial sums).
class CublasLtFp8 {
 public:
  CublasLtFp8(int64_t m, int64_t n, int64_t k, gemm_kernels::DataType a,
              gemm_kernels::DataType b, gemm_kernels::DataType out, bool block, bool fast_accum);
  ~CublasLtFp8();
  CublasLtFp8(const CublasLtFp8&) = delete;
  CublasLtFp8& operator=(const CublasLtFp8&) = delete;

  // "" when an algorithm was found, else cuBLASLt's status.
  const std::string& error() const { return error_; }
  // fp32 scale values A and B need (1 each per tensor).
  int64_t a_scale_count() const { return a_scales_; }
  int64_t b_scale_count() const { return b_scales_; }
  std::string Run(const void* a, const void* b, void* d, const float* sa, const float* sb,
                  void* stream) const;

 private:
  struct State;
  State* s_ = nullptr;
  std::string error_;
  int64_t a_scales_ = 1, b_scales_ = 1;
};

}  // namespace gemm_bench
