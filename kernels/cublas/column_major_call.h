// A GemmArguments problem as the column-major call cuBLAS makes of it.
// Plain C++, tested on the CPU.
//
// The problem is first normalized to a row-major D (problem.h). A row-major
// m x n D with leading dimension ldd is, read column-major, the n x m
// matrix D^T, and D^T = B^T A^T: cuBLAS's "A" is our B and its "B" our A,
// each transposed (op T) exactly where our operand is K-major, since a
// K-major operand read column-major is the matrix cuBLAS needs, transposed.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/gemm.h"

namespace gemm_kernels {
namespace cublas {

struct ColumnMajorOperand {
  const void* ptr = nullptr;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  bool transpose = false;  // cuBLAS op T
  // The stored matrix's size, column-major, before op.
  int64_t rows = 0, cols = 0;
};

struct ColumnMajorCall {
  // cuBLAS's m x n x k: our n x m x k.
  int64_t m = 0, n = 0, k = 0, batch = 1;
  ColumnMajorOperand a;  // from our B: m x k after op
  ColumnMajorOperand b;  // from our A: k x n after op
  // Our D, column-major m x n (cuBLAS's C for the in-place APIs, D for cuBLASLt).
  void* d = nullptr;
  int64_t ldd = 0, batch_stride_d = 0;
  // Our C (beta != 0), laid out like d; nullptr when beta == 0.
  const void* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  // Where the in-place APIs must copy C into D before the product.
  bool copy_c_to_d = false;
  float alpha = 1.0f, beta = 0.0f;
  DataType in_dtype = DataType::kBf16;
  DataType out_dtype = DataType::kBf16;
  bool tf32 = false;  // fp32 inputs with allow_tf32
  // cuBLAS's A and B types (FP8 formats may differ) and, for FP8, their
  // scales: cuBLAS's A is our (normalized) B, so its scales are those of
  // our B, or of our A where normalization exchanged the operands.
  DataType a_dtype = DataType::kBf16;
  DataType b_dtype = DataType::kBf16;
  ScaleDesc a_scale;
  ScaleDesc b_scale;
};

// Requires Gemm::CanImplement(args) to have succeeded.
ColumnMajorCall ToColumnMajor(const GemmArguments& args);

// The type pairs cuBLAS runs with fp32 accumulation (cublas_gemm.h);
// `grouped`: cublasGemmGroupedBatchedEx, which needs out == in.
// InvalidArgument naming d.dtype otherwise.
absl::Status CheckCublasTypes(DataType in, DataType out, bool grouped);

}  // namespace cublas
}  // namespace gemm_kernels
