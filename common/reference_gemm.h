// A float64 reference GEMM and the error measure the tests and the CLI use to
// check results from any backend.
#ifndef GEMM_COMMON_REFERENCE_GEMM_H_
#define GEMM_COMMON_REFERENCE_GEMM_H_

#include <vector>

#include "common/gemm_problem.h"

namespace gemm {

// Returns D = alpha * op(A) * op(B) + beta * C in float64, row-major M x N,
// reading the operands exactly as stored (dtype, layout, transpose); an FP8
// operand's elements count as code * scale (MatrixRef::scales). A problem
// under quantize_partner needs its partner quantized first (the reference
// of the dequantized operands).
std::vector<double> ReferenceGemm(const GemmProblemRef& p);

// Reads an output matrix (M x N, dtype and layout as given) into float64,
// row-major.
std::vector<double> ReadMatrix(const MatrixRef& m);

// Normwise relative error ||out - ref||_F / ||ref||_F. Any NaN or infinity in
// `out` that is not in `ref` gives +infinity, so NaN never passes a check.
double RelativeError(const std::vector<double>& out, const std::vector<double>& ref);

// The tolerance for the normwise relative error of a result computed from
// inputs of `input` type into `output` type (tf32 when allowed for fp32).
double Tolerance(DType input, DType output, bool tf32);

}  // namespace gemm

#endif  // GEMM_COMMON_REFERENCE_GEMM_H_
