#include "kernels/testing/fp8_host.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gemm_kernels::testing {
namespace {

TEST(Fp8Host, EveryFiniteCodeRoundTrips) {
  for (bool e4m3 : {true, false}) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
      const float v = Fp8ToFloat(static_cast<uint8_t>(c), e4m3);
      if (!std::isfinite(v)) continue;
      ++finite;
      // Negative zero encodes as itself; every other value as its own code.
      EXPECT_EQ(FloatToFp8(v, e4m3), c) << (e4m3 ? "e4m3 " : "e5m2 ") << c;
    }
    EXPECT_EQ(finite, e4m3 ? 254 : 248);
  }
}

TEST(Fp8Host, SpecialValuesAndRanges) {
  EXPECT_EQ(Fp8ToFloat(0x7E, true), 448.0f);
  EXPECT_TRUE(std::isnan(Fp8ToFloat(0x7F, true)));
  EXPECT_EQ(Fp8ToFloat(0x7B, false), 57344.0f);
  EXPECT_TRUE(std::isinf(Fp8ToFloat(0x7C, false)));
  EXPECT_EQ(Fp8ToFloat(0x01, true), std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8ToFloat(0x01, false), std::ldexp(1.0f, -16));
}

TEST(Fp8Host, RoundsToNearestEvenAndSaturates) {
  // e4m3 near 1: codes 0x38 (1.0) and 0x39 (1.125); the midpoint goes to the even code.
  EXPECT_EQ(FloatToFp8(1.0625f, true), 0x38);
  EXPECT_EQ(FloatToFp8(1.07f, true), 0x39);
  // 1.1875 lies between 1.125 (0x39) and 1.25 (0x3A): even is 0x3A.
  EXPECT_EQ(FloatToFp8(1.1875f, true), 0x3A);
  EXPECT_EQ(FloatToFp8(1e9f, true), 0x7E);
  EXPECT_EQ(FloatToFp8(-1e9f, true), 0xFE);
  EXPECT_EQ(FloatToFp8(1e9f, false), 0x7B);
  EXPECT_EQ(Fp8Scale(0.0f, true), 1.0f);
  EXPECT_EQ(Fp8Scale(896.0f, true), 2.0f);
}

}  // namespace
}  // namespace gemm_kernels::testing
