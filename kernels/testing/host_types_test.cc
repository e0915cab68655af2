#include "kernels/testing/host_types.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gemm_kernels::testing {
namespace {

TEST(HostTypes, HalfRoundTripsEveryFiniteEncoding) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if (((bits >> 10) & 0x1F) == 31) continue;  // inf / NaN
    const float f = HalfToFloat(bits);
    const uint16_t back = FloatToHalf(f);
    if (f == 0.0f) {
      EXPECT_EQ(HalfToFloat(back), 0.0f);
    } else {
      EXPECT_EQ(back, bits) << "h=" << h << " f=" << f;
    }
  }
}

TEST(HostTypes, HalfRoundsToNearestEven) {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(HalfToFloat(FloatToHalf(-0.333333f)), -0.33325195f);
}

TEST(HostTypes, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
}

}  // namespace
}  // namespace gemm_kernels::testing
