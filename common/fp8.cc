#include "common/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
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

float Fp8ToFloat(uint8_t code, DType format) { return TableOf(format)[code]; }

void Fp8ToFloatN(const uint8_t* src, DType format, float* dst, uint64_t n) {
  const DecodeTable& table = TableOf(format);
  for (uint64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
}

const char* OperandName(OperandRole operand) { return operand == OperandRole::kA ? "a" : "b"; }

float ScaleAt(const void* scales, uint64_t i) {
  // Little-endian fp32 on the wire; the hosts this builds for are little-endian.
  float s;
  std::memcpy(&s, static_cast<const unsigned char*>(scales) + i * sizeof(float), sizeof s);
  return s;
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
  ForEachElement(g, [&](uint64_t e, uint64_t r, uint64_t c) {
    codes[e] = QuantizeElement(values[e], scales[ScaleIndex(g, r, c)], format);
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
