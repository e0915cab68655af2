// Host-side bf16 / fp16 encoding for tests and benchmarks (no CUDA headers):
// round-to-nearest-even conversions and exact decoding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace gemm_kernels::testing {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if (std::isnan(f)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(uint32_t(h) << 16); }

// Finite inputs within the fp16 range only (tests draw from [-2, 2]).
inline uint16_t FloatToHalf(float f) {
  const uint16_t sign = (FloatBits(f) >> 16) & 0x8000;
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f) {  // subnormal: units of 2^-24
    return static_cast<uint16_t>(sign | uint16_t(std::nearbyint(a * 16777216.0f)));
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const float scale = std::ldexp(1.0f, e - 11);  // 11 significant bits
  const float r = std::nearbyint(a / scale) * scale;
  int er;
  const float mr = std::frexp(r, &er);  // r = mr * 2^er
  const int biased = er - 1 + 15;
  const uint16_t frac = static_cast<uint16_t>(std::ldexp(mr * 2.0f - 1.0f, 10));
  return static_cast<uint16_t>(sign | (biased << 10) | frac);
}
inline float HalfToFloat(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(frac), -24);
  } else if (exp == 31) {
    v = frac ? NAN : INFINITY;
  } else {
    v = std::ldexp(1.0f + frac / 1024.0f, exp - 15);
  }
  return sign ? -v : v;
}

}  // namespace gemm_kernels::testing
