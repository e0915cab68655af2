// CPU tests of the FP8 rules of Gemm::CanImplement (no GPU needed), the
// scale counts, the FP8 launch heuristic and NormalizeFp8's swap.
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/config/heuristic.h"
#include "kernels/gemm.h"
#include "kernels/grouped_gemm.h"
#include "kernels/sm90/sm90_fp8_gemm.h"

namespace gemm_kernels {
namespace {

// Stand-in device addresses: CanImplement checks them, never reads them.
const void* Addr(uintptr_t a) { return reinterpret_cast<const void*>(a); }
const float* ScaleAddr(uintptr_t a) { return reinterpret_cast<const float*>(a); }

GemmArguments Fp8Args() {
  GemmArguments g;
  g.m = 300;
  g.n = 200;
  g.k = 512;
  g.a = {Addr(0x10000), DataType::kFp8E4m3, Layout::kRowMajor, 512, 0};
  g.b = {Addr(0x20000), DataType::kFp8E5m2, Layout::kColMajor, 512, 0};
  g.d = {Addr(0x30000), DataType::kBf16, Layout::kRowMajor, 200, 0};
  g.a_scale = {ScaleMode::kTensor, ScaleAddr(0x40000)};
  g.b_scale = {ScaleMode::kChannel, ScaleAddr(0x50000)};
  return g;
}

void ExpectRefused(const GemmArguments& g, absl::StatusCode code, const std::string& field) {
  const absl::Status s = Gemm::CanImplement(g);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s;
}

TEST(Fp8Args, ValidCombinationsPass) {
  for (DataType a : {DataType::kFp8E4m3, DataType::kFp8E5m2})
    for (DataType b : {DataType::kFp8E4m3, DataType::kFp8E5m2})
      for (DataType out : {DataType::kBf16, DataType::kFp16, DataType::kFp32})
        for (ScaleMode sa : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
          GemmArguments g = Fp8Args();
          g.a.dtype = a;
          g.b.dtype = b;
          g.d.dtype = out;
          g.a_scale.mode = sa;
          g.b_scale.mode = ScaleMode::kBlock;
          EXPECT_TRUE(Gemm::CanImplement(g).ok()) << Gemm::CanImplement(g);
        }
}

TEST(Fp8Args, RefusesMixingWithWideTypes) {
  GemmArguments g = Fp8Args();
  g.b.dtype = DataType::kBf16;
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "b.dtype");
}

TEST(Fp8Args, RefusesFp8Outputs) {
  GemmArguments g = Fp8Args();
  g.d.dtype = DataType::kFp8E4m3;
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "d.dtype");
  g = Fp8Args();
  g.beta = 1.0f;
  g.c = {Addr(0x60000), DataType::kFp8E4m3, Layout::kRowMajor, 200, 0};
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "c.dtype");
}

TEST(Fp8Args, NeedsScales) {
  GemmArguments g = Fp8Args();
  g.a_scale.mode = ScaleMode::kNone;
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "a_scale.mode");
  g = Fp8Args();
  g.b_scale.ptr = nullptr;
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "b_scale.ptr");
  g = Fp8Args();
  g.a_scale.ptr = ScaleAddr(0x40002);
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "a_scale.ptr");
}

TEST(Fp8Args, BlockScalesTakeAnyK) {
  // The last block along K is partial where K % 128 != 0.
  for (int64_t k : {1, 16, 127, 129, 400, 1000, 4000}) {
    for (ScaleMode sa : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock})
      for (ScaleMode sb : {ScaleMode::kTensor, ScaleMode::kChannel, ScaleMode::kBlock}) {
        GemmArguments g = Fp8Args();
        g.k = k;
        g.a.ld = g.b.ld = g.k;
        g.a_scale.mode = sa;
        g.b_scale.mode = sb;
        EXPECT_TRUE(Gemm::CanImplement(g).ok()) << "k " << k << ": " << Gemm::CanImplement(g);
      }
  }
}

TEST(Fp8Args, ScalesOnWideTypesAreRefused) {
  GemmArguments g = Fp8Args();
  g.a.dtype = g.b.dtype = DataType::kBf16;
  ExpectRefused(g, absl::StatusCode::kInvalidArgument, "a_scale.mode");
}

