// FP8 helpers of the end-to-end tests (CPU and CUDA backends): random data,
// the client's quantization, and a result's error against the float64
// product of the dequantized operands.
#ifndef GEMM_TESTS_FP8_TEST_UTIL_H_
#define GEMM_TESTS_FP8_TEST_UTIL_H_

#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "client/matrix_view.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "common/reference_gemm.h"

namespace gemm {
namespace test {

inline std::vector<float> RandomFloats(uint64_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  FromFloat(DType::kBf16, v.data(), out.data(), v.size());
  return out;
}

inline QuantizedMatrix Quantize(const MatrixView& source, DType format, ScaleMode mode,
                                OperandRole role, bool transposed) {
  auto q = QuantizeToFp8(source, Fp8Quantization{format, mode, role, transposed});
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? std::move(*q) : QuantizedMatrix();
}

// The relative error of `result` against the float64 reference of `checked`
// (a problem whose every operand travels as bytes, FP8 ones with scales).
inline double ErrorAgainst(const v1::GemmProblem& checked, const v1::GemmResult& result) {
  auto ref = ViewProblem(checked);
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return std::numeric_limits<double>::infinity();
  auto d = ViewResult(result);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return std::numeric_limits<double>::infinity();
  // Both row-major M x N, whatever the result's layout.
  return RelativeError(ReadMatrix(*d), ReferenceGemm(*ref));
}

}  // namespace test
}  // namespace gemm

#endif  // GEMM_TESTS_FP8_TEST_UTIL_H_
