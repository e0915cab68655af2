// The FP8 quantization rule's arithmetic, written once for the host and the
// GPU: rounding a quotient to an FP8 code, where a scale sits for an element,
// and the scale an amax gives. common/fp8.h documents the rule and the scale
// layout; the CPU backend, the clients and the GPU's quantization kernel
// (kernels/quantize/) all compile these same functions, so a matrix
// quantized on either side gets the same codes and scales bit for bit.
//
// Header-only, no library calls: under nvcc the functions are __host__
// __device__; elsewhere plain inline C++.
#ifndef GEMM_COMMON_FP8_RULE_H_
#define GEMM_COMMON_FP8_RULE_H_

#include <cstdint>
#include <cstring>

#include "common/types.h"

#if defined(__CUDACC__)
#define GEMM_HOST_DEVICE __host__ __device__
#else
#define GEMM_HOST_DEVICE
#endif

namespace gemm {

// Which operand of D = op(A) op(B) a matrix is: it fixes which dimension a
// channel runs along and the block shape.
enum class OperandRole { kA, kB };

constexpr uint64_t kFp8BlockK = 128;

// Blocks of block scales along K: ceil(k / 128), the last one partial
// where k % 128 != 0.
GEMM_HOST_DEVICE constexpr uint64_t Fp8KBlocks(uint64_t k) {
  return (k + kFp8BlockK - 1) / kFp8BlockK;
}

// An FP8 operand as stored (rows x cols in `layout`; op(X) = X^T when
// `transposed`), with what its scales mean.
struct Fp8Operand {
  uint64_t rows = 0;
  uint64_t cols = 0;
  Layout layout = Layout::kRowMajor;
  OperandRole operand = OperandRole::kA;
  bool transposed = false;
  ScaleMode mode = ScaleMode::kTensor;

  // M (for A) or N (for B): the dimension of op(X) that is not K.
  GEMM_HOST_DEVICE uint64_t outer() const { return outer_is_row() ? rows : cols; }
  GEMM_HOST_DEVICE uint64_t k() const { return outer_is_row() ? cols : rows; }
  // Whether stored rows index the outer dimension (A as stored, B transposed).
  GEMM_HOST_DEVICE bool outer_is_row() const {
    return (operand == OperandRole::kA) != transposed;
  }
};

// The largest finite magnitude: 448 (e4m3), 57344 (e5m2). `format` must be
// an FP8 type (IsFp8).
GEMM_HOST_DEVICE inline float Fp8Max(DType format) {
  return format == DType::kFp8E4m3 ? 448.0f : 57344.0f;
}

// The FP8 code nearest to `x` (ties to even), saturating: magnitudes past
// FMT_MAX, infinities included, give +-FMT_MAX; NaN gives the format's NaN
// (0x7f, or 0x7e on e5m2, with x's sign). Takes a double so that a quotient
// computed in double rounds exactly once (see QuantizeFp8).
GEMM_HOST_DEVICE inline uint8_t FloatToFp8(double x, DType format) {
  const bool e4m3 = format == DType::kFp8E4m3;
  const int mantissa_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const uint8_t max_code = e4m3 ? 0x7e : 0x7b;  // the largest finite positive code
  const uint8_t nan_code = e4m3 ? 0x7f : 0x7e;  // the positive NaN this rule produces
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 56) & 0x80);
  const uint64_t abs = u & 0x7fffffffffffffffull;
  constexpr uint64_t kInfBits = 0x7ff0000000000000ull;
  if (abs > kInfBits) return sign | nan_code;
  if (abs == kInfBits) return sign | max_code;
  const int64_t biased = static_cast<int64_t>(abs >> 52);
  if (biased == 0) return sign;  // zero, or a double subnormal: far below FP8's range
  const int64_t e = biased - 1023;
  const int64_t emin = 1 - bias;
  if (e >= emin) {
    // Round the 52-bit mantissa to mantissa_bits, ties to even; a carry
    // moves into the exponent, which is the right next code.
    const int shift = 52 - mantissa_bits;
    const uint64_t rounded = abs + ((uint64_t{1} << (shift - 1)) - 1) + ((abs >> shift) & 1);
    const uint64_t code = (rounded >> shift) - (uint64_t(1023 - bias) << mantissa_bits);
    return sign | static_cast<uint8_t>(code < max_code ? code : max_code);
  }
  // Subnormal FP8: the value in units of 2^(emin - mantissa_bits).
  const uint64_t man = (abs & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int64_t shift = 52 + emin - mantissa_bits - e;  // > 52 - mantissa_bits
  if (shift >= 54) return sign;  // below half the smallest subnormal
  const uint64_t units = man >> shift;
  const uint64_t rem = man & ((uint64_t{1} << shift) - 1);
  const uint64_t halfway = uint64_t{1} << (shift - 1);
  const uint64_t up = rem > halfway || (rem == halfway && (units & 1)) ? 1 : 0;
  return sign | static_cast<uint8_t>(units + up);
}

// What a quantization reports when every value was finite (otherwise the
// storage index of the first that was not).
constexpr uint64_t kQuantizeOk = ~uint64_t{0};

// Scales `g` needs: 1, outer, or the block grid of common/fp8.h (0 for
// kNone).
GEMM_HOST_DEVICE inline uint64_t ScaleCount(const Fp8Operand& g) {
  const uint64_t outer = g.outer(), k_blocks = Fp8KBlocks(g.k());
  switch (g.mode) {
    case ScaleMode::kNone:
      return 0;
    case ScaleMode::kTensor:
      return 1;
    case ScaleMode::kChannel:
      return outer;
    case ScaleMode::kBlock:
      return g.operand == OperandRole::kA ? outer * k_blocks
                                          : k_blocks * ((outer + kFp8BlockK - 1) / kFp8BlockK);
  }
  return 0;
}

// Index into the scales of the element stored at (row, col).
GEMM_HOST_DEVICE inline uint64_t ScaleIndex(const Fp8Operand& g, uint64_t row, uint64_t col) {
  const bool outer_is_row = g.outer_is_row();
  const uint64_t o = outer_is_row ? row : col;
  const uint64_t kk = outer_is_row ? col : row;
  switch (g.mode) {
    case ScaleMode::kNone:
    case ScaleMode::kTensor:
      return 0;
    case ScaleMode::kChannel:
      return o;
    case ScaleMode::kBlock:
      if (g.operand == OperandRole::kA) return o * Fp8KBlocks(g.k()) + kk / kFp8BlockK;
      return (kk / kFp8BlockK) * ((g.outer() + kFp8BlockK - 1) / kFp8BlockK) + o / kFp8BlockK;
  }
  return 0;
}

// The rule for one group's amax: the fp32 scale amax / FMT_MAX, 1 where
// amax is 0, and at least the smallest positive fp32.
GEMM_HOST_DEVICE inline float ScaleForAmax(float amax, DType format) {
  if (amax == 0.0f) return 1.0f;
  const float scale = amax / Fp8Max(format);
  return scale > 0.0f ? scale : 0x1p-149f;  // the smallest positive (subnormal) fp32
}

// The code of one element: its value over its group's scale, the quotient
// of two floats taken in double (close enough to exact that rounding it to
// FP8 rounds the exact quotient; a float quotient would round twice).
GEMM_HOST_DEVICE inline uint8_t QuantizeElement(float value, float scale, DType format) {
  return FloatToFp8(static_cast<double>(value) / scale, format);
}

}  // namespace gemm

#endif  // GEMM_COMMON_FP8_RULE_H_
