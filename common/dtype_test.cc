#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

namespace gemm {
namespace {

TEST(DTypeTest, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(DTypeTest, HalfKnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie to even, up
  // 1 + 2^-11 is halfway between 1 and the next half: ties to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: up to even
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::infinity()))));
}

TEST(DTypeTest, BulkConversionsMatchScalar) {
  const float in[5] = {0.0f, -1.5f, 3.14159f, 1e-6f, 1234.5f};
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    unsigned char buf[5 * 4];
    float back[5];
    FromFloat(t, in, buf, 5);
    ToFloat(t, buf, back, 5);
    for (int i = 0; i < 5; ++i) {
      float expect = in[i];
      if (t == DType::kFp16) expect = HalfToFloat(FloatToHalf(in[i]));
      if (t == DType::kBf16) expect = Bf16ToFloat(FloatToBf16(in[i]));
      EXPECT_EQ(back[i], expect) << DTypeName(t) << " " << i;
    }
  }
}

}  // namespace
}  // namespace gemm
