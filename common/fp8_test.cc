#include "common/fp8.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace gemm {
namespace {

constexpr DType kFormats[] = {DType::kFp8E4m3, DType::kFp8E5m2};

// The code's value from the format's definition, independently of the library.
double DefinitionValue(uint8_t code, DType format) {
  const int m = format == DType::kFp8E4m3 ? 3 : 2;
  const int bias = format == DType::kFp8E4m3 ? 7 : 15;
  const int exp = (code & 0x7f) >> m;
  const int man = code & ((1 << m) - 1);
  const double sign = code & 0x80 ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(man, 1 - bias - m);
  return sign * std::ldexp((1 << m) + man, exp - bias - m);
}

bool IsNanCode(uint8_t code, DType format) {
  if (format == DType::kFp8E4m3) return (code & 0x7f) == 0x7f;
  return (code & 0x7f) > 0x7c;
}

bool IsInfCode(uint8_t code, DType format) {
  return format == DType::kFp8E5m2 && (code & 0x7f) == 0x7c;
}

TEST(Fp8Test, EveryCodeDecodesToItsDefinitionAndEncodesBack) {
  for (DType format : kFormats) {
    int nans = 0, infs = 0;
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = Fp8ToFloat(code, format);
      if (IsNanCode(code, format)) {
        ++nans;
        EXPECT_TRUE(std::isnan(v)) << DTypeName(format) << " code " << c;
        EXPECT_TRUE(std::isnan(Fp8ToFloat(FloatToFp8(v, format), format)));
        continue;
      }
      if (IsInfCode(code, format)) {
        ++infs;
        EXPECT_TRUE(std::isinf(v)) << c;
        EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);
        // Saturating: infinity encodes to the largest finite code.
        EXPECT_EQ(FloatToFp8(v, format), (c & 0x80) | 0x7b);
        continue;
      }
      EXPECT_EQ(static_cast<double>(v), DefinitionValue(code, format))
          << DTypeName(format) << " code " << c;
      EXPECT_EQ(FloatToFp8(v, format), code) << DTypeName(format) << " code " << c;
    }
    EXPECT_EQ(nans, format == DType::kFp8E4m3 ? 2 : 6);
    EXPECT_EQ(infs, format == DType::kFp8E4m3 ? 0 : 2);
  }
}

