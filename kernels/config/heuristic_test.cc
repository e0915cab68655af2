#include "kernels/config/heuristic.h"

#include "gtest/gtest.h"

namespace gemm_kernels {
namespace {

constexpr int kH200Sms = 132;

TEST(Heuristic, LargeSquareProblemsUseTheWideTile) {
  for (int s : {2048, 4096, 8192}) {
    EXPECT_EQ(ChooseSm90Tile(s, s, s, 1, kH200Sms), Sm90Tile::k128x256) << s;
  }
}

TEST(Heuristic, NarrowNUsesTheSquareTile) {
  // N = 128 fills only half of a 256-wide tile.
  EXPECT_EQ(ChooseSm90Tile(128, 128, 128, 1024, kH200Sms), Sm90Tile::k128x128);
  EXPECT_EQ(ChooseSm90Tile(4096, 128, 4096, 1, kH200Sms), Sm90Tile::k128x128);
}

TEST(Heuristic, WaveQuantizationPrefersFewerWaves) {
  // 3072^2: 24 x 12 = 288 wide tiles (3 waves of 128x256 on 132 SMs) vs 576
  // square ones (5 waves of 128x128): 3 * 2 > 5 * 1.12, the square tile wins.
  EXPECT_EQ(ChooseSm90Tile(3072, 3072, 4096, 1, kH200Sms), Sm90Tile::k128x128);
  // 2560^2: 200 wide tiles (2 waves) vs 400 square (4 waves): 2 * 2 < 4 * 1.12.
  EXPECT_EQ(ChooseSm90Tile(2560, 2560, 4096, 1, kH200Sms), Sm90Tile::k128x256);
  // 1536 x 1280: 12 x 5 = 60 wide tiles (1 wave) vs 120 square ones (1 wave,
  // half the work per tile): the square tile wins.
  EXPECT_EQ(ChooseSm90Tile(1536, 1280, 4096, 1, kH200Sms), Sm90Tile::k128x128);
}

TEST(Heuristic, ChoiceIsDefinedForDegenerateInputs) {
  // One tile either way: the smaller tile does less work.
  EXPECT_EQ(ChooseSm90Tile(1, 1, 1, 1, 0), Sm90Tile::k128x128);
  EXPECT_EQ(ShapeOf(Sm90Tile::k128x128).bn, 128);
  EXPECT_EQ(ShapeOf(Sm90Tile::k128x256).bn, 256);
}

// The split-K cost model against what the H200 measured (0.7 us per
// 128x256 iteration): in-kernel split-K 21 on 128x128x65536 ran 37.7 us.
TEST(Heuristic, SplitKCostModel) {
  const double operands = 2.0 * 128 * 65536 * 2;  // A and B, bf16
  const double in_kernel_21 = SplitKCostIters(Sm90Tile::k128x128, 1, 1024, 21, false, operands);
  EXPECT_NEAR(in_kernel_21 * 0.7, 37.7, 5.0);
  // The reduction kernel: cheaper than in-kernel beyond a few splits, and
  // its best split count is where the k-loop meets the DRAM floor.
  double best = 1e30;
  int best_splits = 0;
  for (int s = 2; s <= 132; ++s) {
    const double c = SplitKCostIters(Sm90Tile::k128x128, 1, 1024, s, true, operands);
    if (c < best) best = c, best_splits = s;
  }
  EXPECT_LT(best, in_kernel_21 / 2);
  EXPECT_GE(best_splits, 48);
  EXPECT_LE(best_splits, 64);
  // Few splits of many tiles: the in-kernel reduction is the cheaper one.
  const double wide_ops = (256.0 + 4096) * 16384 * 2;
  EXPECT_LT(SplitKCostIters(Sm90Tile::k128x256, 32, 256, 4, false, wide_ops),
            SplitKCostIters(Sm90Tile::k128x256, 32, 256, 4, true, wide_ops));
}

TEST(Heuristic, GroupAndGrid) {
  EXPECT_EQ(ChooseGroupM(64, 32), 8);
  EXPECT_EQ(ChooseGroupM(3, 32), 3);
  EXPECT_EQ(PersistentGridSize(1024, kH200Sms), kH200Sms);
  EXPECT_EQ(PersistentGridSize(16, kH200Sms), 16);
  EXPECT_EQ(PersistentGridSize(0, kH200Sms), 1);
}

}  // namespace
}  // namespace gemm_kernels
