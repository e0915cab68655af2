#include "kernels/sm90/tma_params.h"

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace {

const void* Aligned() { return reinterpret_cast<const void*>(uintptr_t{1} << 20); }

TEST(TmaParams, KMajorBf16Operand) {
  TmaOperandParams p;
  std::string why;
  // A: 1000 x 4097 row-major bf16 padded to ld 4104, batch of 3.
  ASSERT_TRUE(MakeTmaOperandParams(4097, 1000, 4104, 3, 4104 * 1000, 2, Aligned(), 64, 128, &p,
                                   &why))
      << why;
  EXPECT_EQ(p.dims[0], 4097u);
  EXPECT_EQ(p.dims[1], 1000u);
  EXPECT_EQ(p.dims[2], 3u);
  EXPECT_EQ(p.strides_bytes[0], 4104u * 2);
  EXPECT_EQ(p.strides_bytes[1], 4104u * 1000 * 2);
  EXPECT_EQ(p.box[0], 64u);
  EXPECT_EQ(p.box[1], 128u);
  EXPECT_EQ(p.box[2], 1u);
  EXPECT_FALSE(p.broadcast_batch);
}

TEST(TmaParams, BroadcastAndSingleBatchUseOneMember) {
  TmaOperandParams p;
  std::string why;
  ASSERT_TRUE(MakeTmaOperandParams(64, 64, 64, 8, 0, 2, Aligned(), 64, 64, &p, &why)) << why;
  EXPECT_TRUE(p.broadcast_batch);
  EXPECT_EQ(p.dims[2], 1u);
  EXPECT_EQ(p.strides_bytes[1] % 16, 0u);
  ASSERT_TRUE(MakeTmaOperandParams(64, 64, 64, 1, 12345, 2, Aligned(), 64, 64, &p, &why)) << why;
  EXPECT_TRUE(p.broadcast_batch);
}

TEST(TmaParams, Tf32BoxIs32Wide) {
  TmaOperandParams p;
  std::string why;
  ASSERT_TRUE(MakeTmaOperandParams(100, 100, 104, 1, 0, 4, Aligned(), 32, 256, &p, &why)) << why;
  EXPECT_EQ(p.strides_bytes[0], 416u);
  std::string why2;
  EXPECT_FALSE(MakeTmaOperandParams(100, 100, 104, 1, 0, 4, Aligned(), 64, 256, &p, &why2));
  EXPECT_NE(why2.find("swizzle"), std::string::npos);
}

TEST(TmaParams, RejectsWhatTmaCannotAddress) {
  TmaOperandParams p;
  std::string why;
  EXPECT_FALSE(MakeTmaOperandParams(7, 7, 7, 1, 0, 2, Aligned(), 64, 128, &p, &why));
  EXPECT_NE(why.find("16 bytes"), std::string::npos) << why;
  EXPECT_FALSE(MakeTmaOperandParams(8, 8, 8, 1, 0, 2, reinterpret_cast<const void*>(uintptr_t{8}),
                                    64, 128, &p, &why));
  EXPECT_NE(why.find("aligned"), std::string::npos) << why;
  EXPECT_FALSE(MakeTmaOperandParams(64, 8, 64, 2, 68, 2, Aligned(), 64, 128, &p, &why));
  EXPECT_NE(why.find("batch stride"), std::string::npos) << why;
  EXPECT_FALSE(MakeTmaOperandParams(64, 8, 32, 1, 0, 2, Aligned(), 64, 128, &p, &why));
  EXPECT_FALSE(MakeTmaOperandParams(64, 8, 64, 1, 0, 2, Aligned(), 64, 512, &p, &why));
}

}  // namespace
}  // namespace gemm_kernels