TEST(Fp8Test, KnownValues) {
  EXPECT_EQ(Fp8ToFloat(0x7e, DType::kFp8E4m3), 448.0f);
  EXPECT_EQ(Fp8ToFloat(0x38, DType::kFp8E4m3), 1.0f);
  EXPECT_EQ(Fp8ToFloat(0x08, DType::kFp8E4m3), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8ToFloat(0x01, DType::kFp8E4m3), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8ToFloat(0x7b, DType::kFp8E5m2), 57344.0f);
  EXPECT_EQ(Fp8ToFloat(0x3c, DType::kFp8E5m2), 1.0f);
  EXPECT_EQ(Fp8ToFloat(0x01, DType::kFp8E5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(Fp8ToFloat(0x80, DType::kFp8E4m3), 0.0f);
  EXPECT_TRUE(std::signbit(Fp8ToFloat(0x80, DType::kFp8E4m3)));
  EXPECT_EQ(FloatToFp8(-0.0, DType::kFp8E5m2), 0x80);
  EXPECT_EQ(FloatToFp8(std::nan(""), DType::kFp8E4m3), 0x7f);
  EXPECT_EQ(FloatToFp8(-std::nan(""), DType::kFp8E4m3), 0xff);
  EXPECT_EQ(Fp8Max(DType::kFp8E4m3), 448.0f);
  EXPECT_EQ(Fp8Max(DType::kFp8E5m2), 57344.0f);
}

TEST(Fp8Test, RoundsToNearestEvenBetweenEveryPairOfNeighbours) {
  for (DType format : kFormats) {
    const uint8_t max_code = format == DType::kFp8E4m3 ? 0x7e : 0x7b;
    for (int sign : {0, 0x80}) {
      for (int c = 0; c < max_code; ++c) {
        const uint8_t lo = static_cast<uint8_t>(sign | c), hi = static_cast<uint8_t>(sign | (c + 1));
        const double vlo = Fp8ToFloat(lo, format), vhi = Fp8ToFloat(hi, format);
        const double mid = (vlo + vhi) / 2;  // exact in double
        const uint8_t even = (c & 1) == 0 ? lo : hi;
        EXPECT_EQ(FloatToFp8(mid, format), even) << DTypeName(format) << " between " << c;
        EXPECT_EQ(FloatToFp8(std::nextafter(mid, vlo), format), lo);
        EXPECT_EQ(FloatToFp8(std::nextafter(mid, vhi), format), hi);
      }
    }
  }
}

TEST(Fp8Test, SaturatesAndFlushesAtTheEndsOfTheRange) {
  EXPECT_EQ(FloatToFp8(449.0, DType::kFp8E4m3), 0x7e);
  EXPECT_EQ(FloatToFp8(464.0, DType::kFp8E4m3), 0x7e);  // would round to 480
  EXPECT_EQ(FloatToFp8(1e30, DType::kFp8E4m3), 0x7e);
  EXPECT_EQ(FloatToFp8(-1e30, DType::kFp8E4m3), 0xfe);
  EXPECT_EQ(FloatToFp8(std::numeric_limits<double>::infinity(), DType::kFp8E4m3), 0x7e);
  EXPECT_EQ(FloatToFp8(61440.0, DType::kFp8E5m2), 0x7b);  // would round to 65536
  EXPECT_EQ(FloatToFp8(-1e300, DType::kFp8E5m2), 0xfb);
  // Half the smallest subnormal ties to even (zero); just above it rounds up.
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0, -10), DType::kFp8E4m3), 0x00);
  EXPECT_EQ(FloatToFp8(std::nextafter(std::ldexp(1.0, -10), 1.0), DType::kFp8E4m3), 0x01);
  EXPECT_EQ(FloatToFp8(std::ldexp(1.0, -17), DType::kFp8E5m2), 0x00);
  EXPECT_EQ(FloatToFp8(std::ldexp(3.0, -17), DType::kFp8E5m2), 0x02);  // tie, up to even
  EXPECT_EQ(FloatToFp8(1e-300, DType::kFp8E4m3), 0x00);
  EXPECT_EQ(FloatToFp8(std::numeric_limits<double>::denorm_min(), DType::kFp8E5m2), 0x00);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(FloatToFp8(std::ldexp(15.0, -10), DType::kFp8E4m3), 0x08);
}

TEST(Fp8Test, ScaleCountsAndIndicesFollowTheContract) {
  // A: M = 3, K = 256, stored as is (3 x 256) and transposed (256 x 3).
  Fp8Operand a{3, 256, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(a), 3u * 2);
  EXPECT_EQ(ScaleIndex(a, 2, 130), 2u * 2 + 1);
  Fp8Operand at{256, 3, Layout::kColMajor, OperandRole::kA, true, ScaleMode::kBlock};
  EXPECT_EQ(ScaleIndex(at, 130, 2), 2u * 2 + 1);
  // B: K = 256, N = 300: blocks of 128 x 128, 2 x 3 of them.
  Fp8Operand b{256, 300, Layout::kRowMajor, OperandRole::kB, false, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(b), 2u * 3);
  EXPECT_EQ(ScaleIndex(b, 129, 299), 1u * 3 + 2);
  Fp8Operand bt{300, 256, Layout::kRowMajor, OperandRole::kB, true, ScaleMode::kBlock};
  EXPECT_EQ(ScaleIndex(bt, 299, 129), 1u * 3 + 2);
  b.mode = ScaleMode::kChannel;
  EXPECT_EQ(ScaleCount(b), 300u);
  EXPECT_EQ(ScaleIndex(b, 7, 42), 42u);
  a.mode = ScaleMode::kChannel;
  EXPECT_EQ(ScaleCount(a), 3u);
  EXPECT_EQ(ScaleIndex(a, 2, 200), 2u);
  a.mode = ScaleMode::kTensor;
  EXPECT_EQ(ScaleCount(a), 1u);
}

