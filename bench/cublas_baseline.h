// cuBLAS as the benchmark's baseline, behind a plain C++ header (the .cu side
// includes cublas_v2.h, which host-compiled code here cannot: see BUILD).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/gemm.h"

namespace gemm_bench {

class CublasBaseline {
 public:
  CublasBaseline();
  ~CublasBaseline();
  bool ok() const { return handle_ != nullptr; }
  int version() const;

  // D (row-major m x n, ld n) = A (row-major m x k, ld k; or column-major,
  // ld m, when a_col_major) * B (column-major k x n, ld k; or row-major, ld
  // n, when b_row_major), strided-batched with packed strides. Returns "" or
  // the error.
  std::string Gemm(gemm_kernels::DataType dtype, bool tf32, int64_t batch, int64_t m, int64_t n,
                   int64_t k, const void* a, const void* b, void* d, bool b_row_major = false,
                   bool a_col_major = false) const;

  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// One member of a grouped baseline call, laid out like Gemm() above.
struct GroupedMember {
  int m, n, k;
  const void* a;
  const void* b;
  void* d;
};

// cublasGemmGroupedBatchedEx with one group per problem (every shape
// differs), 16-bit inputs and outputs, fp32 compute. The device pointer
// arrays are built once here, as a caller would keep them.
class CublasGrouped {
 public:
  CublasGrouped(const CublasBaseline& base, gemm_kernels::DataType dtype,
                const std::vector<GroupedMember>& members);
  ~CublasGrouped();
  std::string Run() const;

 private:
  void* handle_;
  int dtype_;
  std::vector<int> m_, n_, k_, ld_a_, ld_b_, ld_d_, sizes_, trans_a_, trans_b_;
  std::vector<float> alpha_, beta_;
  void** dev_ptrs_ = nullptr;  // [A..., B..., D...]
  int count_;
};

}  // namespace gemm_bench
