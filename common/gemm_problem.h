// The service's internal description of one GEMM problem,
//   D = alpha * op(A) * op(B) + beta * C,
// with pointers to operand bytes that live elsewhere (a request message, a
// staging buffer). Shared by the server, the client and the tests so that the
// meaning of shapes, transposes and layouts is defined in exactly one place.
#ifndef GEMM_COMMON_GEMM_PROBLEM_H_
#define GEMM_COMMON_GEMM_PROBLEM_H_

#include <cstdint>
#include <optional>

#include "common/dtype.h"
#include "common/fp8.h"
#include "common/types.h"

namespace gemm {

// A matrix stored on the server by RegisterMatrix (service/store/resident_matrix.h).
class ResidentMatrix;

// The fp32 scales of an FP8 operand (common/fp8.h has their layout).
struct Fp8Scales {
  ScaleMode mode = ScaleMode::kNone;
  // Which operand the scales are laid out for, and whether the matrix is
  // stored transposed (op(X) = X^T): with the stored shape, they fix the
  // index of each element's scale.
  OperandRole operand = OperandRole::kA;
  bool transposed = false;
  // `count` little-endian fp32 values (possibly unaligned), kept alive by
  // whoever keeps the matrix's bytes alive.
  const void* data = nullptr;
  uint64_t count = 0;
};

// A dense matrix in memory: rows x cols, leading dimension implied by layout.
struct MatrixRef {
  const void* data = nullptr;
  uint64_t rows = 0;
  uint64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  DType dtype = DType::kFp32;
  // Set when the matrix is a resident one: `data` is then its host copy, or
  // nullptr when it lives only in device memory (the executor that made it
  // knows where). Whoever holds the MatrixRef keeps the matrix alive.
  const ResidentMatrix* resident = nullptr;
  // Set for an FP8 matrix (mode kNone otherwise).
  Fp8Scales scales;

  // Whether there is a matrix at all (in host or device memory).
  bool present() const { return data != nullptr || resident != nullptr; }

  uint64_t ld() const { return layout == Layout::kRowMajor ? cols : rows; }
  uint64_t elements() const { return rows * cols; }
  uint64_t bytes() const { return elements() * SizeOf(dtype); }
  // Byte offset of element (r, c).
  uint64_t offset(uint64_t r, uint64_t c) const {
    return (layout == Layout::kRowMajor ? r * cols + c : c * rows + r) * SizeOf(dtype);
  }
  // The FP8 geometry of the matrix with its scales.
  Fp8Operand fp8_operand() const {
    return Fp8Operand{rows, cols, layout, scales.operand, scales.transposed, scales.mode};
  }
};

struct GemmShape {
  uint64_t m = 0;
  uint64_t n = 0;
  uint64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  // The element type A runs as (an FP8 format for FP8 problems, also when
  // the server quantizes a bf16/fp32 A for the problem). B runs as the same
  // type unless input_dtype_b is set (FP8 problems that mix formats).
  DType input_dtype = DType::kFp32;
  std::optional<DType> input_dtype_b;
  DType output_dtype = DType::kFp32;
  Layout layout_a = Layout::kRowMajor;
  Layout layout_b = Layout::kRowMajor;
  Layout layout_c = Layout::kRowMajor;
  Layout layout_d = Layout::kRowMajor;
  bool allow_tf32 = false;

  // Stored shapes: A is M x K (K x M transposed), B is K x N (N x K transposed).
  uint64_t a_rows() const { return transpose_a ? k : m; }
  uint64_t a_cols() const { return transpose_a ? m : k; }
  uint64_t b_rows() const { return transpose_b ? n : k; }
  uint64_t b_cols() const { return transpose_b ? k : n; }
  double flops() const { return 2.0 * static_cast<double>(m) * n * k; }
  DType b_dtype() const { return input_dtype_b.value_or(input_dtype); }
  bool fp8() const { return IsFp8(input_dtype); }
};

// One problem ready to run: operands in, a writable output of M x N elements
// of shape.output_dtype in shape.layout_d.
struct GemmProblemRef {
  GemmShape shape;
  double alpha = 1.0;
  double beta = 0.0;
  MatrixRef a;
  MatrixRef b;
  MatrixRef c;  // absent (!present()) when beta == 0
  void* d = nullptr;
  // Under GemmProblem.quantize_partner: the operand (bf16 or fp32 as given)
  // to quantize for this problem to the FP8 type and scale mode it runs as
  // (shape.input_dtype / input_dtype_b, and the other operand's scale mode),
  // by the rule of common/fp8.h. The executor does it (kNone: neither).
  enum class Quantize { kNone, kA, kB };
  Quantize quantize = Quantize::kNone;
  ScaleMode quantize_mode = ScaleMode::kNone;

  // Bytes of the result D (and of C, which has D's type and shape).
  uint64_t d_bytes() const { return shape.m * shape.n * SizeOf(shape.output_dtype); }

  // Bytes the problem must move at least once: A, B, C (if read) and D.
  uint64_t algorithmic_bytes() const {
    return a.bytes() + b.bytes() + (c.present() ? c.bytes() : 0) +
           shape.m * shape.n * SizeOf(shape.output_dtype);
  }
};

// Builds the MatrixRef of A, B or C for `shape` (dtype and stored dims).
MatrixRef MatrixA(const GemmShape& s, const void* data);
MatrixRef MatrixB(const GemmShape& s, const void* data);
MatrixRef MatrixC(const GemmShape& s, const void* data);

}  // namespace gemm

#endif  // GEMM_COMMON_GEMM_PROBLEM_H_