TEST(Fp8Test, BlockScalesTakeAnyKWithAPartialLastBlock) {
  EXPECT_EQ(Fp8KBlocks(1), 1u);
  EXPECT_EQ(Fp8KBlocks(128), 1u);
  EXPECT_EQ(Fp8KBlocks(129), 2u);
  EXPECT_EQ(Fp8KBlocks(1000), 8u);
  EXPECT_EQ(Fp8KBlocks(4000), 32u);
  // A: M = 3, K = 1000: 3 x 8 scales, (i, k) at i * 8 + k / 128.
  const Fp8Operand a{3, 1000, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(a), 3u * 8);
  EXPECT_EQ(ScaleIndex(a, 0, 999), 7u);
  EXPECT_EQ(ScaleIndex(a, 2, 896), 2u * 8 + 7);
  EXPECT_EQ(ScaleIndex(a, 2, 895), 2u * 8 + 6);
  const Fp8Operand at{1000, 3, Layout::kColMajor, OperandRole::kA, true, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(at), 3u * 8);
  EXPECT_EQ(ScaleIndex(at, 999, 1), 1u * 8 + 7);
  // B: K = 129, N = 300: 2 x 3 blocks, the second row of them one element deep.
  const Fp8Operand b{129, 300, Layout::kRowMajor, OperandRole::kB, false, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(b), 2u * 3);
  EXPECT_EQ(ScaleIndex(b, 128, 299), 1u * 3 + 2);
  EXPECT_EQ(ScaleIndex(b, 127, 0), 0u);
  const Fp8Operand bt{300, 129, Layout::kRowMajor, OperandRole::kB, true, ScaleMode::kBlock};
  EXPECT_EQ(ScaleIndex(bt, 299, 128), 1u * 3 + 2);
  // K = 1: one block along K.
  const Fp8Operand a1{5, 1, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kBlock};
  EXPECT_EQ(ScaleCount(a1), 5u);
  EXPECT_EQ(ScaleIndex(a1, 4, 0), 4u);
}

TEST(Fp8Test, APartialBlockIsScaledByItsOwnElements) {
  // A: 2 x 130: blocks k < 128 and k = 128..129 per row. The partial blocks
  // hold small values beside large whole blocks: their scales come from
  // their two elements alone.
  const Fp8Operand g{2, 130, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kBlock};
  std::vector<float> x(2 * 130, 1000.0f);
  x[128] = 0.5f;
  x[129] = -0.25f;
  x[130 + 128] = 0.0f;
  x[130 + 129] = 0.0f;
  std::vector<uint8_t> q(x.size());
  std::vector<float> s(ScaleCount(g));
  ASSERT_EQ(s.size(), 4u);
  ASSERT_EQ(QuantizeFp8(x.data(), g, DType::kFp8E4m3, q.data(), s.data()), kQuantizeOk);
  EXPECT_EQ(s[0], 1000.0f / 448.0f);
  EXPECT_EQ(s[1], 0.5f / 448.0f);
  EXPECT_EQ(s[2], 1000.0f / 448.0f);
  EXPECT_EQ(s[3], 1.0f);  // an all-zero partial block
  std::vector<float> back(x.size());
  DequantizeFp8(q.data(), DType::kFp8E4m3, g, s.data(), back.data());
  EXPECT_EQ(back[128], 0.5f);
  EXPECT_EQ(back[129], -0.25f);
  EXPECT_EQ(back[130 + 129], 0.0f);
}

TEST(Fp8Test, ScaleRuleForAmax) {
  EXPECT_EQ(ScaleForAmax(448.0f, DType::kFp8E4m3), 1.0f);
  EXPECT_EQ(ScaleForAmax(57344.0f * 2, DType::kFp8E5m2), 2.0f);
  EXPECT_EQ(ScaleForAmax(0.0f, DType::kFp8E4m3), 1.0f);
  // A group so small that amax / 448 underflows keeps a positive scale.
  EXPECT_EQ(ScaleForAmax(std::numeric_limits<float>::denorm_min(), DType::kFp8E4m3),
            std::numeric_limits<float>::denorm_min());
}

