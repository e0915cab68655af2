// The vector conversions (AVX2/F16C) against the scalar ones, bit for bit:
// every fp16 and bf16 code to fp32, and fp32 to fp16/bf16 over every
// exponent, the rounding ties, subnormals, NaN payloads, infinities and
// overflow, with unaligned buffers and every tail length.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"

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

class VectorConversionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!VectorConversionsSupported()) GTEST_SKIP() << "this CPU lacks AVX2 or F16C";
  }
};

// 16-bit codes -> fp32 through both paths, compared as bits. `offset` bytes
// of slack shift src off its natural alignment; dst starts `dst_offset`
// floats in (float stores must stay 4-byte aligned).
void ExpectWidenSame(DType t, const std::vector<uint16_t>& codes, size_t offset,
                     size_t dst_offset) {
  const size_t n = codes.size();
  std::vector<unsigned char> src(2 * n + offset + 1);
  if (n > 0) std::memcpy(src.data() + offset, codes.data(), 2 * n);
  std::vector<float> vec(n + dst_offset + 1, BitsFloat(0xdeadbeef));
  std::vector<float> ref(n + dst_offset + 1, BitsFloat(0xdeadbeef));
  ToFloatVia(ConversionPath::kVector, t, src.data() + offset, vec.data() + dst_offset, n);
  ToFloatVia(ConversionPath::kScalar, t, src.data() + offset, ref.data() + dst_offset, n);
  for (size_t i = 0; i < vec.size(); ++i) {
    ASSERT_EQ(FloatBits(vec[i]), FloatBits(ref[i]))
        << DTypeName(t) << " element " << i << " of " << n << " (code 0x" << std::hex
        << (i >= dst_offset && i - dst_offset < n ? codes[i - dst_offset] : 0) << ")";
  }
}

// fp32 values -> 16-bit codes through both paths, compared as bits; `offset`
// bytes shift dst, `src_offset` floats shift src.
void ExpectNarrowSame(DType t, const std::vector<float>& values, size_t offset,
                      size_t src_offset) {
  const size_t n = values.size();
  std::vector<float> src(n + src_offset);
  std::copy(values.begin(), values.end(), src.begin() + src_offset);
  std::vector<unsigned char> vec(2 * n + offset + 2, 0xa5), ref(2 * n + offset + 2, 0xa5);
  FromFloatVia(ConversionPath::kVector, t, src.data() + src_offset, vec.data() + offset, n);
  FromFloatVia(ConversionPath::kScalar, t, src.data() + src_offset, ref.data() + offset, n);
  for (size_t i = 0; i < vec.size(); ++i) {
    ASSERT_EQ(vec[i], ref[i]) << DTypeName(t) << " byte " << i << " of " << 2 * n
                              << " (input 0x" << std::hex
                              << (i >= offset && (i - offset) / 2 < n
                                      ? FloatBits(values[(i - offset) / 2])
                                      : 0)
                              << ")";
  }
}

TEST_P(VectorConversionTest, EveryCodeWidensAsScalar) {
  std::vector<uint16_t> codes(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) codes[h] = static_cast<uint16_t>(h);
  ExpectWidenSame(GetParam(), codes, 0, 0);
  ExpectWidenSame(GetParam(), codes, 1, 1);  // odd source address, dst off 32-byte alignment
}

