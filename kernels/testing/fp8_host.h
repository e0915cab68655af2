// Host-side FP8 (OCP e4m3fn and e5m2) decoding, encoding and group
// quantization for the kernel tests and benchmarks (no CUDA headers).
// Encoding rounds to nearest even and saturates finite values to the
// format's largest (448 / 57344); quantization follows the FP8 contract:
// scale = amax / max (1 where amax is 0), q = encode(x / scale).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace gemm_kernels::testing {

inline float Fp8ToFloat(uint8_t code, bool e4m3) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int mbits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const int e = (code & 0x7F) >> mbits;
  const int m = code & ((1 << mbits) - 1);
  if (e4m3 && e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (!e4m3 && e == 31) {
    return m == 0 ? sign * std::numeric_limits<float>::infinity()
                  : std::numeric_limits<float>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - bias - mbits);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / (1 << mbits), e - bias);
}

inline float Fp8Max(bool e4m3) { return e4m3 ? 448.0f : 57344.0f; }

// The non-negative finite values of a format, by code (0 .. largest finite).
struct Fp8Table {
  std::array<float, 128> value{};
  int count = 0;  // finite non-negative codes: 0x00 .. count - 1
  explicit Fp8Table(bool e4m3) {
    for (int c = 0; c < 128; ++c) {
      const float v = Fp8ToFloat(static_cast<uint8_t>(c), e4m3);
      if (!std::isfinite(v)) break;
      value[c] = v;
      count = c + 1;
    }
  }
};

// Round to nearest even (the even code on a tie), saturating. NaN input
// gives NaN's code; callers quantize finite data only.
inline uint8_t FloatToFp8(float x, bool e4m3) {
  static const Fp8Table kE4m3(true), kE5m2(false);
  const Fp8Table& t = e4m3 ? kE4m3 : kE5m2;
  if (std::isnan(x)) return e4m3 ? 0x7F : 0x7E;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= t.value[t.count - 1]) return sign | static_cast<uint8_t>(t.count - 1);
  // The first code whose value is >= a.
  const float* hi = std::lower_bound(t.value.data(), t.value.data() + t.count, a);
  const int up = static_cast<int>(hi - t.value.data());
  if (up == 0 || *hi == a) return sign | static_cast<uint8_t>(up);
  const int down = up - 1;
  const float dd = a - t.value[down], du = t.value[up] - a;
  const int pick = dd < du ? down : du < dd ? up : (down % 2 == 0 ? down : up);
  return sign | static_cast<uint8_t>(pick);
}

// The contract's scale of a group with largest magnitude `amax`.
inline float Fp8Scale(float amax, bool e4m3) { return amax > 0.0f ? amax / Fp8Max(e4m3) : 1.0f; }

}  // namespace gemm_kernels::testing