// Quantizes random values in every mode and orientation and checks each
// group's scale, that the group's amax lands on +-FMT_MAX, and that each
// element comes back within half an FP8 step.
TEST(Fp8Test, QuantizeRoundTripsWithinHalfAStepInEveryMode) {
  std::mt19937 rng(7);
  for (DType format : kFormats) {
    const double eps = format == DType::kFp8E4m3 ? 1.0 / 16 : 1.0 / 8;  // half ulp, relative
    const int emin = format == DType::kFp8E4m3 ? -6 : -14;
    const int m = format == DType::kFp8E4m3 ? 3 : 2;
    for (OperandRole op : {OperandRole::kA, OperandRole::kB}) {
      for (bool transposed : {false, true}) {
        for (Layout layout : {Layout::kRowMajor, Layout::kColMajor}) {
          for (ScaleMode mode : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
            for (uint64_t k : {256, 1000, 129, 1}) {
              // K = 256 (two blocks) or ragged (a partial last block along K),
              // the outer dimension 130 (a partial block along N for B).
              Fp8Operand g{0, 0, layout, op, transposed, mode};
              g.rows = g.outer_is_row() ? 130 : k;
              g.cols = g.outer_is_row() ? k : 130;
              std::vector<float> x(g.rows * g.cols);
              // Magnitudes over many octaves, so that groups differ.
              std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
              std::uniform_int_distribution<int> octave(-12, 12);
              for (float& v : x) v = std::ldexp(unit(rng), octave(rng));
              std::vector<uint8_t> q(x.size());
              std::vector<float> s(ScaleCount(g)), back(x.size()), amax(s.size(), 0.0f);
              ASSERT_EQ(QuantizeFp8(x.data(), g, format, q.data(), s.data()), kQuantizeOk);
              DequantizeFp8(q.data(), format, g, s.data(), back.data());
              for (uint64_t r = 0; r < g.rows; ++r) {
                for (uint64_t c = 0; c < g.cols; ++c) {
                  const uint64_t e =
                      layout == Layout::kRowMajor ? r * g.cols + c : c * g.rows + r;
                  const uint64_t i = ScaleIndex(g, r, c);
                  amax[i] = std::max(amax[i], std::fabs(x[e]));
                  const double err = std::fabs(static_cast<double>(back[e]) - x[e]);
                  const double step = std::max(std::fabs(x[e]) * eps,
                                               std::ldexp(double{s[i]}, emin - m - 1));
                  EXPECT_LE(err, step * (1 + 1e-6))
                      << ScaleModeName(mode) << " K " << k << " " << x[e];
                }
              }
              for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], amax[i] / Fp8Max(format));
            }
          }
        }
      }
    }
  }
}

TEST(Fp8Test, QuantizeSaturatesTheGroupMaximumAndKeepsZeroGroups) {
  // amax / scale may round just past FMT_MAX; it saturates, never overflows.
  const Fp8Operand g{1, 3, Layout::kRowMajor, OperandRole::kA, false, ScaleMode::kTensor};
  const float x[3] = {-3.0f, 1.0f, 0.1f};
  uint8_t q[3];
  float s;
  ASSERT_EQ(QuantizeFp8(x, g, DType::kFp8E4m3, q, &s), kQuantizeOk);
  EXPECT_EQ(s, 3.0f / 448.0f);
  EXPECT_EQ(q[0], 0xfe);  // -448
  const float zeros[3] = {0.0f, -0.0f, 0.0f};
  ASSERT_EQ(QuantizeFp8(zeros, g, DType::kFp8E5m2, q, &s), kQuantizeOk);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q[1], 0x80);
}

TEST(Fp8Test, QuantizeRefusesNonFiniteInput) {
  const Fp8Operand g{1, 4, Layout::kRowMajor, OperandRole::kB, false, ScaleMode::kChannel};
  uint8_t q[4];
  float s[4];
  const float with_nan[4] = {1.0f, 2.0f, std::nanf(""), 3.0f};
  EXPECT_EQ(QuantizeFp8(with_nan, g, DType::kFp8E4m3, q, s), 2u);
  const float with_inf[4] = {std::numeric_limits<float>::infinity(), 2.0f, 1.0f, 3.0f};
  EXPECT_EQ(QuantizeFp8(with_inf, g, DType::kFp8E5m2, q, s), 0u);
}

}  // namespace
}  // namespace gemm
