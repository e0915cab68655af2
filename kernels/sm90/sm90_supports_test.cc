// CPU test of which normalized problems the Hopper kernel accepts (no GPU:
// Sm90Supports only inspects shapes, layouts and alignment), and of which
// tiles a hint forces and the grouped kernel is built for.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/problem.h"
#include "kernels/sm90/sm90_gemm.h"

namespace gemm_kernels {
namespace {

const void* P(uintptr_t v) { return reinterpret_cast<const void*>(v); }

GemmArguments Bf16(int64_t m, int64_t n, int64_t k) {
  GemmArguments a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.a = {P(0x10000), DataType::kBf16, Layout::kRowMajor, k, 0};
  a.b = {P(0x20000), DataType::kBf16, Layout::kColMajor, k, 0};
  a.d = {P(0x30000), DataType::kBf16, Layout::kRowMajor, n, 0};
  return a;
}

bool Supports(const GemmArguments& args, std::string* why = nullptr) {
  std::string w;
  const bool ok = Sm90Supports(Normalize(args), &w);
  if (why) *why = w;
  return ok;
}

TEST(Sm90Supports, AlignedBf16InEveryLayout) {
  for (Layout la : {Layout::kRowMajor, Layout::kColMajor}) {
    for (Layout lb : {Layout::kRowMajor, Layout::kColMajor}) {
      for (Layout ld : {Layout::kRowMajor, Layout::kColMajor}) {
        GemmArguments a = Bf16(256, 128, 64);
        a.a.layout = la;
        a.a.ld = la == Layout::kRowMajor ? 64 : 256;
        a.b.layout = lb;
        a.b.ld = lb == Layout::kRowMajor ? 128 : 64;
        a.d.layout = ld;
        a.d.ld = ld == Layout::kRowMajor ? 128 : 256;
        std::string why;
        EXPECT_TRUE(Supports(a, &why)) << why;
      }
    }
  }
}

TEST(Sm90Supports, RaggedShapesWithPaddedLeadingDimensions) {
  GemmArguments a = Bf16(127, 129, 7);
  a.a.ld = 8;    // 16 bytes
  a.b.ld = 8;
  a.d.ld = 129;  // D needs no TMA alignment
  EXPECT_TRUE(Supports(a));
}

TEST(Sm90Supports, RejectsWhatTmaCannotLoad) {
  GemmArguments a = Bf16(64, 64, 7);  // lda = 7 elements = 14 bytes
  std::string why;
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("A:"), std::string::npos) << why;
  a = Bf16(64, 64, 64);
  a.b.ptr = P(0x20008);  // 8-byte aligned base
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("B:"), std::string::npos) << why;
  a = Bf16(64, 64, 64);
  a.batch_count = 2;
  a.a.batch_stride = 64 * 64 + 4;  // 8 bytes off
  a.d.batch_stride = 64 * 64;
  EXPECT_FALSE(Supports(a));
}

TEST(Sm90Supports, Fp32NeedsTf32AndKMajorOperands) {
  GemmArguments a = Bf16(64, 64, 64);
  a.a.dtype = a.b.dtype = DataType::kFp32;
  std::string why;
  EXPECT_FALSE(Supports(a, &why));  // strict fp32
  EXPECT_NE(why.find("strict"), std::string::npos) << why;
  a.allow_tf32 = true;
  EXPECT_TRUE(Supports(a, &why)) << why;
  a.b.layout = Layout::kRowMajor;  // N-major B
  EXPECT_FALSE(Supports(a, &why));
  EXPECT_NE(why.find("K-major"), std::string::npos) << why;
}

// Every forcing hint names its own tile; the grouped kernel has the two
// cooperative tiles of 128 rows by 256 and 128 columns, so the other hints
// send a grouped launch to its loop of single launches.
TEST(Sm90Tiles, HintsForceTheirTileAndTheGroupedKernelHasTheCooperativeOnes) {
  EXPECT_FALSE(Sm90TileOf(TileHint::kAuto).has_value());
  const std::pair<TileHint, Sm90Tile> forced[] = {
      {TileHint::k128x256, Sm90Tile::k128x256},
      {TileHint::k128x128, Sm90Tile::k128x128},
      {TileHint::k128x128PingPong, Sm90Tile::k128x128PingPong},
      {TileHint::k128x64, Sm90Tile::k128x64},
      {TileHint::k192x192, Sm90Tile::k192x192}};
  for (const auto& [hint, tile] : forced) {
    ASSERT_TRUE(Sm90TileOf(hint).has_value());
    EXPECT_EQ(*Sm90TileOf(hint), tile);
  }
  EXPECT_TRUE(Sm90GroupedHasTile(Sm90Tile::k128x256));
  EXPECT_TRUE(Sm90GroupedHasTile(Sm90Tile::k128x128));
  EXPECT_FALSE(Sm90GroupedHasTile(Sm90Tile::k128x128PingPong));
  EXPECT_FALSE(Sm90GroupedHasTile(Sm90Tile::k128x64));
  EXPECT_FALSE(Sm90GroupedHasTile(Sm90Tile::k192x192));
}

// A grouped plan for a tile without a grouped kernel is refused before any
// device work, naming the tiles it has.
TEST(Sm90Tiles, GroupedPlanRefusesATileWithoutAGroupedKernel) {
  const std::vector<NormalizedProblem> problems = {Normalize(Bf16(64, 64, 64))};
  std::vector<uint8_t> image(Sm90GroupedWorkspaceSize(problems.size()));
  for (Sm90Tile tile : {Sm90Tile::k128x128PingPong, Sm90Tile::k128x64, Sm90Tile::k192x192}) {
    std::string error;
    EXPECT_EQ(MakeSm90GroupedPlanDeferred(problems, tile, 132, reinterpret_cast<void*>(0x40000),
                                          image.data(), &error),
              nullptr);
    EXPECT_NE(error.find("cooperative tile"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace gemm_kernels
