#include "common/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

namespace gemm {
namespace {

// Field widths of one FP8 format.
struct Fp8Spec {
  int mantissa_bits;
  int bias;
  uint8_t max_code;  // the largest finite positive code
  uint8_t nan_code;  // the positive NaN this library produces
};

Fp8Spec SpecOf(DType format) {
  return format == DType::kFp8E4m3 ? Fp8Spec{3, 7, 0x7e, 0x7f} : Fp8Spec{2, 15, 0x7b, 0x7e};
}

float DecodeSlow(uint8_t code, DType format) {
  const Fp8Spec f = SpecOf(format);
  const int exp_bits = 7 - f.mantissa_bits;
  const int exp_all_ones = (1 << exp_bits) - 1;
  const bool negative = (code & 0x80) != 0;
  const int exp = (code >> f.mantissa_bits) & exp_all_ones;
  const int man = code & ((1 << f.mantissa_bits) - 1);
  float magnitude;
  if (format == DType::kFp8E4m3 && exp == exp_all_ones && man == (1 << f.mantissa_bits) - 1) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (format == DType::kFp8E5m2 && exp == exp_all_ones) {
    magnitude = man == 0 ? std::numeric_limits<float>::infinity()
                         : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {  // subnormal: man * 2^(1 - bias - mantissa_bits)
    magnitude = std::ldexp(static_cast<float>(man), 1 - f.bias - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>((1 << f.mantissa_bits) | man),
                           exp - f.bias - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

using DecodeTable = std::array<float, 256>;

const DecodeTable& TableOf(DType format) {
  static const DecodeTable* const tables = [] {
    auto* t = new DecodeTable[2];
    for (int c = 0; c < 256; ++c) {
      t[0][c] = DecodeSlow(static_cast<uint8_t>(c), DType::kFp8E4m3);
      t[1][c] = DecodeSlow(static_cast<uint8_t>(c), DType::kFp8E5m2);
    }
    return t;
  }();
  return tables[format == DType::kFp8E4m3 ? 0 : 1];
}

// Walks a rows x cols matrix in storage order, calling f(storage index, row, col).
template <typename F>
void ForEachElement(const Fp8Operand& g, F f) {
  uint64_t e = 0;
  if (g.layout == Layout::kRowMajor) {
    for (uint64_t r = 0; r < g.rows; ++r)
      for (uint64_t c = 0; c < g.cols; ++c) f(e++, r, c);
  } else {
    for (uint64_t c = 0; c < g.cols; ++c)
      for (uint64_t r = 0; r < g.rows; ++r) f(e++, r, c);
  }
}

}  // namespace

float Fp8Max(DType format) { return format == DType::kFp8E4m3 ? 448.0f : 57344.0f; }

float Fp8ToFloat(uint8_t code, DType format) { return TableOf(format)[code]; }

void Fp8ToFloatN(const uint8_t* src, DType format, float* dst, uint64_t n) {
  const DecodeTable& table = TableOf(format);
  for (uint64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

uint8_t FloatToFp8(double x, DType format) {
  const Fp8Spec f = SpecOf(format);
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint8_t sign = static_cast<uint8_t>((u >> 56) & 0x80);
  const uint64_t abs = u & 0x7fffffffffffffffull;
  constexpr uint64_t kInfBits = 0x7ff0000000000000ull;
  if (abs > kInfBits) return sign | f.nan_code;
  if (abs == kInfBits) return sign | f.max_code;
  const int64_t biased = static_cast<int64_t>(abs >> 52);
  if (biased == 0) return sign;  // zero, or a double subnormal: far below FP8's range
  const int64_t e = biased - 1023;
  const int64_t emin = 1 - f.bias;
  if (e >= emin) {
    // Round the 52-bit mantissa to mantissa_bits, ties to even; a carry
    // moves into the exponent, which is the right next code.
    const int shift = 52 - f.mantissa_bits;
    const uint64_t rounded =
        abs + ((uint64_t{1} << (shift - 1)) - 1) + ((abs >> shift) & 1);
    const uint64_t code = (rounded >> shift) - (uint64_t(1023 - f.bias) << f.mantissa_bits);
    return sign | static_cast<uint8_t>(std::min<uint64_t>(code, f.max_code));
  }
  // Subnormal FP8: the value in units of 2^(emin - mantissa_bits).
  const uint64_t man = (abs & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int64_t shift = 52 + emin - f.mantissa_bits - e;  // > 52 - mantissa_bits
  if (shift >= 54) return sign;  // below half the smallest subnormal
  const uint64_t units = man >> shift;
  const uint64_t rem = man & ((uint64_t{1} << shift) - 1);
  const uint64_t halfway = uint64_t{1} << (shift - 1);
  const uint64_t up = rem > halfway || (rem == halfway && (units & 1)) ? 1 : 0;
  return sign | static_cast<uint8_t>(units + up);
}

const char* OperandName(OperandRole operand) { return operand == OperandRole::kA ? "a" : "b"; }

uint64_t ScaleCount(const Fp8Operand& g) {
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

uint64_t ScaleIndex(const Fp8Operand& g, uint64_t row, uint64_t col) {
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

float ScaleAt(const void* scales, uint64_t i) {
  // Little-endian fp32 on the wire; the hosts this builds for are little-endian.
  float s;
  std::memcpy(&s, static_cast<const unsigned char*>(scales) + i * sizeof(float), sizeof s);
  return s;
}

float ScaleForAmax(float amax, DType format) {
  if (amax == 0.0f) return 1.0f;
  const float scale = amax / Fp8Max(format);
  return scale > 0.0f ? scale : std::numeric_limits<float>::denorm_min();
}

uint64_t QuantizeFp8(const float* values, const Fp8Operand& g, DType format, uint8_t* codes,
                     float* scales) {
  std::vector<float> amax(ScaleCount(g), 0.0f);
  uint64_t bad = kQuantizeOk;
  ForEachElement(g, [&](uint64_t e, uint64_t r, uint64_t c) {
    const float v = values[e];
    if (!std::isfinite(v)) {
      if (bad == kQuantizeOk) bad = e;
      return;
    }
    float& a = amax[ScaleIndex(g, r, c)];
    a = std::max(a, std::fabs(v));
  });
  if (bad != kQuantizeOk) return bad;
  for (size_t i = 0; i < amax.size(); ++i) scales[i] = ScaleForAmax(amax[i], format);
  // The quotient of two floats in double is close enough to exact that
  // rounding it to FP8 rounds the exact quotient (a float quotient would
  // round twice).
  ForEachElement(g, [&](uint64_t e, uint64_t r, uint64_t c) {
    codes[e] = FloatToFp8(static_cast<double>(values[e]) / scales[ScaleIndex(g, r, c)], format);
  });
  return kQuantizeOk;
}

void DequantizeFp8(const uint8_t* codes, DType format, const Fp8Operand& g, const void* scales,
                   float* out) {
  const DecodeTable& table = TableOf(format);
  if (g.mode == ScaleMode::kTensor || g.mode == ScaleMode::kNone) {
    const float s = g.mode == ScaleMode::kTensor ? ScaleAt(scales, 0) : 1.0f;
    for (uint64_t e = 0; e < g.rows * g.cols; ++e) out[e] = table[codes[e]] * s;
    return;
  }
  ForEachElement(g, [&](uint64_t e, uint64_t r, uint64_t c) {
    out[e] = table[codes[e]] * ScaleAt(scales, ScaleIndex(g, r, c));
  });
}

}  // namespace gemm
