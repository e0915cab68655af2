#include "common/dtype.h"

#include <cstring>

#include "common/dtype_x86.h"
#include "common/fp8.h"

namespace gemm {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float Bf16ToFloat(uint16_t b) { return BitsFloat(uint32_t{b} << 16); }

uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
  // Subnormal (or zero): man * 2^-24, exact in fp32.
  const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                 // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                      // normal half
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // RNE on the 13 dropped bits
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  // Subnormal half: the value in units of 2^-24, rounded to nearest even.
  if (abs < 0x33000000u) return sign;  // below half of the smallest subnormal
  const uint32_t exp = abs >> 23;
  const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24 for this range
  const uint32_t half_units = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t up = rem > halfway || (rem == halfway && (half_units & 1u));
  return sign | static_cast<uint16_t>(half_units + up);
}

namespace {

void ToFloatScalar(DType t, const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  if (IsFp8(t)) {
    Fp8ToFloatN(bytes, t, dst, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, bytes + 2 * i, 2);
    dst[i] = t == DType::kFp16 ? HalfToFloat(v) : Bf16ToFloat(v);
  }
}

void FromFloatScalar(DType t, const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  if (IsFp8(t)) {
    for (size_t i = 0; i < n; ++i) bytes[i] = FloatToFp8(src[i], t);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const uint16_t v = t == DType::kFp16 ? FloatToHalf(src[i]) : FloatToBf16(src[i]);
    std::memcpy(bytes + 2 * i, &v, 2);
  }
}

// Below this many elements the scalar loop is as fast as the vector one's
// dispatch (the CPU backend converts transposed operands one element at a
// time).
constexpr size_t kVectorMin = 16;

}  // namespace

bool VectorConversionsSupported() {
  static const bool supported = dtype_internal::X86ConversionsSupported();
  return supported;
}

void ToFloatVia(ConversionPath path, DType t, const void* src, float* dst, size_t n) {
  if (n == 0) return;  // src and dst may then be null, which memcpy must not see
  if (t == DType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  if (path == ConversionPath::kVector && VectorConversionsSupported() && !IsFp8(t)) {
    if (t == DType::kFp16) {
      dtype_internal::HalfToFloatX86(src, dst, n);
    } else {
      dtype_internal::Bf16ToFloatX86(src, dst, n);
    }
    return;
  }
  ToFloatScalar(t, src, dst, n);
}

void FromFloatVia(ConversionPath path, DType t, const float* src, void* dst, size_t n) {
  if (n == 0) return;  // src and dst may then be null, which memcpy must not see
  if (t == DType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  if (path == ConversionPath::kVector && VectorConversionsSupported() && !IsFp8(t)) {
    if (t == DType::kFp16) {
      dtype_internal::FloatToHalfX86(src, dst, n);
    } else {
      dtype_internal::FloatToBf16X86(src, dst, n);
    }
    return;
  }
  FromFloatScalar(t, src, dst, n);
}

void ToFloat(DType t, const void* src, float* dst, size_t n) {
  ToFloatVia(n >= kVectorMin ? ConversionPath::kVector : ConversionPath::kScalar, t, src, dst, n);
}

void FromFloat(DType t, const float* src, void* dst, size_t n) {
  FromFloatVia(n >= kVectorMin ? ConversionPath::kVector : ConversionPath::kScalar, t, src, dst,
               n);
}

}  // namespace gemm
