#include "common/reference_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace gemm {
namespace {

double ElementAt(const MatrixRef& m, uint64_t r, uint64_t c) {
  const auto* p = static_cast<const unsigned char*>(m.data) + m.offset(r, c);
  float f;
  ToFloat(m.dtype, p, &f, 1);
  if (IsFp8(m.dtype) && m.scales.mode != ScaleMode::kNone)
    return static_cast<double>(f) * ScaleAt(m.scales.data, ScaleIndex(m.fp8_operand(), r, c));
  return f;
}

}  // namespace

std::vector<double> ReadMatrix(const MatrixRef& m) {
  std::vector<double> out(m.rows * m.cols);
  for (uint64_t r = 0; r < m.rows; ++r)
    for (uint64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = ElementAt(m, r, c);
  return out;
}

std::vector<double> ReferenceGemm(const GemmProblemRef& p) {
  const GemmShape& s = p.shape;
  // op(A) as row-major M x K and op(B) as row-major K x N, in float64.
  std::vector<double> a(s.m * s.k), b(s.k * s.n);
  for (uint64_t i = 0; i < s.m; ++i)
    for (uint64_t l = 0; l < s.k; ++l)
      a[i * s.k + l] = s.transpose_a ? ElementAt(p.a, l, i) : ElementAt(p.a, i, l);
  for (uint64_t l = 0; l < s.k; ++l)
    for (uint64_t j = 0; j < s.n; ++j)
      b[l * s.n + j] = s.transpose_b ? ElementAt(p.b, j, l) : ElementAt(p.b, l, j);

  std::vector<double> d(s.m * s.n, 0.0);
  for (uint64_t i = 0; i < s.m; ++i) {
    double* row = &d[i * s.n];
    for (uint64_t l = 0; l < s.k; ++l) {
      const double ail = a[i * s.k + l];
      const double* brow = &b[l * s.n];
      for (uint64_t j = 0; j < s.n; ++j) row[j] += ail * brow[j];
    }
  }
  for (uint64_t i = 0; i < s.m; ++i) {
    for (uint64_t j = 0; j < s.n; ++j) {
      double v = p.alpha * d[i * s.n + j];
      if (p.beta != 0.0 && p.c.data != nullptr) v += p.beta * ElementAt(p.c, i, j);
      d[i * s.n + j] = v;
    }
  }
  return d;
}

double RelativeError(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) && std::isfinite(ref[i])) return std::numeric_limits<double>::infinity();
    const double e = out[i] - ref[i];
    diff += e * e;
    norm += ref[i] * ref[i];
  }
  if (norm == 0.0) return diff == 0.0 ? 0.0 : std::sqrt(diff);
  return std::sqrt(diff / norm);
}

double Tolerance(DType input, DType output, bool tf32) {
  // The rounding of the narrower of input and output dominates; the factors
  // leave room for fp32 accumulation order over large K.
  double tol = 1e-5;
  if (input == DType::kFp32 && tf32) tol = 2e-3;
  // Against the float64 product of the dequantized FP8 operands only the
  // accumulation and the output's rounding err; the room is for the GPU's
  // FP8 tensor cores, which accumulate with fewer bits than fp32.
  if (IsFp8(input)) tol = std::max(tol, 1e-3);
  if (input == DType::kFp16 || output == DType::kFp16) tol = std::max(tol, 5e-3);
  if (input == DType::kBf16 || output == DType::kBf16) tol = std::max(tol, 2e-2);
  return tol;
}

}  // namespace gemm