// fp32 inputs that exercise every rounding decision: for each sign and
// exponent, mantissas at and around each possible rounding point (the ties of
// every subnormal fp16 shift and of the normal fp16 and bf16 cuts), the
// extremes, and random ones; all NaN payload shapes and infinities included
// (exponent 255), and values that overflow fp16.
std::vector<float> SpecialValues() {
  std::vector<uint32_t> mantissas = {0, 1, 0x7fffff, 0x400000, 0x3fffff, 0x400001};
  for (int j = 0; j < 23; ++j) {
    const uint32_t b = 1u << j;
    for (uint32_t m : {b, b - 1, b + 1, b | (b << 1), (b << 1) - 1, b | 0x400000u}) {
      mantissas.push_back(m & 0x7fffff);
    }
  }
  std::mt19937 rng(12345);
  std::vector<float> out;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t exp = 0; exp < 256; ++exp) {
      for (uint32_t m : mantissas) out.push_back(BitsFloat(sign | exp << 23 | m));
      for (int r = 0; r < 64; ++r) out.push_back(BitsFloat(sign | exp << 23 | (rng() & 0x7fffff)));
    }
  }
  // Every pattern of the top 16 bits (every bf16 code, so every bf16 cut)
  // with the low 16 bits below, at and above the tie.
  for (uint32_t top = 0; top < 0x10000; ++top) {
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      out.push_back(BitsFloat(top << 16 | low));
    }
  }
  // Every pattern of the top 19 bits (sign, exponent and the 10 fp16
  // mantissa bits) with the 13 dropped bits below, at and above the tie.
  for (uint32_t top = 0; top < (1u << 19); ++top) {
    for (uint32_t low : {0x0fffu, 0x1000u, 0x1001u}) out.push_back(BitsFloat(top << 13 | low));
  }
  // Around the fp16 overflow threshold (65520 rounds to infinity).
  for (uint32_t u = 0x477fe000u; u < 0x47801000u; ++u) out.push_back(BitsFloat(u));
  return out;
}

TEST_P(VectorConversionTest, SpecialValuesNarrowAsScalar) {
  const std::vector<float> values = SpecialValues();
  ExpectNarrowSame(GetParam(), values, 0, 0);
  ExpectNarrowSame(GetParam(), values, 1, 1);
}

TEST_P(VectorConversionTest, RandomBitsNarrowAsScalar) {
  std::mt19937 rng(2024);
  std::vector<float> values(1 << 21);
  for (float& v : values) v = BitsFloat(rng());
  ExpectNarrowSame(GetParam(), values, 0, 0);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  for (float& v : values) v = dist(rng);
  ExpectNarrowSame(GetParam(), values, 3, 1);
}

// Lengths 0..65 cover an empty call, calls shorter than a vector and every
// tail after one to four vectors, at each source and destination offset.
TEST_P(VectorConversionTest, TailsAndOffsets) {
  std::mt19937 rng(7);
  for (size_t n = 0; n <= 65; ++n) {
    std::vector<uint16_t> codes(n);
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      codes[i] = static_cast<uint16_t>(rng());
      values[i] = BitsFloat(rng());
    }
    for (size_t offset = 0; offset < 4; ++offset) {
      for (size_t float_offset = 0; float_offset < 3; ++float_offset) {
        ExpectWidenSame(GetParam(), codes, offset, float_offset);
        ExpectNarrowSame(GetParam(), values, offset, float_offset);
      }
    }
  }
}

// ToFloat and FromFloat (the dispatching entry points) agree with the scalar
// path too, below and above the length at which they switch to vectors.
TEST_P(VectorConversionTest, DispatchMatchesScalar) {
  std::mt19937 rng(99);
  for (size_t n : {1, 7, 15, 16, 17, 100, 1000}) {
    std::vector<uint16_t> codes(n);
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) {
      codes[i] = static_cast<uint16_t>(rng());
      values[i] = BitsFloat(rng());
    }
    std::vector<float> wide(n), wide_ref(n);
    ToFloat(GetParam(), codes.data(), wide.data(), n);
    ToFloatVia(ConversionPath::kScalar, GetParam(), codes.data(), wide_ref.data(), n);
    EXPECT_EQ(std::memcmp(wide.data(), wide_ref.data(), 4 * n), 0) << n;
    std::vector<uint16_t> narrow(n), narrow_ref(n);
    FromFloat(GetParam(), values.data(), narrow.data(), n);
    FromFloatVia(ConversionPath::kScalar, GetParam(), values.data(), narrow_ref.data(), n);
    EXPECT_EQ(narrow, narrow_ref) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, VectorConversionTest,
                         ::testing::Values(DType::kFp16, DType::kBf16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace gemm