TEST(Fp8Args, EveryOperandLayoutPassesBlockScalesNeedARowMajorD) {
  // Operands that are not K-major run from K-major copies (Gemm::Initialize's
  // operand_copies), so CanImplement takes every operand layout.
  GemmArguments g = Fp8Args();
  g.a.layout = Layout::kColMajor;
  g.a.ld = g.m;
  EXPECT_TRUE(Gemm::CanImplement(g).ok()) << Gemm::CanImplement(g);
  g = Fp8Args();
  g.b.layout = Layout::kRowMajor;
  g.b.ld = g.n;
  EXPECT_TRUE(Gemm::CanImplement(g).ok()) << Gemm::CanImplement(g);
  g = Fp8Args();
  g.d.layout = Layout::kColMajor;
  g.d.ld = g.m;
  EXPECT_TRUE(Gemm::CanImplement(g).ok());  // tensor / channel scales swap with the operands
  g.a_scale.mode = ScaleMode::kBlock;
  ExpectRefused(g, absl::StatusCode::kUnimplemented, "d.layout");
}

TEST(Fp8Args, ScaleCounts) {
  GemmArguments g = Fp8Args();  // m 300, n 200, k 512
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kNone, nullptr}, true), 0);
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kTensor, nullptr}, true), 1);
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kChannel, nullptr}, true), 300);
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kChannel, nullptr}, false), 200);
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kBlock, nullptr}, true), 300 * 4);
  EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kBlock, nullptr}, false), 4 * 2);
  // ceil(K / 128) blocks along K: K = 1000 has 7 whole and one of 104.
  const int64_t ks[][2] = {{1, 1}, {127, 1}, {128, 1}, {129, 2}, {1000, 8}, {4000, 32}};
  for (const auto& [k, blocks] : ks) {
    g.k = k;
    EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kBlock, nullptr}, true), 300 * blocks) << k;
    EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kBlock, nullptr}, false), blocks * 2) << k;
    EXPECT_EQ(Gemm::ScaleCount(g, {ScaleMode::kChannel, nullptr}, true), 300) << k;
  }
}

TEST(Fp8Args, ColumnMajorDExchangesFormatsAndScales) {
  GemmArguments g = Fp8Args();
  g.d.layout = Layout::kColMajor;
  const Fp8Operands f = NormalizeFp8(g);
  EXPECT_EQ(f.a_dtype, DataType::kFp8E5m2);
  EXPECT_EQ(f.b_dtype, DataType::kFp8E4m3);
  EXPECT_EQ(f.a_scale.mode, ScaleMode::kChannel);
  EXPECT_EQ(f.b_scale.mode, ScaleMode::kTensor);
}

TEST(Fp8Args, GroupedFp8IsUnimplemented) {
  const GemmArguments g = Fp8Args();
  GroupedGemmArguments grouped;
  grouped.problems.push_back({g.m, g.n, g.k, g.a, g.b, g.c, g.d, 1.0f, 0.0f});
  const absl::Status s = GroupedGemm::CanImplement(grouped);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(std::string(s.message()).find("problems[0].a.dtype"), std::string::npos) << s;
}

TEST(Fp8Heuristic, TilesAndPromotion) {
  for (bool block : {false, true}) {
    // The promoting 128x128 kernel, data-parallel, one CTA per SM at most.
    const Sm90Fp8Launch l = ChooseSm90Fp8Launch(4096, 4096, 16384, 1, 132, block);
    EXPECT_EQ(l.launch.tile, Sm90Tile::k128x128);
    EXPECT_EQ(l.launch.schedule, Sm90Schedule::kDataParallel);
    EXPECT_EQ(l.promote_every, block ? 1 : kFp8PromoteEvery);
    EXPECT_EQ(l.launch.grid, 132);
  }
  // Fewer tiles than SMs: one CTA per tile.
  EXPECT_EQ(ChooseSm90Fp8Launch(256, 512, 1024, 1, 132, false).launch.grid, 8);
  // A forced tile is kept.
  const Sm90Tile wide = Sm90Tile::k128x256;
  EXPECT_EQ(ChooseSm90Fp8Launch(4096, 4096, 4096, 1, 132, false, &wide).launch.tile, wide);
}

}  // namespace
}  // namespace gemm_kernels
